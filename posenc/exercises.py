"""Checks for the exercises: each takes the reader's function, compares it with posenc on random and edge
inputs, and says what is wrong when it is (a wrong pairing, an off-by-one position, angles in low
precision, an inverted mask), the way a course's autograder would.

    from posenc.exercises import check_apply_rope
    check_apply_rope(my_apply_rope)      # prints what passed, or raises ExerciseFailed with a diagnosis

Each check calls the reader's function with plain tensors and compares with posenc's function in float64
where the quantity allows. A wrong answer raises ``ExerciseFailed`` (an ``AssertionError``, so it also
fails a test) whose message names the mistake when it matches a known one, and the largest difference
otherwise. A right answer returns ``True`` and prints one line.

The exercises and their signatures, by chapter:

- ``check_causal_mask(fn)`` (1): ``fn(seq) -> bool [seq, seq]``, True where query i may see key j.
- ``check_binary_code(fn)`` (2): ``fn(positions[n], bits) -> [n, bits]``, bit k of each position in feature
  k (least significant first), as 0 and 1.
- ``check_sinusoidal(fn)`` (3): ``fn(n_positions, dim) -> [n_positions, dim]``, Vaswani et al.'s table
  (``sin`` at even features, ``cos`` at odd, base 10000).
- ``check_sinusoidal_2d(fn)`` (4): ``fn(height, width, dim) -> [height * width, dim]``, patch
  ``r * width + c`` coded ``[PE(r), PE(c)]`` with chapter 3's table of width ``dim / 2``.
- ``check_t5_bucket(fn)`` (5): ``fn(relative_position, bidirectional, num_buckets, max_distance)`` ->
  integer buckets shaped like ``relative_position`` (``key - query``), T5's rule.
- ``check_rope_frequencies(fn)`` (6): ``fn(head_dim, base) -> [head_dim // 2]`` inverse frequencies.
- ``check_apply_rope(fn)`` (6): ``fn(x, positions, base) -> x rotated``: ``x`` ``[..., seq, head_dim]``,
  ``positions`` ``[seq]`` integers, half-split pairs (feature i with i + head_dim/2), as Hugging Face's
  Llama and ``posenc.apply_rope``; the reference is the rotation written out in float64 (the tests check
  it against ``posenc.apply_rope``).
- ``check_llama3_frequencies(fn)`` (7): ``fn(inv_freq, factor, low_freq_factor, high_freq_factor,
  original_length) -> [pairs]``, Llama 3.1's rescaled frequencies.
- ``check_alibi_slopes(fn)`` (8): ``fn(n_heads) -> [n_heads]``, including counts that are not powers of two.
- ``check_counting_layer(fn)`` (9): ``fn(tokens[seq], bos) -> [seq]``, the positions one uniform causal
  attention layer reads off the mask and a BOS token.
- ``check_paired_interval(fn)`` (10): ``fn(a, b, level) -> (mean, low, high)``, the Student-t interval
  of ``a[seed] - b[seed]`` over the seeds both ``{seed: value}`` dicts have.
- ``check_alibi_bias(fn)`` (11): ``fn(slopes[heads], q_len, k_len) -> [heads, q_len, k_len]``, ALiBi's bias
  for queries that are the last ``q_len`` of ``k_len`` tokens (a KV cache).
- ``check_attention_temperature(fn)`` (12): ``fn(positions, floor_scale, scale)`` -> Llama 4's query
  factors, shaped like ``positions``.
- ``check_partial_rotation(fn)`` (13): ``fn(head_dim, base, partial_rotary_factor, rope_type)`` ->
  inverse frequencies of partial (``"default"``) or proportional (``"proportional"``) rotation.
- ``check_sliding_window_mask(fn)`` (14): ``fn(seq, window) -> bool [seq, seq]``.
- ``check_sink_attention(fn)`` (15): ``fn(q, k, v, sinks, mask) -> [batch, heads, q_len, head_dim]``,
  gpt-oss's learned sinks.
- ``check_mrope_positions(fn)`` (16): ``fn(segments) -> [3, seq]``, M-RoPE's (t, h, w) ids of text and
  ``(t, h, w)`` grids.
- ``check_clopper_pearson(fn)`` (17): ``fn(successes, trials, level) -> (low, high)``, the exact binomial
  interval.
- ``check_forget_bias(fn)`` (18): ``fn(log_f) -> [..., seq, seq]``, the Forgetting Transformer's bias with
  ``-inf`` above the diagonal.
- ``check_chunked_mask(fn)`` (19): ``fn(seq, chunk) -> bool [seq, seq]``, Llama 4's chunked attention.

Where posenc has no function for the quantity (chapters 2 and 9), the reference is written out in this
module, and the tests check it against the formula.
"""

