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
