"""The evaluation tools of the studies: spread windows, the truncated baseline, per-position loss,
bootstrap and t intervals, and the passkey probe. Expected values come from by-hand computations."""

import math
import statistics

import pytest
import torch
import torch.nn.functional as F

from posenc import TransformerLM, data
from posenc.evaluate import (perplexity_summary, position_curve, token_losses, truncated_token_losses,
                             window_starts)
from posenc.passkey import (PASSKEY_NEEDLE, PASSKEY_QUESTION, effective_length, passkey_accuracy,
                            passkey_overhead, passkey_sequence, with_passkeys)
from posenc.stats import bootstrap_interval, paired_interval, t_interval, t_quantile
from posenc.train import perplexity


def small_model(position="rope", seed=0):
    torch.manual_seed(seed)
    return TransformerLM(256, 16, 1, 2, position=position, max_len=64).eval()


# ---- windows and losses --------------------------------------------------------------------------------

def test_windows_are_spread_over_the_whole_data_and_do_not_overlap():
    starts = window_starts(10_001, 100, 10)  # 100 windows fit; take every 10th
    assert starts.tolist() == list(range(0, 10_000, 1000))
    assert window_starts(10_001, 100).tolist() == list(range(0, 10_000, 100))  # all of them
    assert window_starts(10_001, 100, 500).numel() == 100  # never more than fit
    starts = window_starts(383_541, 2048, 32)
    assert starts[-1] + 2048 + 1 > 383_541 * 0.9  # the last part of the data is scored
    assert torch.all(starts.diff() >= 2048)
    with pytest.raises(ValueError, match="no window"):
        window_starts(100, 100)


def test_token_losses_equal_a_by_hand_cross_entropy_and_the_old_perplexity():
    model, stream = small_model(), torch.randint(0, 256, (1000,), generator=torch.Generator().manual_seed(1))
    losses = token_losses(model, stream, 50, n_windows=3, batch_size=2)
    assert losses.shape == (3, 50)
    for row, start in enumerate(window_starts(1000, 50, 3).tolist()):
        window = stream[start:start + 51]
        with torch.no_grad():
            by_hand = F.cross_entropy(model(window[None, :-1])[0], window[1:], reduction="none")
        torch.testing.assert_close(losses[row], by_hand)
    # with every window, the same tokens as train.perplexity's non-overlapping windows
    everything = token_losses(model, stream, 50)
    assert math.isclose(math.exp(everything.double().mean()), perplexity(model, stream, 50), rel_tol=1e-5)


@pytest.mark.parametrize("position", ["rope", "learned", "alibi"])
def test_truncated_losses_read_at_most_context_tokens_and_the_most_available(position):
    model = small_model(position)
    stream = torch.randint(0, 256, (400,), generator=torch.Generator().manual_seed(2))
    length, context, stride = 40, 16, 4
    losses = truncated_token_losses(model, stream, length, context, n_windows=2, stride=stride)
    full = token_losses(model, stream, length, n_windows=2)
    torch.testing.assert_close(losses[:, :context], full[:, :context])  # the first L tokens: as before
    segment_starts = list(range(0, length - context + 1, stride))
    for row, start in enumerate(window_starts(400, length, 2).tolist()):
        window = stream[start:start + length + 1]
        for t in range(context, length):
            s = min(s for s in segment_starts if s + context > t)  # the earliest segment with t in it
            assert context - stride < t - s + 1 <= context  # how many tokens token t reads
            with torch.no_grad():
                logits = model(window[None, s:s + context])[0, t - s]
            torch.testing.assert_close(losses[row, t], F.cross_entropy(logits, window[t + 1]))
    # truncation is real: tokens more than `context` back do not matter
    changed = stream.clone()
    changed[:10] = (changed[:10] + 1) % 256  # the first window's first 10 tokens
    later = truncated_token_losses(model, changed, length, context, n_windows=2, stride=stride)
    torch.testing.assert_close(later[0, 10 + context:], losses[0, 10 + context:])
    torch.testing.assert_close(truncated_token_losses(model, stream, length, length, n_windows=2), full)


def test_perplexity_summary_and_position_curve():
    losses = torch.log(torch.tensor([[2.0, 2.0, 8.0, 8.0], [2.0, 2.0, 8.0, 8.0]]))
    summary = perplexity_summary(losses)
    assert math.isclose(summary["perplexity"], 4.0, rel_tol=1e-6)  # exp(mean(ln 2, ln 8))
    assert summary["low"] == pytest.approx(4.0) and summary["high"] == pytest.approx(4.0)  # equal windows
    assert summary["windows"] == 2 and summary["tokens"] == 8
    assert position_curve(losses, 2) == pytest.approx([math.log(2), math.log(8)])
    assert position_curve(losses) == pytest.approx([math.log(2)] * 2 + [math.log(8)] * 2)


