"""posenc.evaluate.ngram_token_losses: the byte n-gram reference beside the toy models' text perplexities
(review P3-M1), checked against counting by hand and against the reviewer's own scripts' numbers."""

from __future__ import annotations

import collections
import math
import sys

import pytest
import torch

from posenc import evaluate, tasks


@pytest.mark.parametrize("bos", [None, 2])
@pytest.mark.parametrize("n", [1, 2, 3])
def test_ngram_losses_equal_counting_by_hand(n, bos):
    g = torch.Generator().manual_seed(0)
    train, data = torch.randint(0, 5, (3000,), generator=g), torch.randint(0, 5, (400,), generator=g)
    got = evaluate.ngram_token_losses(train, data, 20, n, n_windows=4, bos=bos, vocab=5, smoothing=0.5)
    counts = collections.Counter(tuple(train.tolist()[i:i + k]) for k in range(1, n + 1)
                                 for i in range(3000 - k + 1))
    for w, start in enumerate(evaluate.window_starts(400, 20, 4).tolist()):
        window = data[start:start + 21].tolist()
        sequence, first = (window[:-1], 0) if bos is not None else (window, 1)  # bos: token t from 0..t-1
        for t in range(20):
            k = min(n - 1, first + t)  # the context stays inside the window
            context = tuple(sequence[first + t - k:first + t])
            joint, total = counts[context + (sequence[first + t],)], counts[context] if k else 3000
            expected = -math.log((joint + 0.5) / (total + 0.5 * 5))
            assert got[w, t].item() == pytest.approx(expected, rel=1e-6), (w, t)


def test_ngram_losses_are_aligned_with_token_losses():
    data = torch.arange(100) % 7
    model_losses = evaluate.token_losses(torch.nn.Sequential(torch.nn.Embedding(7, 7)), data, 10, n_windows=3)
    assert evaluate.ngram_token_losses(data, data, 10, 2, n_windows=3, vocab=7).shape == model_losses.shape
    with pytest.raises(ValueError, match="n must be at most 7"):
        evaluate.ngram_token_losses(data, data, 10, 8, vocab=7)


@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="the review measured Python 3.11's standard library")
def test_the_bigram_and_trigram_match_the_reviewers_numbers_on_chapter_10s_windows():
    # review-t4-P3 (P3-M1), from the reviewer's own scripts: on the 512 BOS windows of 128 bytes that the
    # context_use study scores, bigram 12.05 and trigram 7.03 per byte (add-0.01, training split)
    from posenc.experiments import load_result
    from posenc.studies.common import ngram_perplexities

    config = load_result("context_use_full")["config"]
    found = ngram_perplexities(config, config["train_len"], (2, 3), bos=tasks.BOS, development=True)
    assert found["bigram table"] == pytest.approx(12.05, abs=0.006)
    assert found["trigram table"] == pytest.approx(7.03, abs=0.006)
