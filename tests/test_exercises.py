"""posenc.exercises: a reader's right answer passes, and the typical wrong answers fail with the message
that names the mistake. The right answers are written here from the formulas, as a student would; where a
check's reference is not a posenc function used elsewhere, it is checked against the formula too. Last,
the folded solution of every chapter's graded exercise is run through its check."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

import posenc
import posenc.stats
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

    def right_except_at_width_2(n, d):  # review P1-n4: diagnosed, not posenc's ValueError for d = 2
        return sinusoidal(n, d) + (1.0 if d == 2 else 0.0)
    with pytest.raises(ex.ExerciseFailed, match=r"sinusoidal table \(7 x 2\)"):
        ex.check_sinusoidal(right_except_at_width_2)
    # tensor2tensor's spacing, dim/2 - 1 in the exponent, is still named where it exists
    def t2t(n, d):
        w = 10000.0 ** -(torch.arange(d // 2, dtype=torch.float64) / (d // 2 - 1))
        angles = torch.arange(n, dtype=torch.float64)[:, None] * w
        return torch.stack([angles.sin(), angles.cos()], dim=-1).reshape(n, d)
    with pytest.raises(ex.ExerciseFailed, match="tensor2tensor"):
        ex.check_sinusoidal(t2t)


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
    x = torch.randn(1, 2, 5, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    positions = torch.arange(5)
    cos, sin = rope_cos_sin(positions, rope_frequencies(16)[0].double())
    # the check's convention; posenc's frequencies are float32, so angles agree to about 1e-7 of a radian
    torch.testing.assert_close(apply_rope(x, cos, sin), rope(x, positions, 10000.0), rtol=1e-6, atol=1e-6)
    for wrong, message in ((lambda x, p, b: rope(x, p, b, interleaved=True), "interleaved"),
                           (lambda x, p, b: rope(x, p, b, shift=1), "off by one"),
                           (lambda x, p, b: rope(x, p, b, sign=-1), "wrong way"),
                           (lambda x, p, b: rope(x, p, b, dtype=torch.float16), "half precision"),
                           (lambda x, p, b: rope(x, p, b, dtype=torch.bfloat16), "bfloat16"),
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
    assert ex.check_forget_bias(lambda f: bias(f.float()))  # float32 rounding is not a mistake (P6-m5)
    for wrong, message in ((lambda f: bias(f, inclusive=True), "key's own gate"),
                           (lambda f: -bias(f), "sign is flipped")):
        with pytest.raises(ex.ExerciseFailed, match=message):
            ex.check_forget_bias(wrong)


# --- chapters 2, 4, 5, 7, 9, 10, 11, 13, 14, 17, 18, 19 and 20 -------------------------------------------

def binary(positions, bits, msb_first=False, plus_minus=False, no_mod=False):
    rows = []
    for p in positions.tolist():
        rows.append([(p // 2 ** k) if no_mod else (p // 2 ** k) % 2 for k in range(bits)])
    code = torch.tensor(rows, dtype=torch.float64)
    code = code.flip(-1) if msb_first else code
    return 2 * code - 1 if plus_minus else code


def test_binary_code_right_and_wrong():
    positions = torch.tensor([0, 1, 5, 63, 64, 100])
    torch.testing.assert_close(ex.absolute._binary_code(positions, 6), binary(positions, 6))  # the reference
    assert ex.check_binary_code(binary)
    for wrong, message in ((lambda p, b: binary(p, b, msb_first=True), "reverse order"),
                           (lambda p, b: binary(p, b, plus_minus=True), "-1 and \\+1"),
                           (lambda p, b: binary(p, b, no_mod=True), "last bit"),
                           (lambda p, b: binary(p, b)[:, :-1], "shape")):
        with pytest.raises(ex.ExerciseFailed, match=message):
            ex.check_binary_code(wrong)


def table_2d(height, width, dim, swap=False, columns_first=False, wide=False, split=False):
    def code(n):  # chapter 3's table of width dim / 2 (or the first half of a table dim wide)
        width_ = dim if wide else dim // 2
        table = sinusoidal(n, width_, split=split)
        return table[:, : dim // 2]

    r, c = torch.meshgrid(torch.arange(height), torch.arange(width), indexing="ij")
    r, c = r.flatten(), c.flatten()
    if columns_first:  # patch c * height + r
        order = torch.argsort(c * height + r)
        r, c = r[order], c[order]
    rows, cols = code(height)[r], code(width)[c]
    return torch.cat([cols, rows] if swap else [rows, cols], dim=1)


def test_sinusoidal_2d_right_and_wrong():
    assert ex.check_sinusoidal_2d(table_2d)
    for wrong, message in ((lambda h, w, d: table_2d(h, w, d, swap=True), "halves are swapped"),
                           (lambda h, w, d: table_2d(h, w, d, columns_first=True), "column by column"),
                           (lambda h, w, d: table_2d(h, w, d, wide=True), "a table dim wide"),
                           (lambda h, w, d: table_2d(h, w, d, split=True), "all sines, then all cosines")):
        with pytest.raises(ex.ExerciseFailed, match=message):
            ex.check_sinusoidal_2d(wrong)


def t5_bucket(relative, bidirectional, num_buckets, max_distance, sign=1, clamp=True, rounding=int,
              absolute=False):
    def one(offset):
        offset *= sign
        bucket, n = 0, num_buckets
        if bidirectional:
            n //= 2
            bucket += n if offset > 0 else 0
            distance = abs(offset)
        else:
            distance = abs(offset) if absolute else max(-offset, 0)
        exact = n // 2
        if distance < exact:
            return bucket + distance
        large = exact + rounding(math.log(distance / exact) / math.log(max_distance / exact) * (n - exact))
        return bucket + (min(large, n - 1) if clamp else large)

    return torch.tensor([one(o) for o in relative.flatten().tolist()]).view(relative.shape)


def test_t5_bucket_right_and_wrong():
    offsets = torch.arange(-200, 201)
    for settings in ((True, 32, 128), (False, 32, 128), (False, 12, 40)):
        torch.testing.assert_close(ex.relative._t5_bucket(offsets, *settings), t5_bucket(offsets, *settings))
    assert ex.check_t5_bucket(t5_bucket)
    for wrong, message in ((lambda *a: t5_bucket(*a, sign=-1), "query - key"),
                           (lambda *a: t5_bucket(*a, clamp=False), "clamp"),
                           (lambda *a: t5_bucket(*a, rounding=round), "rounded"),
                           (lambda *a: t5_bucket(*a, absolute=True), "bucket 0")):
        with pytest.raises(ex.ExerciseFailed, match=message):
            ex.check_t5_bucket(wrong)


def llama3(inv_freq, factor, low, high, length, two_pi=2 * math.pi, reverse=False, every=False):
    out = []
    for theta in inv_freq.tolist():
        wavelength = two_pi / theta
        if every or wavelength > length / low:
            out.append(theta / factor)
        elif wavelength < length / high:
            out.append(theta)
        else:
            smooth = (length / wavelength - low) / (high - low)
            smooth = 1 - smooth if reverse else smooth
            out.append((1 - smooth) * theta / factor + smooth * theta)
    return torch.tensor(out, dtype=torch.float64)


def test_llama3_frequencies_right_and_wrong():
    params = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
              "original_max_position_embeddings": 8192}
    inv_freq, _ = rope_frequencies(128, base=5e5)
    scaled, _ = rope_frequencies(128, base=5e5, scaling=params)  # posenc's public type, in float32
    torch.testing.assert_close(scaled.double(), llama3(inv_freq.double(), 8.0, 1.0, 4.0, 8192))
    assert ex.check_llama3_frequencies(llama3)
    for wrong, message in ((lambda *a: llama3(*a, every=True), "position interpolation"),
                           (lambda *a: llama3(*a, two_pi=1.0), "2 pi"),
                           (lambda *a: llama3(*a, reverse=True), "reversed")):
        with pytest.raises(ex.ExerciseFailed, match=message):
            ex.check_llama3_frequencies(wrong)


def counting(tokens, bos, plus=0, share=False, causal=True):
    marks = (tokens == bos).double()
    seen = marks.cumsum(0) if causal else marks.sum().expand(len(tokens))
    keys = torch.arange(1, len(tokens) + 1, dtype=torch.float64) if causal else float(len(tokens))
    fraction = seen / keys  # BOS's share of each output under even weights
    return fraction if share else 1 / fraction - 1 + plus


def test_counting_layer_right_and_wrong():
    tokens = torch.tensor([0, 3, 0, 4, 5])
    torch.testing.assert_close(ex.masks._counting_layer(tokens, 0), counting(tokens, 0))
    torch.testing.assert_close(ex.masks._counting_layer(tokens, 0),
                               torch.tensor([0, 1, 0.5, 1, 1.5], dtype=torch.float64))
    assert ex.check_counting_layer(counting)
    for wrong, message in ((lambda t, b: counting(t, b, plus=1), "one too large"),
                           (lambda t, b: counting(t, b, share=True), "share of the output"),
                           (lambda t, b: counting(t, b, causal=False), "every key"),
                           (lambda t, b: torch.arange(len(t)).double(), "arange")):
        with pytest.raises(ex.ExerciseFailed, match=message):
            ex.check_counting_layer(wrong)


def paired(a, b, level, order=False, z=False, population=False, unpaired=False, flip=False):
    from statistics import NormalDist, fmean, pstdev, stdev, variance

    from posenc.stats import t_quantile

    seeds = sorted(set(a) & set(b))
    if order:
        differences = [x - y for x, y in zip(a.values(), b.values())]
    else:
        differences = [a[s] - b[s] for s in seeds]
    n, mean = len(differences), fmean(differences)
    q = NormalDist().inv_cdf(0.5 + level / 2) if z else t_quantile(0.5 + level / 2, n - 1)
    spread = (pstdev if population else stdev)(differences)
    if unpaired:
        spread = math.sqrt(variance([a[s] for s in seeds]) + variance([b[s] for s in seeds]))
    half = q * spread / math.sqrt(n)
    return (-mean, -mean - half, -mean + half) if flip else (mean, mean - half, mean + half)


def test_paired_interval_right_and_wrong():
    from posenc.stats import paired_interval

    a, b = {0: 1.0, 1: 1.5, 2: 0.7}, {2: 0.6, 1: 1.1, 0: 0.9, 3: 5.0}
    # the reference, by hand: differences 0.1, 0.4, 0.1; mean 0.2, sd sqrt(0.03), t(0.975, 2) = 4.303
    mean, low, high = paired_interval(a, b)
    assert math.isclose(mean, 0.2) and math.isclose(high - mean, 4.3027 * math.sqrt(0.03 / 3), rel_tol=1e-4)
    assert ex.check_paired_interval(paired)
    for options, message in (({"order": True}, "place in the dicts"), ({"flip": True}, "b - a"),
                             ({"z": True}, "normal one"), ({"population": True}, "divides by n"),
                             ({"unpaired": True}, "unpaired")):
        with pytest.raises(ex.ExerciseFailed, match=message):
            ex.check_paired_interval(lambda a, b, level: paired(a, b, level, **options))
    with pytest.raises(ex.ExerciseFailed, match="3 numbers"):
        ex.check_paired_interval(lambda a, b, level: paired(a, b, level)[1:])


def alibi_cache(slopes, q_len, k_len, shift=None, sign=1):
    offset = k_len - q_len if shift is None else shift
    out = torch.zeros(len(slopes), q_len, k_len, dtype=torch.float64)
    for h, m in enumerate(slopes.tolist()):
        for i in range(q_len):
            for j in range(k_len):
                out[h, i, j] = -sign * m * (i + offset - j)  # signed: the causal part is compared
    return out


def test_alibi_bias_right_and_wrong():
    torch.testing.assert_close(ex.relative._alibi_at(torch.tensor([0.5]), torch.tensor([4]), 6)[0, 0],
                               torch.tensor([-2.0, -1.5, -1.0, -0.5, 0.0, -0.5], dtype=torch.float64))
    assert ex.check_alibi_bias(alibi_cache)
    masked = lambda s, q, k: alibi_cache(s, q, k).masked_fill(~torch.ones(q, k, dtype=torch.bool).tril(k - q),
                                                              float("-inf"))
    assert ex.check_alibi_bias(masked)  # -inf where the mask hides the key: not compared
    for wrong, message in ((lambda s, q, k: alibi_cache(s, q, k, shift=0), "cache offset"),
                           (lambda s, q, k: alibi_cache(s, q, k, shift=k - q + 1), "off by one"),
                           (lambda s, q, k: alibi_cache(s, q, k, sign=-1), "sign is flipped"),
                           # chapter 8's exact shortcut: right weights, not the bias asked for (P6-m7)
                           (lambda s, q, k: s.double()[:, None, None] * torch.arange(k).double().expand(q, k),
                            "chapter 8's shortcut")):
        with pytest.raises(ex.ExerciseFailed, match=message):
            ex.check_alibi_bias(wrong)


def temperature(positions, floor_scale, scale, late=False, smooth=False, start=1.0):
    p = positions.double()
    steps = (p + 1) / floor_scale if smooth else torch.floor((p if late else p + 1) / floor_scale)
    return start + scale * torch.log(1 + steps)


def test_attention_temperature_right_and_wrong():
    assert math.isclose(float(posenc.attention_temperature(torch.tensor([16383]))), 1 + 0.1 * math.log(3),
                        rel_tol=1e-6)
    assert ex.check_attention_temperature(temperature)
    for options, message in (({"late": True}, "one position late"), ({"smooth": True}, "staircase"),
                             ({"start": 0.0}, "starts at 0")):
        with pytest.raises(ex.ExerciseFailed, match=message):
            ex.check_attention_temperature(lambda p, f, s: temperature(p, f, s, **options))


def rotation(head_dim, base, share, rope_type, swap=False, over=None):
    proportional = (rope_type == "proportional") != swap
    rotary = int(share * head_dim)
    if proportional:
        width = over or head_dim
        return torch.tensor([base ** (-2 * i / width) if i < int(share * head_dim // 2) else 0.0
                             for i in range(head_dim // 2)], dtype=torch.float64)
    width = over or rotary
    return torch.tensor([base ** (-2 * i / width) for i in range(rotary // 2)], dtype=torch.float64)


def test_partial_rotation_right_and_wrong():
    assert ex.check_partial_rotation(rotation)
    cases = ((lambda d, b, p, t: rotation(d, b, p, t, swap=t == "default"), "this is proportional"),
             (lambda d, b, p, t: rotation(d, b, p, t, swap=t == "proportional"), "this is partial"),
             (lambda d, b, p, t: rotation(d, b, p, t, over=d if t == "default" else None), "runs over head_dim"),
             (lambda d, b, p, t: rotation(d, b, p, t, over=int(p * d) if t == "proportional" else None),
              "runs over the rotary dim"))
    for wrong, message in cases:
        with pytest.raises(ex.ExerciseFailed, match=message):
            ex.check_partial_rotation(wrong)


def sinks_attention(q, k, v, sinks, mask, scale=None, sign=1, drop_sink=True):
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    scores = (q @ k.transpose(-2, -1) * scale).masked_fill(~mask, float("-inf"))
    column = (sign * sinks)[None, :, None, None].expand(*scores.shape[:-1], 1)
    weights = torch.cat([scores, column], dim=-1).softmax(dim=-1)[..., :-1] if drop_sink else scores.softmax(-1)
    return weights @ v


def test_sink_attention_right_and_wrong():
    assert ex.check_sink_attention(sinks_attention)
    assert ex.check_sink_attention(lambda *a: sinks_attention(*(t.float() for t in a[:4]), a[4]))  # float32
    for options, message in (({"drop_sink": False}, "plain attention"), ({"scale": 1.0}, "not scaled"),
                             ({"sign": -1}, "wrong sign")):
        with pytest.raises(ex.ExerciseFailed, match=message):
            ex.check_sink_attention(lambda *a: sinks_attention(*a, **options))


def mrope(segments, by_tokens=False, late_rule=False, swap=False, frames=True):
    ids, p = [], 0
    for item in segments:
        if isinstance(item, int):
            ids += [[p + i] * 3 for i in range(item)]
            p += item
            continue
        t, h, w = item
        for f in range(t):
            for r in range(h):
                for c in range(w):
                    ids.append([p + (f if frames else 0), p + (c if swap else r), p + (r if swap else c)])
        p += t * h * w if by_tokens else max(h, w) if late_rule else max(t, h, w)
    return torch.tensor(ids).T


def test_mrope_positions_right_and_wrong():
    assert ex.check_mrope_positions(mrope)
    for options, message in (({"by_tokens": True}, "number of tokens"), ({"late_rule": True}, "5.3"),
                             ({"swap": True}, "swapped"), ({"frames": False}, "does not advance")):
        with pytest.raises(ex.ExerciseFailed, match=message):
            ex.check_mrope_positions(lambda s: mrope(s, **options))


def exact_interval(k, n, level, tail_scale=0.5, lower_k=-1, wald=False):
    # tail_scale: the share of 1 - level in each tail; lower_k: the lower bound solves P(X <= k + lower_k)
    from statistics import NormalDist

    def cdf(m, p):  # P(X <= m)
        return sum(math.comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(m + 1))

    def solve(m, target):
        low, high = 0.0, 1.0
        for _ in range(50):
            middle = (low + high) / 2
            low, high = (middle, high) if cdf(m, middle) > target else (low, middle)
        return (low + high) / 2

    if wald:
        rate, z = k / n, NormalDist().inv_cdf(0.5 + level / 2)
        half = z * math.sqrt(rate * (1 - rate) / n)
        return max(rate - half, 0.0), min(rate + half, 1.0)
    tail = (1 - level) * tail_scale  # each tail holds (1 - level) / 2
    low = 0.0 if k == 0 else solve(k + lower_k, 1 - tail)
    high = 1.0 if k == n else solve(k, tail)
    return low, high


def test_clopper_pearson_right_and_wrong():
    low, high = posenc.stats.clopper_pearson(2, 5)  # the reference against the formula written here
    assert math.isclose(low, exact_interval(2, 5, 0.95)[0], abs_tol=1e-9)
    assert math.isclose(high, exact_interval(2, 5, 0.95)[1], abs_tol=1e-9)
    assert ex.check_clopper_pearson(exact_interval)
    for options, message in (({"wald": True}, "Wald"), ({"tail_scale": 1.0}, "each tail holds 1 - level"),
                             ({"lower_k": 0}, "lower bound is off by one")):
        with pytest.raises(ex.ExerciseFailed, match=message):
            ex.check_clopper_pearson(lambda k, n, level: exact_interval(k, n, level, **options))


def test_chunked_mask_right_and_wrong():
    i, j = (lambda s: torch.arange(s)[:, None]), (lambda s: torch.arange(s)[None, :])
    assert ex.check_chunked_mask(lambda s, c: (j(s) <= i(s)) & (j(s) // c == i(s) // c))
    for wrong, message in ((lambda s, c: (j(s) <= i(s)) & (i(s) - j(s) < c), "sliding window"),
                           (lambda s, c: j(s) // c == i(s) // c, "still causal"),
                           (lambda s, c: (j(s) <= i(s)) & ((j(s) + 1) // c == (i(s) + 1) // c), "one token early"),
                           (lambda s, c: ~((j(s) <= i(s)) & (j(s) // c == i(s) // c)), "inverted")):
        with pytest.raises(ex.ExerciseFailed, match=message):
            ex.check_chunked_mask(wrong)


# --- the folded solutions in the chapters pass their checks ---------------------------------------------

# every chapter has one, but the real model's (its exercises read the committed record)
GRADED_CHAPTERS = [p.stem[:2] for p in sorted((Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))
                   if not p.stem.endswith("_real_model")]


def chapter_imports(nb) -> dict:
    """The names a chapter's code cells import at their top level, imported here (the solutions run
    where the reader runs them: after the chapter's imports)."""
    import ast

    namespace = {}
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        try:
            tree = ast.parse("".join(cell["source"]))
        except SyntaxError:  # a cell with IPython syntax imports nothing the solutions use
            continue
        imports = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
        exec(compile(ast.Module(body=imports, type_ignores=[]), "<imports>", "exec"), namespace)
    return namespace