# ---- statistics -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("df, expected", [(1, 12.7062), (2, 4.3027), (4, 2.7764), (9, 2.2622), (30, 2.0423)])
def test_t_quantiles_match_the_printed_tables(df, expected):
    assert t_quantile(0.975, df) == pytest.approx(expected, abs=2e-4)


def test_t_interval_and_paired_interval_by_hand():
    values = [1.0, 2.0, 3.0, 4.0, 5.0]
    mean, low, high = t_interval(values)
    half = 2.7764 * statistics.stdev(values) / math.sqrt(5)
    assert mean == 3.0 and low == pytest.approx(3 - half, abs=1e-3) and high == pytest.approx(3 + half, abs=1e-3)
    a = {0: 10.0, 1: 12.0, 2: 11.0}
    b = {0: 9.0, 1: 11.5, 2: 10.0, 3: 99.0}  # seed 3 has no partner: ignored
    assert paired_interval(a, b)[0] == pytest.approx(statistics.fmean([1.0, 0.5, 1.0]))
    with pytest.raises(ValueError, match="at least two"):
        paired_interval({0: 1.0}, {0: 2.0})


def test_bootstrap_interval_covers_the_mean_and_narrows_with_more_data():
    generator = torch.Generator().manual_seed(0)
    small, large = torch.randn(20, generator=generator), torch.randn(2000, generator=generator)
    low, high = bootstrap_interval(small)
    assert low < float(small.mean()) < high
    # about 2 * 1.96 standard errors wide
    assert high - low == pytest.approx(2 * 1.96 * float(small.std()) / math.sqrt(20), rel=0.25)
    low2, high2 = bootstrap_interval(large)
    assert high2 - low2 < (high - low) / 5
    assert bootstrap_interval(small) == (low, high)  # seeded


# ---- passkey ----------------------------------------------------------------------------------------------

def test_passkey_sequence_layout():
    filler = data.encode("x" * 200)
    tokens, answer_start = passkey_sequence(filler, 120, 0.5, "12345")
    text = data.decode(tokens)
    assert len(tokens) == 120 and text.endswith(PASSKEY_QUESTION + "12345")
    assert data.decode(tokens[answer_start:]) == "12345"
    n_filler = 120 - passkey_overhead(5)
    needle = PASSKEY_NEEDLE.format(key="12345")
    assert text.index(needle) == round(0.5 * n_filler)
    assert passkey_sequence(filler, 120, 0.0, "12345")[0][:len(needle)].tolist() == list(needle.encode())
    with pytest.raises(ValueError, match="length must be >="):
        passkey_sequence(filler, 20, 0.5, "12345")


class Retriever(torch.nn.Module):
    """A by-hand oracle: predicts the digit that followed 'pass_key = ' plus what it has seen of the key,
    if the needle is inside the tokens it is given; otherwise predicts a space."""

    def __init__(self):
        super().__init__()
        self.dummy = torch.nn.Parameter(torch.zeros(1))

    def forward(self, tokens):
        logits = torch.zeros(*tokens.shape, 256)
        logits[..., ord(" ")] = 1.0
        marker, question = list(b"pass_key = "), list(PASSKEY_QUESTION.encode())
        for row, sequence in enumerate(tokens.tolist()):
            found = [i for i in range(len(sequence)) if sequence[i:i + len(marker)] == marker]
            asked = [i for i in range(len(sequence)) if sequence[i:i + len(question)] == question]
            if not found or not asked:
                continue
            key_at, answer_at = found[0] + len(marker), asked[-1] + len(question)
            for t in range(answer_at - 1, len(sequence)):
                logits[row, t, sequence[key_at + t - (answer_at - 1)]] = 2.0
        return logits


def test_passkey_accuracy_of_an_oracle_of_a_truncated_oracle_and_of_a_constant():
    filler = data.encode("def f(x):\n    return x\n" * 200)
    assert passkey_accuracy(Retriever(), filler, 300, 0.5, n_keys=4) == 1.0
    # reading only the last 100 tokens: the needle at depth 0 is out of reach, at depth 1 in reach
    assert passkey_accuracy(Retriever(), filler, 300, 0.0, n_keys=4, context=100) == 0.0
    assert passkey_accuracy(Retriever(), filler, 300, 1.0, n_keys=4, context=100) == 1.0
    assert passkey_accuracy(small_model(), filler, 300, 0.5, n_keys=4) == 0.0


def test_passkey_exact_match_equals_greedy_decoding():
    """Scoring all digits' argmax with the key given equals greedy generation reproducing the key."""
    model = small_model()
    filler = torch.randint(0, 256, (500,), generator=torch.Generator().manual_seed(3))
    tokens, answer_start = passkey_sequence(filler, 80, 0.5, "00000")
    generated = model.generate(tokens[None, :answer_start], 5, temperature=0)[0, answer_start:]
    # a key made of the model's own greedy output is retrieved; change one digit and it is not
    with torch.no_grad():
        for key, expected in ((generated, True), (generated.clone().fill_(int(generated[0]) ^ 1), False)):
            sequence = torch.cat([tokens[:answer_start], key])
            predicted = model(sequence[None, :-1]).argmax(-1)[0, -5:]
            assert bool((predicted == key).all()) is expected


