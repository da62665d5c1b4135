"""Long-range tasks of posenc.tasks (copy at a distance, associative recall, BOS windows) and the BOS
option of posenc.evaluate. Each layout is checked by reading the sequences back by brute force (which
bytes are planted where, what is scored), not by recomputing them the way the code builds them."""

import pytest
import torch

from posenc import data, evaluate, tasks
from posenc.model import TransformerLM

TEXT = data.stdlib_corpus(200_000)


def generator(seed=0):
    return torch.Generator().manual_seed(seed)


def test_bos_is_a_byte_the_corpus_never_holds_and_planted_symbols_are_rare():
    train, validation = data.stdlib_split(4_000_000)
    corpus = torch.cat([train, validation])
    assert not (corpus == tasks.BOS).any()
    assert (corpus >= 128).double().mean() < 1e-4  # the planted alphabets (128..255) are near-absent


def test_bos_windows_are_text_after_bos():
    tokens, targets = tasks.bos_windows(TEXT, 6, 40, generator=generator())
    assert tokens.shape == targets.shape == (6, 40)
    assert (tokens[:, 0] == tasks.BOS).all()
    assert torch.equal(tokens[:, 1:], targets[:, :-1])  # each input is the previous target
    text = bytes(TEXT.tolist())
    for row in targets:  # every row's targets are consecutive corpus bytes
        assert bytes(row.tolist()) in text


@pytest.mark.parametrize("distance", [16, (16, 90), "tensor"])
def test_copy_task_plants_one_block_twice_at_the_distance_and_scores_the_repeat(distance):
    batch, length, block = 32, 120, 16
    if distance == "tensor":
        distance = torch.arange(batch) + 20
    tokens, targets = tasks.copy_task(TEXT, batch, length, distance=distance, block=block, generator=generator())
    for row in range(batch):
        planted = (tokens[row] >= 128).nonzero().flatten().tolist()
        assert len(planted) == 2 * block and tokens[row, 0] == tasks.BOS
        first, second = planted[:block], planted[block:]
        d = second[0] - first[0]
        assert first == list(range(first[0], first[0] + block)) and second == [p + d for p in first]
        expected = distance if isinstance(distance, int) else (
            (16, 90) if isinstance(distance, tuple) else int(distance[row]))
        assert (d == expected) if isinstance(expected, int) else (expected[0] <= d <= expected[1])
        symbols = tokens[row, first]
        assert len(set(symbols.tolist())) == block  # distinct: each symbol has one earlier occurrence
        assert torch.equal(tokens[row, second], symbols)
        scored = (targets[row] != -100).nonzero().flatten().tolist()
        assert scored == second[:-1]  # the repeat's tokens after its first are predicted
        assert torch.equal(targets[row, scored], symbols[1:])


def test_copy_task_sources_spread_over_the_window_and_bad_distances_are_refused():
    tokens, _ = tasks.copy_task(TEXT, 400, 128, distance=20, block=8, generator=generator(1))
    sources = (tokens >= 128).double().argmax(dim=1)
    assert sources.min() <= 5 and sources.max() >= 95  # not always at one place
    for bad in (7, 120, (8, 120)):
        with pytest.raises(ValueError, match="distance"):
            tasks.copy_task(TEXT, 4, 128, distance=bad, block=8)
    with pytest.raises(ValueError, match="source"):
        tasks.copy_task(TEXT, 4, 128, distance=20, block=8, source=101)


def test_copy_task_scores_text_only_when_asked():
    _, only_task = tasks.copy_task(TEXT, 8, 64, distance=20, block=8, generator=generator(2))
    tokens, with_text = tasks.copy_task(TEXT, 8, 64, distance=20, block=8, score_text=True, generator=generator(2))
    assert int((only_task != -100).sum()) == 8 * 7
    kept = with_text != -100
    assert torch.equal(with_text[only_task != -100], only_task[only_task != -100])
    # text targets are kept, planted bytes are not targets unless scored
    assert ((with_text[kept] < 128) | (only_task[kept] != -100)).all()
    assert int(kept.sum()) > 8 * 40


