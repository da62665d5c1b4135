"""Synthetic tasks, free-running scoring, randomized positions (posenc.tasks), and the explicit
``positions`` argument of TransformerLM / MultiHeadAttention. Expected values come from independent
computations: formulas written out here, hand-made scripted models, and the default-position paths."""

import math

import pytest
import torch
import torch.nn.functional as F

from posenc import POSITION_METHODS, MultiHeadAttention, TransformerLM, tasks
from posenc.alibi import alibi_slopes
from posenc.relative import t5_relative_bucket

RELATIVE_METHODS = ("none", "t5", "rope", "alibi")  # scores depend on position differences only


def make_model(position, *, causal=True, vocab=11, seed=0):
    torch.manual_seed(seed)
    return TransformerLM(vocab, 32, 2, 4, position=position, max_len=200, causal=causal).eval()


def random_tokens(batch, seq, vocab=11, seed=1):
    return torch.randint(0, vocab, (batch, seq), generator=torch.Generator().manual_seed(seed))


def increasing_positions(batch, seq, seed=2):
    gaps = torch.randint(1, 6, (batch, seq), generator=torch.Generator().manual_seed(seed))
    return gaps.cumsum(dim=1) - 1


# ---- tasks ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("task", tasks.TASKS)
@pytest.mark.parametrize("distinct", [False, True])
def test_task_batch_layout(task, distinct):
    alphabet, n = 12, 7
    tokens, targets = tasks.task_batch(task, 50, n, alphabet=alphabet, distinct=distinct,
                                       generator=torch.Generator().manual_seed(0))
    assert tokens.shape == targets.shape == (50, 2 * n + 1)
    for row, target in zip(tokens.tolist(), targets.tolist()):
        symbols, separator, answer = row[:n], row[n], row[n + 1:]
        assert separator == alphabet and all(0 <= s < alphabet for s in symbols)
        assert answer == (symbols if task == "copy" else symbols[::-1])
        assert target == [-100] * n + answer + [-100]  # slot n + i predicts answer token i
        if distinct:
            assert len(set(symbols)) == n


def test_small_alphabets_repeat_and_distinct_ones_do_not():
    tokens, _ = tasks.task_batch("copy", 200, 10, alphabet=2, generator=torch.Generator().manual_seed(0))
    assert set(tokens[:, :10].unique().tolist()) == {0, 1}
    # P(no repeated symbol in 10 draws from 16) = 16!/(6! 16^10) ~ 0.026: repeats are the norm
    no_repeat = math.perm(16, 10) / 16 ** 10
    assert no_repeat < 0.03
    tokens, _ = tasks.task_batch("copy", 200, 16, alphabet=16, distinct=True,
                                 generator=torch.Generator().manual_seed(0))
    assert all(sorted(row) == list(range(16)) for row in tokens[:, :16].tolist())


def test_length_range_and_errors():
    lengths = {tasks.task_batch("copy", 1, (3, 5), alphabet=4, generator=torch.Generator().manual_seed(s))[0]
               .shape[1] for s in range(40)}
    assert lengths == {7, 9, 11}
    with pytest.raises(ValueError, match="n <= alphabet"):
        tasks.task_batch("copy", 2, 5, alphabet=4, distinct=True)
    with pytest.raises(ValueError, match="task"):
        tasks.task_batch("sort", 2, 5, alphabet=4)
    with pytest.raises(ValueError, match="low <= high"):
        tasks.task_batch("copy", 2, (5, 3), alphabet=4)
    assert tasks.vocab_size(2) == 3


def test_random_positions_are_sorted_distinct_and_in_range():
    positions = tasks.random_positions(300, 9, 20, generator=torch.Generator().manual_seed(0))
    assert positions.shape == (300, 9) and positions.dtype == torch.long
    assert bool((positions[:, 1:] > positions[:, :-1]).all())
    assert int(positions.min()) >= 0 and int(positions.max()) <= 19
    # the first position is the minimum of 9 draws from 20: P(first = 0) = 9/20
    assert abs(float((positions[:, 0] == 0).float().mean()) - 9 / 20) < 0.1
    with pytest.raises(ValueError, match="max_position"):
        tasks.random_positions(1, 21, 20)