def test_with_passkeys_rewrites_the_chosen_fraction_of_windows():
    generator = torch.Generator().manual_seed(0)
    tokens, targets = data.random_windows(data.encode("abc " * 500), 200, 64, generator=generator)
    mixed, mixed_targets = with_passkeys(tokens, targets, 0.25, generator=generator)
    assert torch.equal(mixed[:, 1:], mixed_targets[:, :-1])  # still next-token targets
    changed = [(a != b).any() for a, b in zip(mixed, tokens)]
    assert 0.15 < sum(changed) / 200 < 0.35
    for row in (i for i, c in enumerate(changed) if c):
        text = data.decode(torch.cat([mixed[row], mixed_targets[row, -1:]]))
        assert PASSKEY_QUESTION in text and text[-5:].isdigit() and f"pass_key = {text[-5:]}\n" in text
    assert with_passkeys(tokens, targets, 0.0)[0] is tokens


def test_effective_length():
    grid = {"128": {"0": 1.0, "1": 1.0}, "256": {"0": 0.5, "1": 1.0}, "512": {"0": 0.0, "1": 0.5},
            "1024": {"0": 1.0, "1": 1.0}}
    assert effective_length(grid) == 256  # 512 fails (mean 0.25), so 1024 does not count
    assert effective_length(grid, threshold=0.8) == 128
    assert effective_length({"128": {"0": 0.0}}) == 0


def test_passkey_batch_scores_only_the_key_and_digit_scores():
    from posenc.passkey import passkey_batch, passkey_scores

    stream = data.encode("def f(x):\n    return x\n" * 100)
    tokens, targets = passkey_batch(stream, 4, 80, generator=torch.Generator().manual_seed(0))
    assert tokens.shape == targets.shape == (4, 80)
    assert torch.all(targets[:, :-5] == -100) and data.decode(targets[0, -5:]).isdigit()
    assert torch.equal(targets[:, -6:-1][:, 1:], tokens[:, -4:])  # next-token alignment of the key
    assert passkey_scores(Retriever(), stream, 300, 0.5, n_keys=4) == (1.0, 1.0)
    assert passkey_scores(small_model(), stream, 300, 0.5, n_keys=4)[1] <= 0.25


def test_spans_make_every_length_score_the_same_tokens():
    covered = {}
    for length in (128, 256, 512):
        starts = window_starts(100_001, length, 4096 // length, span=512)
        covered[length] = sorted(int(s) + i for s in starts for i in range(length))
        assert len(starts) == 4096 // length
    assert covered[128] == covered[256] == covered[512]  # 8 spans of 512, the same at every length
    assert window_starts(100_001, 512, 8, span=512).tolist() == window_starts(100_001, 512, 8).tolist()
    with pytest.raises(ValueError, match="multiple of length"):
        window_starts(100_001, 300, 4, span=512)


def test_bootstrap_groups_windows_of_one_span():
    losses = torch.tensor([[1.0], [1.0], [3.0], [3.0]])
    assert perplexity_summary(losses, group=2)["perplexity"] == pytest.approx(math.exp(2.0))
    with pytest.raises(ValueError, match="groups of 3"):
        perplexity_summary(losses, group=3)


def test_streaming_with_bos_matches_the_bos_readings_of_a_one_layer_model():
    # one layer: a rolling cache that keeps BOS and L - 1 tokens computes what a fresh pass over BOS and
    # the last L - 1 tokens computes (truncated_token_losses with bos), and within L what token_losses does
    from posenc import evaluate, tasks
    torch.manual_seed(0)
    model = TransformerLM(256, 16, 1, 2, position="rope").eval()
    stream = torch.randint(0, 256, (3000,), generator=torch.Generator().manual_seed(1))
    L = 16
    rolling = evaluate.streaming_token_losses(model, stream, 4 * L, sink_tokens=1, window=L - 1, bos=tasks.BOS,
                                              n_windows=3)
    dense = evaluate.token_losses(model, stream, 4 * L, bos=tasks.BOS, n_windows=3)
    fresh = evaluate.truncated_token_losses(model, stream, 4 * L, L, stride=1, bos=tasks.BOS, n_windows=3)
    torch.testing.assert_close(rolling[:, :L], dense[:, :L], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(rolling, fresh, rtol=1e-4, atol=1e-5)
    evicted = evaluate.streaming_token_losses(model, stream, 4 * L, sink_tokens=0, window=L, bos=tasks.BOS,
                                              n_windows=3)
    assert (evicted[:, L + 1:] - rolling[:, L + 1:]).abs().max() > 1e-4  # once BOS is gone, they differ