from __future__ import annotations

import math
import statistics

import torch
import torch.nn.functional as F

from .absolute import sinusoidal_encoding, sinusoidal_encoding_2d
from .alibi import alibi_bias, alibi_slopes
from .forgetting import forget_bias
from .masks import causal_mask, chunked_mask, sliding_window_mask
from .relative import t5_relative_bucket
from .rope import mrope_positions, rope_frequencies
from .rope.scaling import _llama3
from .sinks import sink_attention
from .stats import _binomial_cdf, clopper_pearson, paired_interval, t_interval, t_quantile
from .temperature import attention_temperature


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


def _as_numbers(name: str, value, n: int) -> torch.Tensor:
    """``n`` plain numbers (a tuple or list of floats, say) as a float64 tensor ``[n]``."""
    try:
        numbers = [float(v) for v in value]
    except (TypeError, ValueError):
        raise ExerciseFailed(f"{name} should return {n} numbers, got {value!r}") from None
    if len(numbers) != n:
        raise ExerciseFailed(f"{name} should return {n} numbers, got {len(numbers)}: {value!r}")
    return torch.tensor(numbers, dtype=torch.float64)


def _diagnose(name: str, answer: torch.Tensor, expected: torch.Tensor, known: dict, tolerance: float,
              relative: float = 0.0, where: torch.Tensor | None = None):
    """Raise ``ExerciseFailed``: the first known mistake whose output the answer matches (a mistake may
    map to a list of outputs, its forms), or the largest difference. With ``where`` (boolean, the shape of
    ``expected``) only those entries are compared."""
    known = {mistake: wrong if isinstance(wrong, list) else [wrong] for mistake, wrong in known.items()}
    if where is not None and answer.shape == expected.shape:
        answer, expected = (torch.where(where, t.double(), 0.0) for t in (answer, expected))
        known = {mistake: [torch.where(where, w.double(), 0.0) for w in forms] for mistake, forms in known.items()}
    for mistake, forms in known.items():
        if any(_close(answer, wrong, tolerance, relative) for wrong in forms):
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
            known["the angles are computed in bfloat16 (chapter 6's bug: 8 bits of mantissa lose them even at "
                  "small positions): compute position * frequency in float32 or float64"] = _rope(
                x, positions, 10000.0, dtype=torch.bfloat16)
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


# ---- chapter 2: binary position codes ------------------------------------------------------------------

def _binary_code(positions: torch.Tensor, bits: int) -> torch.Tensor:
    """Chapter 2's code, ``[n, bits]`` float64: feature k is bit k of the position (least significant
    first), so positions ``2**bits`` apart get the same code."""
    return ((positions[:, None] >> torch.arange(bits)) & 1).double()