@pytest.mark.parametrize("span", [None, 40, (20, 60)])
def test_recall_task_queries_every_key_once_and_scores_its_value(span):
    batch, length, pairs = 24, 100, 6
    tokens, targets = tasks.recall_task(TEXT, batch, length, pairs=pairs, span=span, generator=generator(3))
    queries_at = length - 2 * pairs
    for row in range(batch):
        t = tokens[row].tolist()
        assert t[0] == tasks.BOS
        keys_at = [i for i, x in enumerate(t) if 128 <= x < 192]
        stored = [i for i in keys_at if i < queries_at]
        assert len(stored) == pairs and set(keys_at) - set(stored) == set(range(queries_at, length, 2))
        assert len({t[i] for i in stored}) == pairs  # distinct keys
        value_of = {t[i]: t[i + 1] for i in stored}
        assert all(192 <= v < 256 for v in value_of.values())
        if span is not None:
            low = queries_at - (span if isinstance(span, int) else span[1])
            assert min(stored) >= low
        scored = (targets[row] != -100).nonzero().flatten().tolist()
        assert scored == list(range(queries_at, length, 2))
        assert [targets[row, i].item() for i in scored] == [value_of[t[i]] for i in scored]
        assert [t[i + 1] for i in scored] == [value_of[t[i]] for i in scored]  # the answers are in the window


def test_recall_task_can_end_inside_the_window():
    ends = torch.tensor([40, 64, 100, 33])
    tokens, targets = tasks.recall_task(TEXT, 4, 100, pairs=4, end=ends, generator=generator(4))
    for row, end in enumerate(ends.tolist()):
        scored = (targets[row] != -100).nonzero().flatten().tolist()
        assert scored == list(range(end - 8, end, 2))
        assert not (tokens[row, end:] >= 128).any()  # only text after the queries
        assert int(((tokens[row] >= 128) & (tokens[row] < 192)).sum()) == 8
    with pytest.raises(ValueError, match="end"):
        tasks.recall_task(TEXT, 2, 64, pairs=8, end=20)


def test_recall_task_refuses_a_span_that_does_not_fit():
    with pytest.raises(ValueError, match="span"):
        tasks.recall_task(TEXT, 2, 64, pairs=8, span=60)
    with pytest.raises(ValueError, match="span"):
        tasks.recall_task(TEXT, 2, 64, pairs=8, span=10)


def test_token_losses_with_bos_read_bos_then_the_window():
    torch.manual_seed(0)
    model = TransformerLM(256, 32, 1, 2, position="rope").eval()
    validation = TEXT[:5000]
    losses = evaluate.token_losses(model, validation, 50, n_windows=3, bos=tasks.BOS)
    starts = evaluate.window_starts(validation.numel(), 50, 3)
    for w, start in enumerate(starts.tolist()):  # by hand: BOS, then bytes start .. start+48
        window = validation[start:start + 50]
        inputs = torch.cat([torch.tensor([tasks.BOS]), window[:-1]])[None]
        logp = model(inputs).log_softmax(-1)[0]
        expected = -logp[torch.arange(50), window]
        torch.testing.assert_close(losses[w], expected, atol=1e-5, rtol=1e-5)
    truncated = evaluate.truncated_token_losses(model, validation, 50, 20, n_windows=3, bos=tasks.BOS)
    torch.testing.assert_close(truncated[:, :20], losses[:, :20], atol=1e-5, rtol=1e-5)
    start = starts[0].item()  # token 35 is scored in the segment starting at 20 (stride 5): BOS + 15 bytes
    inputs = torch.cat([torch.tensor([tasks.BOS]), validation[start + 20:start + 35]])[None]
    expected = -model(inputs).log_softmax(-1)[0, -1, validation[start + 35]]
    torch.testing.assert_close(truncated[0, 35], expected, atol=1e-5, rtol=1e-5)


