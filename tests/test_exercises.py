"""posenc.exercises: a reader's right answer passes, and the typical wrong answers fail with the message
that names the mistake. The right answers are written here from the formulas, as a student would."""

from __future__ import annotations

import math

import pytest
import torch

from posenc import apply_rope, rope_cos_sin, rope_frequencies
from posenc import exercises as ex


def sinusoidal(n, dim, offset=0, split=False, swap=False):
    p = torch.arange(offset, offset + n, dtype=torch.float64)[:, None]
    w = 10000.0 ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    sin, cos = torch.sin(p * w), torch.cos(p * w)
    if swap:
        sin, cos = cos, sin
    if split:
        return torch.cat([sin, cos], dim=1)
    return torch.stack([sin, cos], dim=-1).reshape(n, dim)


def test_sinusoidal_right_and_wrong():
    assert ex.check_sinusoidal(sinusoidal)
    for wrong, message in ((lambda n, d: sinusoidal(n, d, split=True), "separate halves"),
                           (lambda n, d: sinusoidal(n, d, swap=True), "swapped"),
                           (lambda n, d: sinusoidal(n, d, offset=1), "positions start at 1"),
                           (lambda n, d: sinusoidal(n, d)[:, :-1], "shape")):
        with pytest.raises(ex.ExerciseFailed, match=message):
            ex.check_sinusoidal(wrong)


def test_rope_frequencies_right_and_wrong():
    assert ex.check_rope_frequencies(lambda d, base: base ** (-torch.arange(0, d, 2) / d))
    with pytest.raises(ex.ExerciseFailed, match="wavelengths"):
        ex.check_rope_frequencies(lambda d, base: base ** (torch.arange(0, d, 2) / d))
    with pytest.raises(ex.ExerciseFailed, match="2i / head_dim"):
        ex.check_rope_frequencies(lambda d, base: base ** (-torch.arange(d // 2) / d))


def rope(x, positions, base, interleaved=False, dtype=torch.float64, shift=0, sign=1):
    d = x.shape[-1]
    inv_freq = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angles = ((positions + shift).to(dtype) * sign)[:, None] * inv_freq.to(dtype)
    cos, sin = angles.cos().double(), angles.sin().double()
    if interleaved:
        a, b = x[..., 0::2], x[..., 1::2]
        return torch.stack([a * cos - b * sin, a * sin + b * cos], -1).flatten(-2)
    a, b = x[..., : d // 2], x[..., d // 2:]
    return torch.cat([a * cos - b * sin, a * sin + b * cos], -1)


def test_apply_rope_right_and_wrong():
    assert ex.check_apply_rope(rope)
    x, positions = torch.randn(1, 2, 5, 16, dtype=torch.float64), torch.arange(5)
    cos, sin = rope_cos_sin(positions, rope_frequencies(16)[0].double())
    torch.testing.assert_close(apply_rope(x, cos, sin), rope(x, positions, 10000.0))  # the check's convention
    for wrong, message in ((lambda x, p, b: rope(x, p, b, interleaved=True), "interleaved"),
                           (lambda x, p, b: rope(x, p, b, shift=1), "off by one"),
                           (lambda x, p, b: rope(x, p, b, sign=-1), "wrong way"),
                           (lambda x, p, b: rope(x, p, b, dtype=torch.float16), "half precision"),
                           (lambda x, p, b: x, "differs from posenc")):
        with pytest.raises(ex.ExerciseFailed, match=message):
            ex.check_apply_rope(wrong)


def test_alibi_slopes_right_and_wrong():
    def slopes(n):
        def geometric(m):
            return [2 ** (-8 * (h + 1) / m) for h in range(m)]
        lower = 2 ** math.floor(math.log2(n))
        return torch.tensor(geometric(lower) + geometric(2 * lower)[0::2][: n - lower])

    assert ex.check_alibi_slopes(slopes)
    with pytest.raises(ex.ExerciseFailed, match="not a power of two"):
        ex.check_alibi_slopes(lambda n: torch.tensor([2 ** (-8 * (h + 1) / n) for h in range(n)]))
    with pytest.raises(ex.ExerciseFailed, match="increasing order"):
        ex.check_alibi_slopes(lambda n: slopes(n).flip(0))


def test_masks_right_and_wrong():
    i, j = (lambda s: torch.arange(s)[:, None]), (lambda s: torch.arange(s)[None, :])
    assert ex.check_causal_mask(lambda s: j(s) <= i(s))
    assert ex.check_sliding_window_mask(lambda s, w: (j(s) <= i(s)) & (i(s) - j(s) < w))
    for wrong, message in ((lambda s: j(s) > i(s), "inverted"), (lambda s: j(s) < i(s), "diagonal"),
                           (lambda s: (j(s) <= i(s)).float(), "boolean"), (lambda s: j(s) >= i(s), "transpose")):
        with pytest.raises(ex.ExerciseFailed, match=message):
            ex.check_causal_mask(wrong)
    with pytest.raises(ex.ExerciseFailed, match="sees 4 tokens"):
        ex.check_sliding_window_mask(lambda s, w: (j(s) <= i(s)) & (i(s) - j(s) <= w))


def test_forget_bias_right_and_wrong():
    def bias(log_f, inclusive=False, mask=True):
        seq = log_f.shape[-1]
        out = torch.zeros(*log_f.shape, seq, dtype=log_f.dtype)
        for q in range(seq):
            for k in range(seq):
                out[..., q, k] = log_f[..., k + (0 if inclusive else 1): q + 1].sum(-1)
        return out.masked_fill(torch.ones(seq, seq).triu(1).bool(), -math.inf) if mask else out

    assert ex.check_forget_bias(bias)
    for wrong, message in ((lambda f: bias(f, inclusive=True), "key's own gate"),
                           (lambda f: -bias(f), "sign is flipped")):
        with pytest.raises(ex.ExerciseFailed, match=message):
            ex.check_forget_bias(wrong)