def check_binary_code(fn) -> bool:
    """``fn(positions[n], bits) -> [n, bits]``: bit k of each position in feature k, least significant bit
    first, as 0 and 1 (chapter 2's ``binary_code`` without its constant feature)."""
    for positions, bits in ((torch.arange(64), 6), (torch.tensor([7, 8, 31, 32, 63, 64, 100]), 6),
                            (torch.arange(300), 9), (torch.arange(4), 1)):
        expected = _binary_code(positions, bits)
        answer = _as_tensor("the code", fn(positions, bits), expected.shape)
        if not _close(answer, expected, 1e-9):
            known = {"the bits are in reverse order: feature 0 is the least significant bit, (p >> 0) & 1":
                         expected.flip(-1),
                     "the bits are -1 and +1 (2b - 1, exercise 2's code); this exercise keeps 0 and 1":
                         2 * expected - 1,
                     "feature k is p // 2**k, not bit k: keep its last bit, (p >> k) & 1 or (p // 2**k) % 2":
                         (positions[:, None] // 2 ** torch.arange(bits)).double()}
            _diagnose(f"binary code ({len(positions)} positions, {bits} bits)", answer, expected, known, 1e-9)
    return _passed("binary code")


# ---- chapter 4: the 2D sinusoidal table ----------------------------------------------------------------

def _rows_then_columns(rows: torch.Tensor, columns: torch.Tensor) -> torch.Tensor:
    """``[height, f]`` row codes and ``[width, f]`` column codes -> ``[height * width, 2f]``, raster order."""
    height, width = rows.shape[0], columns.shape[0]
    return torch.cat((rows[:, None].expand(height, width, -1), columns[None].expand(height, width, -1)),
                     dim=-1).reshape(height * width, -1)


def check_sinusoidal_2d(fn) -> bool:
    """``fn(height, width, dim) -> [height * width, dim]``: patch ``r * width + c`` is ``[PE(r), PE(c)]``,
    chapter 3's interleaved table of width ``dim / 2`` for the row, then for the column."""
    for height, width, dim in ((3, 5, 16), (4, 4, 8), (1, 6, 8), (6, 2, 32)):
        expected = sinusoidal_encoding_2d(height, width, dim, dtype=torch.float64)
        answer = _as_tensor("the table", fn(height, width, dim), expected.shape)
        if not _close(answer, expected, 1e-6):
            half = dim // 2
            wide = [sinusoidal_encoding(n, dim, dtype=torch.float64)[:, :half] for n in (height, width)]
            known = {
                "the halves are swapped: the first dim/2 features code the row, the last dim/2 the column "
                "(MAE's original code puts the column first)": expected.roll(half, dims=1),
                "the patches are numbered column by column; in raster order row r, column c is patch "
                "r * width + c": expected.view(height, width, dim).transpose(0, 1).reshape(-1, dim),
                "each half takes the frequencies of a table dim wide; it is a table of width dim/2, "
                "w_i = 10000 ** (-2i / (dim/2))": _rows_then_columns(*wide),
                "each half is all sines, then all cosines (Hugging Face's ViTMAE); this exercise interleaves "
                "them, as chapter 3's table does":
                    sinusoidal_encoding_2d(height, width, dim, layout="sin_cos", dtype=torch.float64),
            }
            _diagnose(f"2D table ({height} x {width}, dim {dim})", answer, expected, known, 1e-6)
    return _passed("2D sinusoidal table")


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


# ---- chapter 7: Llama 3.1's rule -----------------------------------------------------------------------

def check_llama3_frequencies(fn) -> bool:
    """``fn(inv_freq[pairs], factor, low_freq_factor, high_freq_factor, original_length) -> [pairs]``:
    Llama 3.1's rescaled RoPE frequencies, compared in float64 with posenc's ``"llama3"`` type."""
    heads = ((128, 5e5, 8192, 8.0, 1.0, 4.0), (128, 1e4, 4096, 4.0, 1.0, 4.0), (64, 1e4, 1024, 16.0, 1.0, 4.0),
             (128, 5e5, 8192, 16.0, 1.0, 1.0))  # the last: Llama 4 Scout, an empty blend band
    for head_dim, base, length, factor, low, high in heads:
        inv_freq = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
        params = {"factor": factor, "low_freq_factor": low, "high_freq_factor": high,
                  "original_max_position_embeddings": length}
        expected = _llama3(inv_freq, params)
        answer = _as_tensor("the frequencies", fn(inv_freq.clone(), factor, low, high, length), expected.shape)
        if not _close(answer, expected, 0.0, 1e-6):
            wavelength = 2 * math.pi / inv_freq
            band = (wavelength >= length / high) & (wavelength <= length / low)
            known = {
                "every pair is divided by the factor (position interpolation); Llama 3's rule keeps the pairs "
                "whose wavelength is below L / high_freq_factor": inv_freq / factor,
                "the wavelength is 1 / theta; it is 2 pi / theta, and without the 2 pi the bands move":
                    _llama3(inv_freq * 2 * math.pi, params) / (2 * math.pi),
                "the blend is reversed: smooth = (L / wavelength - low) / (high - low) is the weight of the "
                "kept frequency, (1 - smooth) that of the divided one":
                    torch.where(band, inv_freq / factor + inv_freq - expected, expected),
            }
            _diagnose(f"Llama 3 frequencies (head_dim {head_dim}, base {base:g}, L {length}, factor {factor:g}, "
                      f"low {low:g}, high {high:g})", answer, expected, known, 0.0, 1e-6)
    return _passed("Llama 3 frequencies")


# ---- chapter 9: position from the causal mask ----------------------------------------------------------

def _counting_layer(tokens: torch.Tensor, bos: int, *, causal: bool = True) -> torch.Tensor:
    """Kazemnejad et al.'s construction, ``[seq]`` float64: uniform attention over the keys each query may
    see, values 1 at the BOS token and 0 elsewhere, read out as ``1 / share - 1``."""
    seq = tokens.shape[0]
    visible = causal_mask(seq, seq) if causal else torch.ones(seq, seq, dtype=torch.bool)
    weights = visible.double() / visible.sum(dim=-1, keepdim=True)  # every score 0: even weights
    share = weights @ (tokens == bos).double()  # BOS's share of each output
    return 1 / share - 1


def check_counting_layer(fn) -> bool:
    """``fn(tokens[seq], bos) -> [seq]``: the position each token reads off one causal attention layer with
    zero queries and values marking the BOS token, ``1 / share - 1``."""
    generator = torch.Generator().manual_seed(0)
    ordinary = torch.randint(1, 256, (59,), generator=generator)
    for tokens, bos in ((torch.cat([torch.tensor([0]), ordinary[:39]]), 0), (torch.tensor([7]), 7),
                        (torch.tensor([5, 1, 5, 2, 3]), 5),  # a BOS that comes again (exercise 1)
                        (torch.cat([torch.tensor([0]), ordinary[:9], torch.tensor([0]), ordinary[9:]]), 0)):
        expected = _counting_layer(tokens, bos)
        answer = _as_tensor("the positions", fn(tokens, bos), expected.shape)
        if not _close(answer, expected, 1e-6):
            known = {"one too large: 1 / share counts the tokens up to i, 1 .. i + 1; the position is "
                     "1 / share - 1": expected + 1,
                     "this is BOS's share of the output, 1 / (i + 1); the position read from it is "
                     "1 / share - 1": 1 / (expected + 1),
                     "every query sees every key: with the causal mask query i averages tokens 0 .. i only":
                         _counting_layer(tokens, bos, causal=False),
                     "this is arange(seq), not what the layer computes: with a second BOS token the share "
                     "doubles from there on (chapter 9's exercise 1)": torch.arange(len(tokens)).double()}
            _diagnose(f"counting layer ({len(tokens)} tokens, BOS {bos})", answer, expected, known, 1e-6)
    return _passed("counting layer")


# ---- chapter 10: paired intervals ----------------------------------------------------------------------

def _paired_mistakes(a: dict, b: dict, level: float) -> dict:
    """The usual wrong intervals for ``a[seed] - b[seed]``, each ``[3]`` (mean, low, high)."""
    seeds = sorted(set(a) & set(b))
    n, differences = len(seeds), [a[s] - b[s] for s in seeds]
    mean, t = statistics.fmean(differences), t_quantile(0.5 + level / 2, n - 1)
    z = statistics.NormalDist().inv_cdf(0.5 + level / 2)

    def around(half: float) -> torch.Tensor:
        return torch.tensor([mean, mean - half, mean + half], dtype=torch.float64)

    low, high = paired_interval(a, b, level)[1:]
    spread = math.sqrt(sum(statistics.variance([d[s] for s in seeds]) for d in (a, b)) / n)
    return {
        "the values are paired by their place in the dicts; pair a[seed] with b[seed], over the seeds both have":
            torch.tensor(t_interval([x - y for x, y in zip(a.values(), b.values())], level), dtype=torch.float64),
        "this is b - a; the interval is of a[seed] - b[seed]":
            torch.tensor([-mean, -high, -low], dtype=torch.float64),
        "the quantile is the normal one (1.96 at 95%); with n seeds it is Student's t with n - 1 degrees of "
        "freedom (posenc.stats.t_quantile(0.975, 4) = 2.776 for 5 seeds)":
            around(z * statistics.stdev(differences) / math.sqrt(n)),
        "the standard deviation divides by n (statistics.pstdev); the sample one divides by n - 1":
            around(t * statistics.pstdev(differences) / math.sqrt(n)),
        "unpaired: the spreads of a and of b add up; the interval of the per-seed differences removes the "
        "spread the two share through the seed": around(t * spread),
    }


def check_paired_interval(fn) -> bool:
    """``fn(a, b, level) -> (mean, low, high)``: the Student-t interval of ``a[seed] - b[seed]`` over the
    seeds both ``{seed: value}`` dicts have, as ``posenc.stats.paired_interval``."""
    shared = [0.62, 0.35, 0.81, 0.47, 0.70, 0.55]  # what a seed does to both methods
    a = {seed: shared[seed] + gain for seed, gain in enumerate([0.12, 0.08, 0.15, 0.05, 0.11])}
    b = {seed: shared[seed] for seed in (4, 2, 0, 3, 1, 5)}  # another order, and one seed more
    for a_, b_, level in ((a, b, 0.95), (a, dict(reversed(list(a.items()))), 0.9),
                          ({0: 1.0, 1: 1.4}, {1: 0.9, 0: 0.8}, 0.95)):
        expected = torch.tensor(paired_interval(a_, b_, level), dtype=torch.float64)
        answer = _as_numbers("the interval", fn(dict(a_), dict(b_), level), 3)
        if not _close(answer, expected, 1e-5, 1e-4):
            _diagnose(f"paired interval ({len(set(a_) & set(b_))} seeds, level {level})", answer, expected,
                      _paired_mistakes(a_, b_, level), 1e-5, 1e-4)
    return _passed("paired interval")


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
                     "query i at k_len - q_len + i (the cache offset)": [at_zero, signed],
                     "off by one: query i is at k_len - q_len + i, not one further (the length after appending "
                     "counts the query itself)": _alibi_at(slopes, torch.arange(q_len) + offset + 1, k_len),
                     "the sign is flipped: ALiBi subtracts slope * distance, so far keys lose score": -expected}
            _diagnose(f"ALiBi bias (q_len {q_len}, k_len {k_len})", answer, expected, known, 1e-5, where=visible)
    return _passed("ALiBi bias with a cache")


# ---- chapter 20: Llama 4's attention temperature -------------------------------------------------------

def check_attention_temperature(fn) -> bool:
    """``fn(positions, floor_scale, scale)`` -> factors shaped like ``positions``:
    ``1 + scale * ln(1 + floor((p + 1) / floor_scale))``, as ``posenc.attention_temperature``."""
    edges = torch.tensor([0, 1, 8190, 8191, 8192, 16382, 16383, 16384, 100_000, 1_000_000])
    for positions, floor_scale, scale in ((edges, 8192, 0.1), (torch.arange(40).view(2, 20), 8, 0.5)):
        expected = attention_temperature(positions, floor_scale=floor_scale, scale=scale).double()
        answer = _as_tensor("the factors", fn(positions.clone(), floor_scale, scale), positions.shape)
        if not _close(answer, expected, 1e-5):
            p = positions.double()
            known = {"the steps come one position late: floor(p / floor_scale) is Mistral's form; Llama 4's "
                     "is floor((p + 1) / floor_scale)": 1 + scale * torch.log1p(torch.floor(p / floor_scale)),
                     "the factor grows smoothly; Llama 4's is a staircase, floor((p + 1) / floor_scale)":
                         1 + scale * torch.log1p((p + 1) / floor_scale),
                     "the factor starts at 0; it is 1 + scale * ln(...), exactly 1 for the first "
                     "floor_scale - 1 positions": scale * torch.log1p(torch.floor((p + 1) / floor_scale))}
            _diagnose(f"attention temperature (floor_scale {floor_scale}, scale {scale})", answer, expected,
                      known, 1e-5)
    return _passed("attention temperature")


# ---- chapter 14: partial and proportional rotation -----------------------------------------------------

def _rotation_mistakes(head_dim: int, base: float, share: float, rope_type: str) -> dict:
    """The other construction, and each with its exponent over the wrong width (float64)."""
    rotary, turning = int(share * head_dim), int(share * head_dim // 2)
    i = torch.arange(head_dim // 2, dtype=torch.float64)
    partial = base ** (-2 * torch.arange(rotary // 2, dtype=torch.float64) / rotary)
    proportional = torch.where(i < turning, base ** (-2 * i / head_dim), 0.0)
    if rope_type == "default":
        return {"this is proportional rotation (Gemma 4's rope_type \"proportional\"); partial rotation has "
                "r // 2 frequencies, base ** (-2i / r), with r = int(p * head_dim)": proportional,
                "the exponent runs over head_dim; partial rotation's runs over the rotary dim r = "
                "int(p * head_dim): base ** (-2i / r)": proportional[:turning]}
    return {"this is partial rotation (rope_type \"default\" with a partial_rotary_factor); proportional "
            "keeps all head_dim // 2 frequencies, base ** (-2i / head_dim), and gives the pairs from "
            "int(p * head_dim // 2) on frequency 0": partial,
            "the exponent runs over the rotary dim; proportional keeps the full head's, base ** (-2i / head_dim)":
                torch.where(i < turning, base ** (-2 * i / rotary), 0.0)}


def check_partial_rotation(fn) -> bool:
    """``fn(head_dim, base, partial_rotary_factor, rope_type)`` -> inverse frequencies: ``rope_type="default"``
    is partial rotation (GPT-NeoX; ``r = int(p * head_dim)`` features turn, ``[r // 2]`` frequencies
    ``base ** (-2i / r)``); ``"proportional"`` (Gemma 4) gives ``[head_dim // 2]``, ``base ** (-2i / head_dim)``
    for the first ``int(p * head_dim // 2)`` pairs and 0 for the rest."""
    for head_dim, base, share in ((512, 1e6, 0.25), (64, 1e4, 0.5), (128, 1e4, 0.25)):
        for rope_type in ("default", "proportional"):
            scaling = {"rope_type": rope_type, "partial_rotary_factor": share}
            expected = rope_frequencies(head_dim, base=base, scaling=scaling)[0].double()
            answer = _as_tensor("the frequencies", fn(head_dim, base, share, rope_type))
            if not _close(answer, expected, 1e-12, 1e-6):
                _diagnose(f"{rope_type} rotation (head_dim {head_dim}, base {base:g}, p {share})", answer,
                          expected, _rotation_mistakes(head_dim, base, share, rope_type), 1e-12, 1e-6)
    return _passed("partial and proportional rotation")


# ---- chapter 17: learned sinks -------------------------------------------------------------------------

def check_sink_attention(fn) -> bool:
    """``fn(q, k, v, sinks[heads], mask) -> [batch, heads, q_len, head_dim]``: ``softmax([q k^T / sqrt(d),
    sink])`` with the sink's column dropped, times v; ``mask`` is boolean ``[q_len, k_len]``, True where
    query i may see key j. Compared in float64 with ``posenc.sink_attention``."""
    generator = torch.Generator().manual_seed(3)
    q, k, v = torch.randn(3, 2, 3, 7, 8, generator=generator, dtype=torch.float64).unbind(0)
    for q_len, logits in ((7, [-1.0, 0.0, 2.0]), (2, [0.5, 3.0, -2.0]), (7, [8.0, 8.0, 8.0])):
        sinks, mask, query = torch.tensor(logits, dtype=torch.float64), causal_mask(q_len, 7), q[:, :, -q_len:]
        expected = sink_attention(query, k, v, sinks, mask=mask)
        answer = _as_tensor("the output", fn(query.clone(), k.clone(), v.clone(), sinks.clone(), mask.clone()),
                            expected.shape)
        if not _close(answer, expected, 1e-9):
            known = {"this is plain attention: the sink changes nothing (left out, added to every score, or the "
                     "weights renormalised after its column is dropped); it is one more column of the scores, "
                     "dropped after the softmax": F.scaled_dot_product_attention(query, k, v, attn_mask=mask),
                     "the scores are not scaled by 1 / sqrt(head_dim) (the sink logit is not scaled)":
                         sink_attention(query, k, v, sinks, mask=mask, scale=1.0),
                     "the sink logit has the wrong sign: a larger sink takes more of the weight":
                         sink_attention(query, k, v, -sinks, mask=mask)}
            _diagnose(f"sink attention (q_len {q_len}, sinks {logits})", answer, expected, known, 1e-9)
    return _passed("sink attention")


# ---- chapter 18: M-RoPE ids ----------------------------------------------------------------------------

def _mrope_ids(segments, *, advance_by_tokens: bool = False, frames: bool = True) -> torch.Tensor:
    """M-RoPE ids ``[3, seq]`` written out, with switches for two usual mistakes."""
    ids, p = [], 0
    for item in segments:
        if isinstance(item, int):
            ids += [(p + i,) * 3 for i in range(item)]
            p += item
            continue
        t, h, w = item
        ids += [(p + (f if frames else 0), p + r, p + c) for f in range(t) for r in range(h) for c in range(w)]
        p += t * h * w if advance_by_tokens else max(t, h, w)
    return torch.tensor(ids, dtype=torch.long).T


def check_mrope_positions(fn) -> bool:
    """``fn(segments) -> [3, seq]``: M-RoPE's (t, h, w) ids of a list of text runs (ints) and ``(t, h, w)``
    grids, as ``posenc.mrope_positions`` (Qwen2-VL's rule: resume one past the largest id)."""
    for segments in ([3, (1, 3, 4), 2, (2, 2, 3), 3], [2, (6, 2, 2), 3], [4], [(1, 2, 2)],
                     [1, (3, 2, 5), 2, (1, 4, 2), 1]):
        expected = mrope_positions(segments)
        answer = _as_tensor("the ids", fn(list(segments)), expected.shape)
        if _close(answer, expected, 0.0):
            continue
        known = {"after a grid the running position moves by its number of tokens, as after text; M-RoPE "
                 "resumes one past the largest id the grid used, p + max(t, h, w)":
                     _mrope_ids(segments, advance_by_tokens=True),
                 "after a grid the text resumes at p + max(h, w) (transformers 5.3 to 5.23), which puts the "
                 "text after a long video on its last frames' t ids; the trained rule is p + max(t, h, w)":
                     mrope_positions(segments, resume="transformers_5.3"),
                 "the h and w rows are swapped: row 1 holds the grid row (h), row 2 the column (w), and the "
                 "tokens run row by row": expected[[0, 2, 1]],
                 "the t id does not advance with the frames: frame f of a grid that starts at p has t = p + f":
                     _mrope_ids(segments, frames=False)}
        for mistake, wrong in known.items():
            if _close(answer, wrong, 0.0):
                raise ExerciseFailed(f"M-RoPE ids of {segments}: {mistake}")
        token = int(torch.nonzero((answer.double() != expected.double()).any(0))[0])
        yours = tuple(float(v) for v in answer[:, token])
        raise ExerciseFailed(f"M-RoPE ids of {segments}: token {token} has (t, h, w) = {yours}, expected "
                             f"{tuple(expected[:, token].tolist())}")
    return _passed("M-RoPE ids")


# ---- chapter 11: exact binomial intervals --------------------------------------------------------------

def _solve_decreasing(function, target: float) -> float:
    """The p in (0, 1) where ``function``, decreasing in p, equals ``target`` (bisection)."""
    low, high = 0.0, 1.0
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if function(middle) > target else (low, middle)
    return (low + high) / 2


def check_clopper_pearson(fn) -> bool:
    """``fn(successes, trials, level) -> (low, high)``: the exact (Clopper-Pearson) interval of a binomial
    proportion, as ``posenc.stats.clopper_pearson``."""
    for k, n, level in ((2, 5, 0.95), (0, 5, 0.95), (5, 5, 0.95), (3, 10, 0.9), (0, 512, 0.95), (17, 40, 0.95)):
        expected = torch.tensor(clopper_pearson(k, n, level), dtype=torch.float64)
        answer = _as_numbers("the interval", fn(k, n, level), 2)
        if not _close(answer, expected, 1e-6):
            rate, z, tail = k / n, statistics.NormalDist().inv_cdf(0.5 + level / 2), (1 - level) / 2
            half = z * math.sqrt(rate * (1 - rate) / n)
            shifted = 0.0 if k == 0 else _solve_decreasing(lambda p: _binomial_cdf(k, n, p), 1 - tail)
            known = {"this is the normal (Wald) interval, p +- z sqrt(p (1 - p) / n): it shrinks to a point at 0 "
                     "or n successes; the exact interval solves the binomial tails":
                         torch.tensor([max(rate - half, 0.0), min(rate + half, 1.0)], dtype=torch.float64),
                     "each tail holds 1 - level; a two-sided interval leaves (1 - level) / 2 in each":
                         torch.tensor(clopper_pearson(k, n, 2 * level - 1), dtype=torch.float64),
                     "the lower bound is off by one: it is the p with P(X >= k) = (1 - level) / 2, that is "
                     "P(X <= k - 1) = 1 - (1 - level) / 2 (not P(X <= k))":
                         torch.tensor([shifted, float(expected[1])], dtype=torch.float64)}
            _diagnose(f"Clopper-Pearson interval ({k} of {n}, level {level})", answer, expected, known, 1e-6)
    return _passed("Clopper-Pearson interval")


# ---- chapter 19: chunked attention ---------------------------------------------------------------------

def check_chunked_mask(fn) -> bool:
    """``fn(seq, chunk) -> bool [seq, seq]``: causal, and query and key in the same block of ``chunk`` tokens
    (Llama 4's chunked attention), as ``posenc.chunked_mask``."""
    for seq, chunk in ((12, 4), (10, 3), (5, 5), (7, 1), (6, 8)):
        expected = chunked_mask(seq, seq, chunk)
        i, j = torch.arange(seq)[:, None], torch.arange(seq)[None, :]
        _check_mask(f"chunked mask ({seq}, chunk {chunk})", fn(seq, chunk), expected,
                    {"this is a sliding window (i - j < chunk); chunks restart at every multiple of chunk: query "
                     "i sees the keys j <= i with j // chunk == i // chunk": sliding_window_mask(seq, seq, chunk),
                     "a query sees the later keys of its chunk: within a chunk the mask is still causal":
                         i // chunk == j // chunk,
                     "the chunk boundaries are one token late: token i is in chunk i // chunk":
                         (j <= i) & ((i + 1) // chunk == (j + 1) // chunk)})
    return _passed("chunked mask")