# ---- measures of context use -------------------------------------------------------------------------

class InductionOracle(torch.nn.Module):
    """A hand-written induction head: predicts, at each position, the token that followed the previous
    occurrence of the current token (token 0 when there is none)."""

    def __init__(self):
        super().__init__()
        self.anchor = torch.nn.Parameter(torch.zeros(1))  # so that next(parameters()) gives a device

    def forward(self, tokens):
        out = torch.zeros(*tokens.shape, 256)
        for b, row in enumerate(tokens.tolist()):
            last_seen = {}
            for t, token in enumerate(row):
                prediction = row[last_seen[token] + 1] if token in last_seen else 0
                out[b, t, prediction] = 1.0
                last_seen[token] = t
        return out


def test_task_scores_of_an_induction_oracle_and_of_its_truncated_reading():
    oracle = InductionOracle()
    tokens, targets = tasks.copy_task(TEXT, 16, 200, distance=(150, 180), block=8, source=torch.full((16,), 10),
                                      generator=generator(5))
    assert evaluate.task_scores(oracle, tokens, targets) == {"token_accuracy": 1.0, "exact_match": 1.0}
    # read through the last 100 tokens, the source (150+ back) is gone: nothing can be retrieved
    assert evaluate.task_scores(oracle, tokens, targets, context=100, bos=tasks.BOS)["token_accuracy"] == 0.0
    near, near_targets = tasks.copy_task(TEXT, 16, 200, distance=30, block=8, source=torch.full((16,), 150),
                                         generator=generator(6))
    truncated = evaluate.task_scores(oracle, near, near_targets, context=100, bos=tasks.BOS)
    assert truncated == {"token_accuracy": 1.0, "exact_match": 1.0}  # the source is inside the last 100
    with pytest.raises(ValueError, match="context"):
        evaluate.task_scores(oracle, near, near_targets, context=15)
    recall, recall_targets = tasks.recall_task(TEXT, 8, 120, pairs=5, generator=generator(7))
    assert evaluate.task_scores(oracle, recall, recall_targets)["exact_match"] == 1.0


def test_long_short_difference_and_icl_score_by_hand():
    full = torch.tensor([[1.0, 2.0, 0.5, 3.0], [1.0, 2.0, 1.0, 1.0]])
    short = torch.tensor([[1.0, 2.0, 3.0, 3.5], [1.0, 2.0, 1.5, 0.0]])
    out = evaluate.long_short_difference(full, short)
    lsd = [2.5, 0.5, 0.5, -1.0]  # truncated - full on the two last indices, where the readings differ
    assert out["tokens"] == 4 and out["mean"] == pytest.approx(sum(lsd) / 4)
    assert out["key_fraction"] == pytest.approx(0.25) and out["key_loss"] == pytest.approx(0.5)
    assert evaluate.long_short_difference(full, short, threshold=3)["key_loss"] is None
    with pytest.raises(ValueError):
        evaluate.long_short_difference(full, full)
    assert evaluate.in_context_learning_score(full, 0, 3) == pytest.approx((3.0 + 1.0) / 2 - 1.0)
    with pytest.raises(ValueError, match="early"):
        evaluate.in_context_learning_score(full, 3, 1)


def test_development_split_is_apart_from_training_and_validation():
    train, development, validation = data.stdlib_splits(1_000_000)
    old_train, old_validation = data.stdlib_split(1_000_000)
    assert torch.equal(validation, old_validation)
    assert train.numel() + development.numel() == old_train.numel() and development.numel() > 0
    files_train, files_validation = data.split_files(1_000_000)
    held = files_train[5::10]
    assert development.numel() == sum(p.stat().st_size for p in held)


