"""Relative positions as biases: T5's buckets (chapter 5), ALiBi's slopes (chapter 8) and ALiBi's bias
with a KV cache (chapter 13)."""

from __future__ import annotations

import math

import torch

from ..alibi import alibi_bias, alibi_slopes
from ..masks import causal_mask
from ..relative import t5_relative_bucket
from ._common import ExerciseFailed, _as_tensor, _close, _diagnose, _passed


# ---- chapter 5: T5's relative buckets ------------------------------------------------------------------

def _t5_bucket(relative: torch.Tensor, bidirectional: bool, num_buckets: int, max_distance: int, *,
               clamp: bool = True, rounding=torch.floor) -> torch.Tensor:
    """T5's rule written out in float64, with switches for two usual mistakes; the defaults give
    ``t5_relative_bucket``'s buckets (the tests check)."""
    bucket = torch.zeros_like(relative)
    if bidirectional:
        num_buckets //= 2
        bucket = bucket + (relative > 0).long() * num_buckets  # keys after the query: the upper half
        distance = relative.abs()
    else:
        distance = (-relative).clamp(min=0)  # a decoder: every later key in bucket 0
    exact = num_buckets // 2
    ratio = torch.log(distance.double().clamp(min=1) / exact) / math.log(max_distance / exact)
    large = exact + rounding(ratio * (num_buckets - exact)).long()
    if clamp:
        large = large.clamp(max=num_buckets - 1)
    return bucket + torch.where(distance < exact, distance, large)



def check_t5_bucket(fn) -> bool:
    """``fn(relative_position, bidirectional, num_buckets, max_distance)`` -> integer buckets shaped like
    ``relative_position`` (``key - query``, any shape), as ``posenc.t5_relative_bucket``."""
    offsets = torch.arange(-300, 301)  # [601]
    grid = torch.arange(12)[None, :] - torch.arange(12)[:, None]  # key - query, [12, 12]
    for bidirectional, num_buckets, max_distance in ((True, 32, 128), (False, 32, 128), (True, 16, 64),
                                                     (False, 12, 40)):
        settings = (bidirectional, num_buckets, max_distance)
        for relative in (offsets, grid):
            expected = t5_relative_bucket(relative, bidirectional=bidirectional, num_buckets=num_buckets,
                                          max_distance=max_distance)
            answer = _as_tensor("the buckets", fn(relative, *settings), relative.shape)
            if _close(answer, expected, 0.0):
                continue
            name = (f"T5 buckets (bidirectional={bidirectional}, {num_buckets} buckets, "
                    f"max_distance {max_distance})")
            known = {
                "the offset is read as query - key; relative_position is key - query (T5's memory_position - "
                "context_position): keys after the query take the upper half when bidirectional, and in a "
                "decoder the keys before it get buckets 1, 2, ...": t5_relative_bucket(
                    -relative, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance),
                "the far offsets run past the last bucket: clamp the logarithmic bucket at num_buckets - 1 "
                "(per half when bidirectional)": _t5_bucket(relative, *settings, clamp=False),
                "the logarithmic bucket is rounded; T5 truncates it (int(), .long())":
                    _t5_bucket(relative, *settings, rounding=torch.round),
                "in a decoder (bidirectional=False) every key after the query goes to bucket 0: the distance "
                "is max(-relative_position, 0), not |relative_position|": t5_relative_bucket(
                    -relative.abs(), bidirectional=False, num_buckets=num_buckets, max_distance=max_distance),
            }
            for mistake, wrong in known.items():
                if _close(answer, wrong, 0.0):
                    raise ExerciseFailed(f"{name}: {mistake}")
            where = tuple(int(i) for i in torch.nonzero(answer.double() != expected.double())[0])
            raise ExerciseFailed(f"{name}: offset {int(relative[where])} gets bucket {float(answer[where]):g}, "
                                 f"expected {int(expected[where])}")
    return _passed("T5 buckets")



def check_alibi_slopes(fn) -> bool:
    """``fn(n_heads) -> [n_heads]``, powers of two and not."""
    for n_heads in (8, 4, 12, 6, 1):
        expected = alibi_slopes(n_heads).double()
        answer = _as_tensor("the slopes", fn(n_heads), (n_heads,))
        if not _close(answer, expected, 1e-6):
            geometric = torch.tensor([2 ** (-8 * (h + 1) / n_heads) for h in range(n_heads)], dtype=torch.float64)
            known = {f"for {n_heads} heads (not a power of two) the slopes are the {2 ** math.floor(math.log2(n_heads))} "
                     f"slopes of the power of two below, then every other slope of the power of two above "
                     f"(the ALiBi paper's code); a plain 2**(-8h/n) sequence differs": geometric,
                     "the slopes are in increasing order; they start at the largest, 2**(-8/n)": expected.flip(0)}
            _diagnose(f"ALiBi slopes ({n_heads} heads)", answer, expected, known, 1e-6)
    return _passed("ALiBi slopes")



# ---- chapter 13: ALiBi's bias with a KV cache ----------------------------------------------------------

def _alibi_at(slopes: torch.Tensor, query_positions: torch.Tensor, k_len: int) -> torch.Tensor:
    """``-slopes[h] * |p_i - j|`` for queries at ``query_positions``: ``[heads, q_len, k_len]`` float64."""
    distance = (query_positions[:, None] - torch.arange(k_len)[None, :]).abs().double()
    return -slopes.double()[:, None, None] * distance



def check_alibi_bias(fn) -> bool:
    """``fn(slopes[heads], q_len, k_len) -> [heads, q_len, k_len]``: ``-slopes[h] * (p_i - j)``, the queries
    being the last ``q_len`` of ``k_len`` tokens (query i at ``p_i = k_len - q_len + i``, as when decoding
    with a KV cache). Only the entries a causal mask keeps (``j <= p_i``) are compared."""
    slopes = alibi_slopes(4).double()
    for q_len, k_len in ((1, 9), (3, 10), (6, 6)):
        expected = alibi_bias(4, q_len, k_len, slopes=slopes).double()
        answer = _as_tensor("the bias", fn(slopes.clone(), q_len, k_len), expected.shape)
        visible = causal_mask(q_len, k_len).expand_as(expected)
        if not _close(answer[visible], expected[visible], 1e-5):
            offset = k_len - q_len
            at_zero = _alibi_at(slopes, torch.arange(q_len), k_len)
            signed = -slopes.double()[:, None, None] * (torch.arange(q_len)[:, None] - torch.arange(k_len)).double()
            known = {"the queries are placed at 0 .. q_len - 1: with a cache they are the last q_len tokens, "
                     "query i at k_len - q_len + i (the cache offset). On the keys a query sees this differs from "
                     "the bias by a constant per query, so a softmax gives the same weights (chapter 8's "
                     "shortcut, slope * j, is this case); the exercise asks for the bias itself":
                         [at_zero, signed],
                     "off by one: query i is at k_len - q_len + i, not one further (the length after appending "
                     "counts the query itself)": _alibi_at(slopes, torch.arange(q_len) + offset + 1, k_len),
                     "the sign is flipped: ALiBi subtracts slope * distance, so far keys lose score": -expected}
            _diagnose(f"ALiBi bias (q_len {q_len}, k_len {k_len})", answer, expected, known, 1e-5, where=visible)
    return _passed("ALiBi bias with a cache")