def test_score_answers_by_hand():
    predicted = torch.tensor([[1, 0, 1], [1, 1, 1], [0, 0, 0], [1, 0, 0]])
    answers = torch.tensor([[1, 0, 1], [1, 0, 1], [1, 0, 0], [1, 0, 0]])
    scores = tasks.score_answers(predicted, answers)
    assert scores["exact_match"] == 2 / 4
    assert scores["token_accuracy"] == 10 / 12
    assert scores["by_position"] == [3 / 4, 3 / 4, 4 / 4]


class ScriptedCopier(torch.nn.Module):
    """A stand-in LM for copy: at answer index i it outputs x_i if every answer token it has read so far
    is right, else the separator (always wrong); rows whose first symbol is 1 get index 1 wrong."""

    def __init__(self, alphabet):
        super().__init__()
        self.alphabet, self.weight = alphabet, torch.nn.Parameter(torch.zeros(1))

    def new_cache(self):
        return []

    def forward(self, tokens, *, cache=None, positions=None):
        history = torch.cat(cache + [tokens], dim=1) if cache is not None else tokens
        if cache is not None:
            cache.append(tokens)
        first = history.shape[1] - tokens.shape[1]
        logits = torch.zeros(tokens.shape[0], tokens.shape[1], self.alphabet + 1)
        n = int((history[0] == self.alphabet).nonzero()[0])  # the separator's index
        for b in range(tokens.shape[0]):
            for t in range(first, history.shape[1]):
                i = t - n  # the answer index this slot predicts
                if not 0 <= i < n:
                    continue
                read_right = history[b, n + 1:t + 1].tolist() == history[b, :i].tolist()
                right = read_right and not (i == 1 and int(history[b, 0]) == 1)
                logits[b, t - first, int(history[b, i]) if right else self.alphabet] = 1.0
        return logits


def test_free_running_versus_teacher_forcing():
    """Exact match agrees; token and per-index accuracy differ once a mistake is fed back."""
    alphabet, n = 3, 6
    model = ScriptedCopier(alphabet)
    tokens, _ = tasks.task_batch("copy", 90, n, alphabet=alphabet, generator=torch.Generator().manual_seed(0))
    answers = tokens[:, n + 1:]
    flawed = (tokens[:, 0] == 1).float().mean().item()
    assert 0.1 < flawed < 0.6
    free = tasks.score_answers(tasks.greedy_answers(model, tokens[:, :n + 1], n), answers)
    forced = tasks.score_answers(tasks.teacher_forced_answers(model, tokens), answers)
    assert free["exact_match"] == pytest.approx(1 - flawed) == forced["exact_match"]
    assert forced["token_accuracy"] == pytest.approx(1 - flawed / n)
    assert free["token_accuracy"] == pytest.approx(1 - flawed * (n - 1) / n)
    assert free["by_position"] == pytest.approx([1.0] + [1 - flawed] * (n - 1))
    assert forced["by_position"] == pytest.approx([1.0, 1 - flawed] + [1.0] * (n - 2))


def test_evaluate_task_scores_both_ways_on_the_same_sequences():
    """``teacher_forced=True`` adds the teacher-forced scores of the very sequences it decodes: the scripted
    copier's one planted mistake (index 1, rows starting with 1) spreads free-running, not forced."""
    alphabet, n, samples = 3, 6, 90
    model = ScriptedCopier(alphabet)
    scores = tasks.evaluate_task(model, "copy", n, alphabet=alphabet, samples=samples, batch_size=40,
                                 generator=torch.Generator().manual_seed(5), teacher_forced=True)
    generator = torch.Generator().manual_seed(5)
    rows = [tasks.task_batch("copy", r, n, alphabet=alphabet, generator=generator)[0] for r in (40, 40, 10)]
    flawed = float((torch.cat(rows)[:, 0] == 1).double().mean())
    assert 0.1 < flawed < 0.6
    assert scores["by_position"] == pytest.approx([1.0] + [1 - flawed] * (n - 1))
    assert scores["teacher_forced"]["by_position"] == pytest.approx([1.0, 1 - flawed] + [1.0] * (n - 2))
    assert scores["teacher_forced"]["exact_match"] == pytest.approx(scores["exact_match"])
    plain = tasks.evaluate_task(model, "copy", n, alphabet=alphabet, samples=samples, batch_size=40,
                                generator=torch.Generator().manual_seed(5))
    assert "teacher_forced" not in plain and plain["by_position"] == scores["by_position"]