def test_passkey_task_question_repeats_the_needle_and_the_key_is_scored():
    train, validation = data.stdlib_split(4_000_000)
    assert b"pass_key" not in bytes(torch.cat([train, validation]).to(torch.uint8).tolist())
    tokens, targets = tasks.passkey_task(TEXT, 12, 150, distance=(30, 120), generator=generator(8))
    for row in range(12):
        text = bytes(tokens[row, 1:].tolist()).decode("latin-1")
        assert tokens[row, 0] == tasks.BOS and text.count("pass_key = ") == 2
        first, second = text.index("pass_key = "), text.rindex("pass_key = ")
        key = text[second + 11:]
        assert len(key) == 5 and key.isdigit() and text[first + 11:first + 17] == key + "\n"
        assert 30 <= second - first <= 120
        scored = (targets[row] != -100).nonzero().flatten().tolist()
        assert scored == list(range(144, 149)) and bytes(targets[row, scored].tolist()).decode() == key
    with pytest.raises(ValueError, match="distance"):
        tasks.passkey_task(TEXT, 2, 150, distance=140)


def test_window_mean_loss_weighs_every_window_the_same():
    from posenc.train import next_token_loss
    logits = torch.randn(3, 5, 7, generator=generator(9))
    targets = torch.tensor([[1, 2, 3, 4, 5], [-100, -100, 6, -100, -100], [-100] * 5])
    logp = logits.log_softmax(-1)
    first = -sum(logp[0, t, targets[0, t]] for t in range(5)) / 5
    second = -logp[1, 2, 6]
    torch.testing.assert_close(next_token_loss(logits, targets, window_mean=True), (first + second) / 2)
    torch.testing.assert_close(next_token_loss(logits, targets), (first * 5 + second) / 6)


def test_asking_for_more_text_than_the_corpus_holds_warns():
    with pytest.warns(UserWarning, match="exceeds the standard library"):
        data.stdlib_split(10 ** 9)


def test_paired_p_value_at_the_t_tables_critical_value_and_holm_by_hand():
    from posenc.stats import holm, paired_interval, paired_p_value
    # differences with mean 2.776 * sd / sqrt(5): t = 2.776 with 4 degrees of freedom, p = 0.05 (t table)
    base = [-1.0, -0.5, 0.0, 0.5, 1.0]
    sd = (sum(x * x for x in base) / 4) ** 0.5
    shift = 2.7764451 * sd / 5 ** 0.5
    a, b = {i: x + shift for i, x in enumerate(base)}, {i: 0.0 for i in range(5)}
    assert paired_p_value(a, b) == pytest.approx(0.05, abs=1e-4)
    assert paired_interval(a, b)[1] == pytest.approx(0.0, abs=1e-4)  # the interval's edge touches 0
    assert paired_p_value({0: 1, 1: 1}, {0: 1, 1: 1}) == 1.0
    # Holm with m = 4 at 0.05: thresholds 0.0125, 0.0167, 0.025, 0.05
    decided = holm({"a": 0.01, "b": 0.04, "c": 0.012, "d": 0.03})
    assert decided == {"a": True, "c": True, "b": False, "d": False}
    assert holm({"a": 0.01, "b": 0.016, "c": 0.02, "d": 0.04}) == {"a": True, "b": True, "c": True, "d": True}


def test_clopper_pearson_against_closed_forms_and_a_table():
    from posenc.stats import clopper_pearson
    assert clopper_pearson(0, 512)[1] == pytest.approx(1 - 0.025 ** (1 / 512), rel=1e-9)  # closed form at 0
    assert clopper_pearson(10, 10)[0] == pytest.approx(0.025 ** (1 / 10), rel=1e-9)  # and at n
    low, high = clopper_pearson(5, 10)  # the textbook value for 5 of 10: [0.187, 0.813]
    assert (round(low, 3), round(high, 3)) == (0.187, 0.813)
    with pytest.raises(ValueError, match="successes"):
        clopper_pearson(6, 5)


