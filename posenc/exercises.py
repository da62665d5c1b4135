"""Checks for the exercises: each takes the reader's function, compares it with posenc on random and edge
inputs, and says what is wrong when it is (a wrong pairing, an off-by-one position, angles in low
precision, an inverted mask), the way a course's autograder would.

    from posenc.exercises import check_apply_rope
    check_apply_rope(my_apply_rope)      # prints what passed, or raises ExerciseFailed with a diagnosis

Each check calls the reader's function with plain tensors and compares with posenc's function in float64
where the quantity allows. A wrong answer raises ``ExerciseFailed`` (an ``AssertionError``, so it also
fails a test) whose message names the mistake when it matches a known one, and the largest difference
otherwise. A right answer returns ``True`` and prints one line.

The exercises and their signatures:

- ``check_sinusoidal(fn)``: ``fn(n_positions, dim) -> [n_positions, dim]``, Vaswani et al.'s table
  (``sin`` at even features, ``cos`` at odd, base 10000).
- ``check_rope_frequencies(fn)``: ``fn(head_dim, base) -> [head_dim // 2]`` inverse frequencies.
- ``check_apply_rope(fn)``: ``fn(x, positions, base) -> x rotated``: ``x`` ``[..., seq, head_dim]``,
  ``positions`` ``[seq]`` integers, half-split pairs (feature i with i + head_dim/2), as Hugging Face's
  Llama and ``posenc.apply_rope``; the reference is the rotation written out in float64 (the tests check
  it against ``posenc.apply_rope``).
- ``check_alibi_slopes(fn)``: ``fn(n_heads) -> [n_heads]``, including counts that are not powers of two.
- ``check_causal_mask(fn)`` and ``check_sliding_window_mask(fn)``: ``fn(seq) -> bool [seq, seq]`` and
  ``fn(seq, window) -> bool [seq, seq]``, True where query i may see key j.
- ``check_forget_bias(fn)``: ``fn(log_f) -> [..., seq, seq]``, the Forgetting Transformer's bias (chapter
  18) with ``-inf`` above the diagonal.
"""

from __future__ import annotations

import math

import torch

from .absolute import sinusoidal_encoding
from .alibi import alibi_slopes
from .forgetting import forget_bias
from .masks import causal_mask, sliding_window_mask
from .rope import rope_frequencies


class ExerciseFailed(AssertionError):
    """A reader's answer differs from posenc's; the message says how."""


def _as_tensor(name: str, value, shape=None) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise ExerciseFailed(f"{name} should return a torch.Tensor, got {type(value).__name__}")
    if shape is not None and tuple(value.shape) != tuple(shape):
        raise ExerciseFailed(f"{name} should return shape {tuple(shape)}, got {tuple(value.shape)}")
    return value


def _close(a: torch.Tensor, b: torch.Tensor, tolerance: float, relative: float = 0.0) -> bool:
    """Same shape, finite, and ``|a - b| <= tolerance + relative * |b|`` everywhere."""
    if a.shape != b.shape or not bool(torch.isfinite(a).all()):
        return False
    a, b = a.double(), b.double()
    return bool(((a - b).abs() <= tolerance + relative * b.abs()).all())


def _diagnose(name: str, answer: torch.Tensor, expected: torch.Tensor, known: dict, tolerance: float,
              relative: float = 0.0):
    """Raise ``ExerciseFailed``: the first known mistake whose output the answer matches, or the largest
    difference."""
    for mistake, wrong in known.items():
        if _close(answer, wrong, tolerance, relative):
            raise ExerciseFailed(f"{name}: {mistake}")
    if answer.shape != expected.shape:
        raise ExerciseFailed(f"{name}: shape {tuple(answer.shape)}, expected {tuple(expected.shape)}")
    difference = (answer.double() - expected.double()).abs()
    where = tuple(int(i) for i in torch.nonzero(difference == difference.max())[0])
    raise ExerciseFailed(f"{name}: differs from posenc by up to {float(difference.max()):.3g} (first at index "
                         f"{where}: yours {float(answer[where]):.6g}, expected {float(expected[where]):.6g})")


def _passed(name: str) -> bool:
    print(f"{name}: correct")
    return True