@pytest.mark.parametrize("randomized", [False, True])
@pytest.mark.parametrize("position", POSITION_METHODS)
def test_greedy_answers_with_cache_equal_rerunning_the_whole_sequence(position, randomized):
    model = make_model(position, vocab=5)
    n = 5
    tokens, _ = tasks.task_batch("reverse", 4, n, alphabet=4, generator=torch.Generator().manual_seed(3))
    positions = tasks.random_positions(4, 2 * n + 1, 40, generator=torch.Generator().manual_seed(4)) \
        if randomized else None
    sequence = tokens[:, :n + 1]
    with torch.no_grad():
        for _ in range(n):  # the slow way: the full forward pass at every step
            at = None if positions is None else positions[:, :sequence.shape[1]]
            next_token = model(sequence, positions=at)[:, -1].argmax(dim=-1, keepdim=True)
            sequence = torch.cat([sequence, next_token], dim=1)
    fast = tasks.greedy_answers(model, tokens[:, :n + 1], n, positions=positions)
    assert torch.equal(fast, sequence[:, n + 1:])


def test_evaluate_task_on_a_perfect_copier_and_its_variants():
    scores = tasks.evaluate_task(ScriptedCopier(4), "copy", 5, alphabet=4, samples=40, batch_size=16,
                                 generator=torch.Generator().manual_seed(0))
    assert 0 < scores["exact_match"] < 1 and len(scores["by_position"]) == 5
    assert scores["by_position"][0] == 1.0


def test_randomized_wrapper_passes_sorted_positions_in_range():
    seen = []

    class Spy(torch.nn.Module):
        def forward(self, tokens, positions=None):
            seen.append(positions)
            return torch.zeros(*tokens.shape, 3)

    wrapper = tasks.RandomizedPositions(Spy(), 50, seed=0)
    wrapper(torch.zeros(4, 7, dtype=torch.long))
    wrapper(torch.zeros(4, 7, dtype=torch.long))
    first, second = seen
    assert first.shape == (4, 7) and bool((first[:, 1:] > first[:, :-1]).all()) and int(first.max()) < 50
    assert not torch.equal(first, second)  # fresh positions at every call


# ---- explicit positions in the model ----------------------------------------------------------------


@pytest.mark.parametrize("position", POSITION_METHODS)
def test_default_positions_equal_explicit_arange(position):
    model, tokens = make_model(position), random_tokens(2, 13)
    with torch.no_grad():
        expected = model(tokens)
        torch.testing.assert_close(model(tokens, positions=torch.arange(13)), expected)
        torch.testing.assert_close(model(tokens, positions=torch.arange(13)[None].expand(2, -1)), expected)


@pytest.mark.parametrize("position", POSITION_METHODS)
def test_offset_positions_equal_the_cache_path(position):
    """Tokens 5.. after a cached prefix sit at positions 5..: the same as explicit positions arange + 5
    for the suffix alone, for the methods that read absolute positions; and a cache filled with explicit
    positions gives the full pass at those positions."""
    model, tokens = make_model(position), random_tokens(2, 12)
    positions = increasing_positions(2, 12)
    with torch.no_grad():
        cache = model.new_cache()
        model(tokens[:, :5], cache=cache)
        after_prefix = model(tokens[:, 5:], cache=cache)
        cache = model.new_cache()
        parts = [model(tokens[:, :5], cache=cache, positions=positions[:, :5])]
        parts += [model(tokens[:, t:t + 1], cache=cache, positions=positions[:, t:t + 1]) for t in range(5, 12)]
        full = model(tokens, positions=positions)
        torch.testing.assert_close(model(tokens, positions=torch.arange(12))[:, 5:], after_prefix)
        torch.testing.assert_close(torch.cat(parts, dim=1), full)
        if position in ("sinusoidal", "learned"):  # the suffix alone at 5.. has the prefix's absolute rows
            alone = model(tokens[:, 5:], positions=torch.arange(5, 12))
            assert not torch.allclose(alone, model(tokens[:, 5:]))