def graded_solutions(nb) -> list[tuple[str, str, str]]:
    """``(check, function, code)`` for each exercise of the Exercises section that names a
    ``check_*(function)``: the code is the indented block of its folded solution, dedented."""
    import re
    import textwrap

    (text,) = ["".join(c["source"]) for c in nb["cells"]
               if c["cell_type"] == "markdown" and re.search(r"^## Exercises", "".join(c["source"]), re.M)]
    section = text[text.index("## Exercises"):text.index("## References")]
    found = []
    for exercise in re.split(r"^(?=\*\*\d+\.\*\*)", section, flags=re.M)[1:]:
        calls = dict.fromkeys(re.findall(r"\b(check_\w+)\((\w+)\)", exercise))
        if not calls:
            continue
        solution = exercise[exercise.index("```{admonition} Solution"):]
        lines = solution.split(":class: dropdown\n", 1)[1].splitlines()
        block = []
        for line in lines:
            if line.startswith("    ") or (not line.strip() and block):
                block.append(line)
            else:
                break
        assert block, "the folded solution should start with its code, indented by four spaces"
        code = textwrap.dedent("\n".join(block))
        found += [(check, function, code) for check, function in calls]
    return found


@pytest.mark.parametrize("chapter", GRADED_CHAPTERS)
def test_folded_solutions_pass_their_checks(chapter, capsys):
    import json

    from notebook_tools import ROOT

    (path,) = (ROOT / "notebooks").glob(f"{chapter}_*.ipynb")
    nb = json.loads(path.read_text(encoding="utf-8"))
    solutions = graded_solutions(nb)
    assert solutions, f"chapter {chapter} has no exercise graded by posenc.exercises"
    for check, function, code in solutions:
        namespace = chapter_imports(nb)
        exec(compile(code, f"{path.name}: solution for {check}", "exec"), namespace)
        assert function in namespace, f"the solution for {check} does not define {function}"
        assert getattr(ex, check)(namespace[function]) is True
        printed = capsys.readouterr().out
        assert printed.endswith(": correct\n"), printed