def check_sinusoidal(fn) -> bool:
    """``fn(n_positions, dim) -> [n_positions, dim]``: the sinusoidal table of Vaswani et al."""
    for n, dim in ((50, 16), (7, 2), (128, 64)):
        expected = sinusoidal_encoding(n, dim, dtype=torch.float64)
        answer = _as_tensor("the table", fn(n, dim), (n, dim))
        if not _close(answer, expected, 1e-4):
            known = {
                "sines and cosines are in separate halves (all sines, then all cosines); this exercise "
                "interleaves them: sin at feature 2i, cos at 2i + 1":
                    sinusoidal_encoding(n, dim, layout="sin_cos", dtype=torch.float64),
                "sin and cos are swapped: feature 2i is sin(p w_i), 2i + 1 is cos(p w_i)":
                    sinusoidal_encoding(n, dim, dtype=torch.float64).view(n, dim // 2, 2).flip(-1).reshape(n, dim),
                "positions start at 1; the first row is position 0 (sin 0 = 0, cos 0 = 1)":
                    sinusoidal_encoding(n, dim, offset=1, dtype=torch.float64),
                "the frequencies use dim/2 - 1 in the exponent (tensor2tensor's spacing); the paper's is "
                "w_i = 10000^(-2i/dim)":
                    sinusoidal_encoding(n, dim, freq_denominator="d/2-1", dtype=torch.float64),
            }
            _diagnose(f"sinusoidal table ({n} x {dim})", answer, expected, known, 1e-4)
    return _passed("sinusoidal table")


def check_rope_frequencies(fn) -> bool:
    """``fn(head_dim, base) -> [head_dim // 2]``: ``base ** (-2i / head_dim)``."""
    for head_dim, base in ((64, 10000.0), (128, 500000.0), (8, 10.0)):
        expected = rope_frequencies(head_dim, base=base)[0].double()
        answer = _as_tensor("the frequencies", fn(head_dim, base), (head_dim // 2,))
        if not _close(answer, expected, 0.0, 1e-5):
            i = torch.arange(head_dim // 2, dtype=torch.float64)
            known = {"these are wavelengths (base ** (2i/d)); RoPE's inverse frequencies are their reciprocals, "
                     "base ** (-2i/d)": base ** (2 * i / head_dim),
                     "the exponent uses i / head_dim; it is 2i / head_dim (one frequency per pair of features)":
                         base ** (-i / head_dim),
                     "the exponent divides by head_dim - 2 (or d/2 - 1); it is 2i / head_dim":
                         base ** (-2 * i / (head_dim - 2)) if head_dim > 2 else expected}
            _diagnose(f"frequencies (head_dim {head_dim}, base {base:g})", answer, expected, known, 0.0, 1e-5)
    return _passed("RoPE frequencies")


def _rope(x, positions, base, interleaved=False, dtype=torch.float64):
    inv_freq = (base ** (-torch.arange(0, x.shape[-1], 2, dtype=torch.float64) / x.shape[-1])).to(dtype)
    angles = positions.to(dtype)[:, None] * inv_freq
    if interleaved:
        angles = angles.repeat_interleave(2, dim=-1)
    else:
        angles = torch.cat([angles, angles], dim=-1)
    cos, sin = angles.cos(), angles.sin()
    if interleaved:
        pairs = x.double().view(*x.shape[:-1], -1, 2)
        turned = torch.stack([-pairs[..., 1], pairs[..., 0]], -1).view(x.shape)
    else:
        half = x.shape[-1] // 2
        turned = torch.cat([-x.double()[..., half:], x.double()[..., :half]], -1)
    return x.double() * cos.double() + turned * sin.double()


def check_apply_rope(fn) -> bool:
    """``fn(x, positions, base) -> x rotated``, half-split pairs, float64 reference; also checks large
    positions, where angles computed in half precision go wrong (float32 angles, as Hugging Face and
    posenc compute them, are within the tolerance there: about 1e-3 at position 30,000)."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 12, 16, generator=generator, dtype=torch.float64)
    for positions in (torch.arange(12), torch.arange(30000, 30012)):
        expected = _rope(x, positions, 10000.0)
        answer = _as_tensor("the rotated x", fn(x, positions, 10000.0), x.shape)
        tolerance = 1e-5 if positions[0] == 0 else 1e-2
        if not _close(answer, expected, tolerance):
            known = {
                "pairs are interleaved (2i with 2i + 1, as RoFormer and Meta's Llama); this exercise pairs "
                "feature i with i + head_dim/2 (half-split, as Hugging Face's Llama)":
                    _rope(x, positions, 10000.0, interleaved=True),
                "off by one: the first token should be at position 0 (it is not rotated)":
                    _rope(x, positions + 1, 10000.0),
                "the rotation goes the wrong way (sin with the opposite sign)": _rope(x, -positions, 10000.0),
            }
            known["the angles are computed in half precision, which loses them (badly at large positions): "
                  "compute position * frequency in float32 or float64"] = _rope(x, positions, 10000.0,
                                                                                 dtype=torch.float16)
            _diagnose(f"apply_rope at positions {int(positions[0])}..{int(positions[-1])}", answer, expected,
                      known, tolerance)
    return _passed("apply_rope")


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


def _check_mask(name: str, answer, expected: torch.Tensor, extra: dict) -> None:
    answer = _as_tensor(name, answer, expected.shape)
    if answer.dtype != torch.bool:
        raise ExerciseFailed(f"{name}: return a boolean mask (True where the query may see the key), got "
                             f"{answer.dtype}; an additive mask of 0 and -inf is built from it afterwards")
    if not torch.equal(answer, expected):
        known = {"the mask is inverted: True should mark the keys a query may see": ~expected, **extra}
        for mistake, wrong in known.items():
            if torch.equal(answer, wrong):
                raise ExerciseFailed(f"{name}: {mistake}")
        i, j = (int(v) for v in torch.nonzero(answer != expected)[0])
        raise ExerciseFailed(f"{name}: query {i}, key {j} is {bool(answer[i, j])}, expected {bool(expected[i, j])}")


def check_causal_mask(fn) -> bool:
    """``fn(seq) -> bool [seq, seq]``, True where key j <= query i."""
    for seq in (5, 17, 1):
        expected = causal_mask(seq, seq)
        _check_mask(f"causal mask ({seq})", fn(seq), expected,
                    {"a query must see itself: the diagonal is visible": causal_mask(seq, seq) & ~torch.eye(seq, dtype=torch.bool),
                     "this is the transpose: query i (row) sees keys j <= i (columns)": expected.T})
    return _passed("causal mask")


def check_sliding_window_mask(fn) -> bool:
    """``fn(seq, window) -> bool [seq, seq]``: causal and ``i - j < window`` (the query itself included)."""
    for seq, window in ((10, 3), (16, 1), (7, 7), (20, 5)):
        expected = sliding_window_mask(seq, seq, window)
        wider = sliding_window_mask(seq, seq, window + 1) if window < seq else expected
        _check_mask(f"sliding window ({seq}, window {window})", fn(seq, window), expected,
                    {f"each query sees {window + 1} tokens: with window w a query sees itself and the w - 1 before "
                     f"it (i - j < w), Hugging Face's convention": wider})
    return _passed("sliding-window mask")


def check_forget_bias(fn) -> bool:
    """``fn(log_f[..., seq]) -> [..., seq, seq]``: ``sum_{t=j+1..i} log f_t`` on and below the diagonal, ``-inf``
    above it."""
    generator = torch.Generator().manual_seed(1)
    log_f = torch.nn.functional.logsigmoid(torch.randn(2, 3, 9, generator=generator, dtype=torch.float64))
    expected = forget_bias(log_f)
    answer = _as_tensor("the bias", fn(log_f), expected.shape)
    finite = torch.isfinite(expected)
    if not (torch.equal(torch.isfinite(answer), finite) and _close(answer[finite], expected[finite], 1e-9)):
        c = log_f.cumsum(-1)
        inclusive = (c[..., :, None] - c[..., None, :] + log_f[..., None, :]).masked_fill(~finite, -math.inf)
        known = {"the sum includes the key's own gate (t = j); it runs from t = j + 1, so a token's gate charges "
                 "only the keys before it": inclusive,
                 "the future is not masked: above the diagonal the bias should be -inf":
                     (c[..., :, None] - c[..., None, :]),
                 "the sign is flipped: log f <= 0 is added, so older keys lose score": -expected}
        for mistake, wrong in known.items():
            if torch.equal(torch.isfinite(answer), torch.isfinite(wrong)) and \
                    _close(answer[torch.isfinite(wrong)], wrong[torch.isfinite(wrong)], 1e-9):
                raise ExerciseFailed(f"forget bias: {mistake}")
        raise ExerciseFailed("forget bias: differs from posenc.forgetting.forget_bias (compare one row by hand)")
    return _passed("forget bias")