def test_sign_test_against_binomial_tails_by_hand():
    from posenc.stats import sign_test
    assert sign_test(7, 0) == pytest.approx(2 / 2 ** 7, rel=1e-12)  # seven discordant pairs, all one way
    assert sign_test(1, 3) == sign_test(3, 1) == pytest.approx(10 / 16, rel=1e-12)  # 2 P(X <= 1) = (1 + 4) / 16
    assert sign_test(4, 4) == 1.0 and sign_test(0, 0) == 1.0  # capped at 1; no discordant pair
    assert sign_test(8, 0) < 0.05 < sign_test(5, 0)  # 2/256 resolved, 2/32 not
    with pytest.raises(ValueError, match="losses"):
        sign_test(3, -1)


def test_sign_flip_p_enumerates_the_flips_by_hand():
    from posenc.stats import sign_flip_p
    assert sign_flip_p([1] * 8) == 2 / 256  # only all + and all - reach |sum| 8
    assert sign_flip_p([0, 2, 3, 1, 2, 1, 1, 1]) == 4 / 256  # the 0 flips freely: 2 x 2
    # 3, 1, -1: |sum| >= 3 for (3,1,-1), (3,-1,1), (3,1,1) and their mirrors: 6 of 8
    assert sign_flip_p([3, 1, -1]) == 6 / 8
    assert sign_flip_p([1, -1]) == 1.0 and sign_flip_p([0.1, 0.2]) == 2 / 4
    with pytest.raises(ValueError, match="differences"):
        sign_flip_p([])


def test_unanimous_note_gives_the_exact_bound_for_pooled_seeds():
    from posenc.studies import length_generalisation as lg
    note = lg.unanimous_note({"config": {"eval_samples": 512, "seeds": [0, 1, 2, 3, 4]}})
    assert "2560 decoded" in note and f"{1 - 0.025 ** (1 / 2560):.1%}" in note  # closed form at 0 successes


def _lg_record():
    """Three seeds of RoPE that split (1.0, 0.95, 0.0 at N = 8 and 0.9, 0.0, 0.0 at 10), by hand."""
    def run(seed, probes, final):
        return {"method": "rope", "seed": seed, "exact_match": {"t": final},
                "probes": {"t": [{"step": 100, "exact_match": probes}]}}
    runs = [run(0, {"8": 0.5, "10": 0.1}, {"8": 1.0, "10": 0.9}),
            run(1, {"8": 0.99, "10": 0.3}, {"8": 0.95, "10": 0.0}),
            run(2, {"8": 0.2, "10": 0.0}, {"8": 0.0, "10": 0.0})]
    return {"config": {"train_max": 8, "methods": ["rope"], "seeds": [0, 1, 2]}, "runs": runs}


def test_mastery_reads_each_seed_at_its_first_checkpoint_past_the_threshold():
    from posenc.studies import length_generalisation as lg
    record = _lg_record()
    # seed 0 reaches 0.99 only at the end (0.9 at n = 10); seed 1 touches it at its probe and falls to
    # 0.95 on the final scores: one probe is noise, not mastery (review P3-m8); seed 2 never
    assert lg.mastery(record, "rope", "t", 0.99, 10) == {"reached": 1, "seeds": 3, "beyond": [0.9]}
    assert lg.mastery(record, "rope", "t", 0.95, 10) == {"reached": 2, "seeds": 3, "beyond": [0.9, 0.3]}
    assert lg.mastery(record, "rope", "t", 1.0, 10) == {"reached": 1, "seeds": 3, "beyond": [0.9]}


def test_seed_counts_count_seeds_and_give_the_exact_interval():
    from posenc.stats import clopper_pearson
    from posenc.studies import length_generalisation as lg
    counts = lg.seed_counts(_lg_record(), "exact_match", "t", 10, 0.85)
    assert counts["rope"][:2] == (1, 3)
    low, high = counts["rope"][2]
    assert low == pytest.approx(1 - 0.975 ** (1 / 3), rel=1e-9)  # closed form for 1 of 3: lower end
    assert high == pytest.approx(clopper_pearson(1, 3)[1])