@pytest.mark.parametrize("position", RELATIVE_METHODS)
def test_relative_methods_ignore_a_common_shift(position):
    model, tokens = make_model(position), random_tokens(2, 10)
    positions = increasing_positions(2, 10)
    with torch.no_grad():
        torch.testing.assert_close(model(tokens, positions=positions + 37), model(tokens, positions=positions))
        if position != "none":  # but they do read the gaps
            assert not torch.allclose(model(tokens, positions=positions), model(tokens))


@pytest.mark.parametrize("position", ("sinusoidal", "learned"))
def test_absolute_methods_add_the_table_rows_at_the_positions(position):
    model, tokens = make_model(position), random_tokens(2, 9)
    positions = increasing_positions(2, 9)
    if position == "sinusoidal":  # the formula, in float64
        p = positions.double()[..., None]
        i = torch.arange(16, dtype=torch.float64)
        angle = p / 10000.0 ** (2 * i / 32)
        rows = torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(-2) * 0.02 * 2 ** 0.5
    else:
        rows = torch.stack([model.absolute.weight[row] for row in positions.tolist()]).double()
    with torch.no_grad():
        x = model.token_embedding(tokens) + rows.float()
        for block in model.blocks:  # their attention layers have no position method
            x = block(x)
        expected = model.head(model.ln_final(x))
        torch.testing.assert_close(model(tokens, positions=positions), expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("position", POSITION_METHODS)
def test_permuting_tokens_with_their_positions_permutes_the_output(position):
    """Without a causal mask, a token's output depends on its position, not its index in the tensor."""
    model, tokens = make_model(position, causal=False), random_tokens(2, 10)
    positions = increasing_positions(1, 10)[0]
    permutation = torch.randperm(10, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        expected = model(tokens, positions=positions)[:, permutation]
        torch.testing.assert_close(model(tokens[:, permutation], positions=positions[permutation]), expected)


def _attention_inputs(attention, seq, seed=6):
    x = torch.randn(1, seq, 16, generator=torch.Generator().manual_seed(seed))
    q, k, v = attention.qkv(x).view(1, seq, 3, 2, 8).permute(2, 0, 3, 1, 4)
    return x, q, k, v


def test_rope_weights_depend_only_on_position_differences():
    torch.manual_seed(0)
    attention = MultiHeadAttention(16, 2, position="rope")
    x, _, _, _ = _attention_inputs(attention, 4)
    with torch.no_grad():
        weights = lambda p: attention(x, positions=torch.tensor(p), need_weights=True)[1]
        torch.testing.assert_close(weights([0, 3, 4, 9]), weights([100, 103, 104, 109]))
        assert not torch.allclose(weights([0, 3, 4, 9]), weights([0, 3, 5, 9]))


@pytest.mark.parametrize("position", ("alibi", "t5"))
def test_bias_methods_read_key_minus_query_positions(position):
    torch.manual_seed(0)
    attention = MultiHeadAttention(16, 2, position=position)
    seq, positions = 5, torch.tensor([0, 2, 3, 40, 41])
    x, q, k, _ = _attention_inputs(attention, seq)
    relative = positions[None, :] - positions[:, None]  # [query, key]: key_pos - query_pos
    if position == "alibi":
        bias = -alibi_slopes(2)[:, None, None] * relative.abs().float()
    else:
        buckets = t5_relative_bucket(relative, bidirectional=False)
        bias = attention.t5_bias.table.weight[buckets].permute(2, 0, 1)
    scores = q[0] @ k[0].transpose(-2, -1) / math.sqrt(8) + bias
    scores = scores.masked_fill(torch.ones(seq, seq).triu(1).bool(), float("-inf"))
    with torch.no_grad():
        weights = attention(x, positions=positions, need_weights=True)[1]
        torch.testing.assert_close(weights[0], F.softmax(scores, dim=-1).detach())
        plain = attention(x, positions=positions)
        torch.testing.assert_close(plain, attention(x, positions=positions, need_weights=True)[0])


def test_positions_are_validated():
    model, tokens = make_model("rope"), random_tokens(2, 6)
    with pytest.raises(ValueError, match="whole-number"):
        model(tokens, positions=torch.arange(6) + 0.5)
    with pytest.raises(ValueError, match=r"\[seq\] or \[batch, seq\]"):
        model(tokens, positions=torch.arange(5))
    with pytest.raises(ValueError, match="batch size"):
        model(tokens, positions=torch.arange(6)[None].expand(3, -1))
    with pytest.raises(ValueError, match=">= 0"):
        model(tokens, positions=torch.arange(6) - 1)
    with pytest.raises(TypeError):
        model(tokens, positions=[0, 1, 2, 3, 4, 5])
    with pytest.raises(ValueError, match="learned table"):
        make_model("learned")(tokens, positions=torch.arange(6) + 195)
    cache = model.new_cache()
    model(tokens, cache=cache, positions=torch.arange(6))
    with pytest.raises(ValueError, match="pass positions"):
        model(tokens[:, :1], cache=cache)


# ---- the study ------------------------------------------------------------------------------------

from posenc.studies import STUDIES, length_generalisation as study  # noqa: E402


def test_study_is_registered_with_its_presets():
    assert STUDIES["length_generalisation"] is study
    assert set(study.PRESETS) == {"tiny", "ci", "full", "gpu", "teacher-forced"}
    full = study.PRESETS["full"]
    assert len(full["seeds"]) >= 5 and max(full["test_lengths"]) >= 4 * full["train_max"]
    assert {"rope (randomized)", *POSITION_METHODS} <= set(full["methods"])
    for variant in full["tasks"]:  # distinct variants need an alphabet as long as the longest test
        assert not variant["distinct"] or variant["alphabet"] >= max(full["test_lengths"])


def test_base_method_and_next_run_order():
    assert study.base_method("rope (randomized)") == ("rope", True)
    assert study.base_method("alibi") == ("alibi", False)
    with pytest.raises(ValueError, match="method"):
        study.base_method("fire")
    config = dict(seeds=[0, 1], methods=["none", "rope"])
    assert study.next_run(config, []) == {"method": "none", "seed": 0}
    assert study.next_run(config, [{"method": "none", "seed": 0}]) == {"method": "rope", "seed": 0}
    done = [{"method": m, "seed": s} for m in ("none", "rope") for s in (0, 1)]
    assert study.next_run(config, done) is None


def test_probed_batches_call_the_probe_every_k_steps():
    probes = iter(range(100))
    batches = study.ProbedBatches(lambda generator: "batch", 3, lambda: {"probe": next(probes)})
    assert [batches(None) for _ in range(10)] == ["batch"] * 10
    assert batches.records == [{"step": 3, "probe": 0}, {"step": 6, "probe": 1}, {"step": 9, "probe": 2}]


def test_mean_reciprocal_rank_by_hand():
    def run(method, copy, reverse):
        return {"method": method, "seed": 0,
                "exact_match": {"a": {"4": 1.0, "8": copy}, "b": {"4": 1.0, "8": reverse}}}

    record = {"config": {"train_max": 4, "tasks": [{"name": "a"}, {"name": "b"}]},
              "runs": [run("none", 0.5, 0.1), run("rope", 0.2, 0.3), run("alibi", 0.5, 0.0)]}
    mrr = study.mean_reciprocal_rank(record, methods=("none", "rope", "alibi"))
    # task a: none and alibi tie first, rope third; task b: rope, none, alibi
    assert mrr == pytest.approx({"none": (1 + 1 / 2) / 2, "rope": (1 / 3 + 1) / 2, "alibi": (1 + 1 / 3) / 2})


def test_tiny_study_runs_end_to_end(tmp_path):
    config = study.PRESETS["tiny"]
    result = study.run(config, {"method": "rope (randomized)", "seed": 0}, tmp_path)
    for variant in config["tasks"]:
        scores = result["exact_match"][variant["name"]]
        assert set(scores) == {str(n) for n in config["test_lengths"]}
        assert all(0 <= value <= 1 for value in scores.values())
        by_position = result["by_position"][variant["name"]]
        assert [len(by_position[str(n)]) for n in config["test_lengths"]] == config["test_lengths"]
    learned = dict(config, tasks=config["tasks"][:1])
    scores = study.run(learned, {"method": "learned", "seed": 0}, None)["exact_match"]["copy, binary"]
    assert scores["4"] is not None and scores["8"] is None  # beyond the learned table


def test_matched_checkpoint_is_the_first_point_at_the_threshold():
    run = {"probes": {"a": [{"step": 10, "exact_match": {"8": 0.5, "16": 0.0}},
                            {"step": 20, "exact_match": {"8": 0.99, "16": 0.1}}]},
           "exact_match": {"a": {"8": 1.0, "16": 0.2}}}
    assert study.matched_checkpoint(run, "a", 8) == {"step": 20, "exact_match": {"8": 0.99, "16": 0.1}}
    assert study.matched_checkpoint(run, "a", 8, threshold=1.0)["step"] == "final"
    assert study.matched_checkpoint(run, "a", 16) is None
    # a probe above the threshold counts only if the next point holds it (review P3-m8)
    dip = {"probes": {"a": [{"step": 10, "exact_match": {"8": 0.97}}, {"step": 20, "exact_match": {"8": 0.9}},
                            {"step": 30, "exact_match": {"8": 0.96}}]}, "exact_match": {"a": {"8": 0.95}}}
    assert study.matched_checkpoint(dip, "a", 8, threshold=0.95)["step"] == 30
    assert study.matched_checkpoint(dip, "a", 8, threshold=0.96) is None


def test_length_generalisation_table_and_by_position_by_hand():
    from posenc.studies import length_generalisation as study
    config = {"methods": ["rope", "learned"], "test_lengths": [4, 8], "train_max": 4}

    def run(method, seed, at_8, positions):
        return {"method": method, "seed": seed, "exact_match": {"copy": {"4": 1.0, "8": at_8}},
                "by_position": {"copy": {"4": [1.0] * 4, "8": positions}}}

    record = {"config": config, "runs": [run("rope", 0, 0.25, [1.0, 0.5]), run("rope", 1, 0.75, [1.0, 0.0]),
                                         run("learned", 0, None, None), run("learned", 1, None, None)]}
    rows = study.table(record, "exact_match", "copy")
    assert rows["rope"][4] == (1.0, 1.0, 1.0)
    # sd of (0.25, 0.75) is sqrt(0.125) and t(0.975, 1) = 12.706: 0.5 +- 3.18, cut to [0, 1]
    assert rows["rope"][8] == (pytest.approx(0.5), 0.0, 1.0)
    near = {"config": config, "runs": [run("rope", seed, value, [1.0, 0.5])  # sd 0.05, inside [0, 1]
                                       for seed, value in enumerate((0.45, 0.5, 0.55))]}
    mean, low, high = study.table(near, "exact_match", "copy")["rope"][8]
    assert (mean, high - mean) == (pytest.approx(0.5), pytest.approx(4.303 * 0.05 / 3 ** 0.5, abs=1e-3))
    assert rows["learned"][8] is None
    assert study.by_position(record, "rope", "copy", 8) == [1.0, 0.25]
    with pytest.raises(ValueError, match="no run of 'learned'"):
        study.by_position(record, "learned", "copy", 8)