def test_render_marks_bos_controls_and_task_symbols():
    row = torch.tensor([tasks.BOS, ord("a"), 10, 9, 0, 127, 128, 191, 255, ord(" ")])
    assert tasks.render(row) == "\u2402a\u23ce\u21e5\u00b7\u00b7{80}{bf}{ff} "


def test_out_of_distribution_averages_seeds_and_lengths_beyond_n_for_either_metric():
    from posenc.studies import length_generalisation as lg
    runs = [{"method": "rope", "seed": 0, "exact_match": {"t": {"8": 1.0, "10": 0.2, "16": 0.0}},
             "token_accuracy": {"t": {"8": 1.0, "10": 0.8, "16": 0.6}}},
            {"method": "rope", "seed": 1, "exact_match": {"t": {"8": 1.0, "10": 0.4, "16": 0.2}},
             "token_accuracy": {"t": {"8": 1.0, "10": 0.7, "16": 0.5}}}]
    record = {"config": {"train_max": 8}, "runs": runs}
    assert lg.out_of_distribution(record, "rope", "t") == pytest.approx((0.2 + 0.0 + 0.4 + 0.2) / 4)
    assert lg.out_of_distribution(record, "rope", "t", "token_accuracy") == pytest.approx(2.6 / 4)
    runs.append({"method": "rope", "seed": 2, "exact_match": {"t": {"8": 1.0, "10": None, "16": None}}})
    assert lg.out_of_distribution(record, "rope", "t") is None  # a seed that cannot run beyond N


def test_out_of_distribution_by_seed_keeps_each_seed_apart():
    from posenc.studies import length_generalisation as lg
    runs = [{"method": "rope", "seed": s, "token_accuracy": {"t": {"8": 1.0, "10": a, "16": b}}}
            for s, a, b in [(0, 0.8, 0.6), (1, 0.7, 0.5)]]
    record = {"config": {"train_max": 8}, "runs": runs}
    by_seed = lg.out_of_distribution_by_seed(record, "rope", "t", "token_accuracy")
    assert by_seed == pytest.approx({0: 0.7, 1: 0.6})


def test_teacher_forced_run_records_both_scorings_and_leaves_free_running_unchanged():
    """Review P3-m9: the "teacher-forced" preset's runs keep the free-running scores a plain run gives
    (the same model and sequences) and add teacher-forced accuracy by index, one value per index."""
    from posenc.studies import length_generalisation as lg
    config = dict(lg.PRESETS["tiny"], tasks=[lg.task_variant("reverse", 2, False, 8)])
    key = {"method": "none", "seed": 0}
    plain, forced = lg.run(config, key, None), lg.run(dict(config, teacher_forced=True), key, None)
    assert "teacher_forced" not in plain
    for n in config["test_lengths"]:
        assert forced["by_position"]["reverse, binary"][str(n)] == plain["by_position"]["reverse, binary"][str(n)]
        row = forced["teacher_forced"]["reverse, binary"][str(n)]
        assert len(row) == n and all(0.0 <= value <= 1.0 for value in row)
    record = {"runs": [dict(forced, method="none"),
                       {"method": "none", "teacher_forced": {"t": {"4": [1.0, 0.5]}}, "by_position": {}}]}
    record["runs"][0]["teacher_forced"] = {"t": {"4": [0.0, 0.25]}}
    assert lg.by_position(record, "none", "t", 4, scoring="teacher_forced") == [0.5, 0.375]
    assert lg.PRESETS["teacher-forced"]["tasks"] == [lg.PRESETS["full"]["tasks"][1]]
    assert {k: v for k, v in lg.PRESETS["teacher-forced"].items() if k not in ("methods", "tasks", "teacher_forced")} \
        == {k: v for k, v in lg.PRESETS["full"].items() if k not in ("methods", "tasks")}
