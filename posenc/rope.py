"""Rotary position embeddings (RoPE, Su et al. 2021) and their context-extension schemes.

RoPE rotates each pair of query/key features by an angle ``position * inv_freq[i]``. Because rotations
compose, the dot product of a query rotated to position m and a key rotated to position n depends only on
m - n. Three pieces, used in this order:

1. ``rope_frequencies`` -> the per-pair inverse frequencies (optionally rescaled for longer contexts) and
   the attention scale that YaRN multiplies into cos and sin;
2. ``rope_cos_sin`` -> cos and sin tables for some positions;
3. ``apply_rope`` -> the rotated tensor.

``RotaryEmbedding`` wraps the three for queries and keys shaped ``[batch, heads, seq, head_dim]``.

The scaling dicts follow Hugging Face's ``rope_scaling`` / ``rope_parameters`` format. For the types Hugging
Face has (``linear``, ``dynamic``, ``yarn``, ``llama3``) the numbers equal
``transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS`` for the same settings (the tests check).
``ntk`` is posenc's own *static* NTK-aware base change (HF has no such type: its ``dynamic`` type applies
the same base change, grown with the sequence length). ``longrope`` and ``partial_rotary_factor`` are not
supported yet.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ._float32 import Float32Buffers
from ._validate import (check_choice, check_even, check_int, check_integer_positions, check_positive_float,
                        check_tensor)

# rope_type -> (required keys, optional keys). "rope_theta" may also appear (the HF format puts the
# base there); it must then agree with the ``base`` argument.
ROPE_TYPES = {
    "default": ((), ()),
    "linear": (("factor",), ()),
    "ntk": (("factor",), ()),
    "dynamic": (("factor", "original_max_position_embeddings"), ()),
    "yarn": (("factor", "original_max_position_embeddings"),
             ("beta_fast", "beta_slow", "attention_factor", "mscale", "mscale_all_dim", "truncate")),
    "llama3": (("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"), ()),
}


def default_inv_freq(head_dim: int, base: float = 10000.0) -> torch.Tensor:
    """``inv_freq[i] = base ** (-2i / head_dim)`` for i < head_dim/2, shape ``[head_dim//2]`` float32.

    Computed in float32 exactly as Hugging Face and Meta's Llama do, so tables match theirs bit for bit.
    """
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim
    return 1.0 / (base ** exponents)


def _parse_scaling(scaling, base: float) -> tuple[str, dict]:
    """Validate a scaling dict; return its rope_type and its other keys."""
    if scaling is None:
        return "default", {}
    if not isinstance(scaling, dict):
        raise TypeError(f"scaling must be a dict like {{'rope_type': 'linear', 'factor': 2.0}} or None, "
                        f"got {type(scaling).__name__}")
    params = dict(scaling)
    rope_type = params.pop("rope_type", params.pop("type", None))  # "type" is HF's legacy key
    if rope_type is None:
        raise ValueError("scaling must contain 'rope_type', one of " + str(sorted(ROPE_TYPES)))
    check_choice("scaling['rope_type']", rope_type, ROPE_TYPES)
    theta = params.pop("rope_theta", None)
    if theta is not None and float(theta) != base:
        raise ValueError(f"scaling['rope_theta']={theta} disagrees with base={base}; pass one of them")
    required, optional = ROPE_TYPES[rope_type]
    missing = [key for key in required if key not in params]
    if missing:
        raise ValueError(f"scaling with rope_type={rope_type!r} is missing {missing}; it needs {list(required)}")
    unknown = sorted(set(params) - set(required) - set(optional))
    if unknown:
        raise ValueError(f"scaling with rope_type={rope_type!r} got unknown keys {unknown}; "
                         f"allowed: {list(required) + list(optional)}")
    if "factor" in params:
        factor = check_positive_float("scaling['factor']", params["factor"])
        if factor < 1:
            raise ValueError(f"scaling['factor'] must be >= 1 (it extends the context), got {factor}")
    if "original_max_position_embeddings" in params:
        check_int("scaling['original_max_position_embeddings']", params["original_max_position_embeddings"])
    return rope_type, params


def _yarn(inv_freq: torch.Tensor, head_dim: int, base: float, params: dict) -> tuple[torch.Tensor, float]:
    """YaRN (Peng et al. 2023): interpolate low frequencies, keep high ones, ramp in between."""
    factor = float(params["factor"])
    original_len = params["original_max_position_embeddings"]
    beta_fast = params.get("beta_fast") or 32
    beta_slow = params.get("beta_slow") or 1

    def mscale(scale: float, coefficient: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * coefficient * math.log(scale) + 1.0

    attention_factor = params.get("attention_factor")
    if attention_factor is None:
        if params.get("mscale") and params.get("mscale_all_dim"):
            attention_factor = mscale(factor, params["mscale"]) / mscale(factor, params["mscale_all_dim"])
        else:
            attention_factor = mscale(factor)

    def pair_index_with(rotations: float) -> float:
        # The (fractional) pair index whose wavelength fits `rotations` times into the original context.
        return head_dim * math.log(original_len / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = pair_index_with(beta_fast), pair_index_with(beta_slow)
    if params.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    # The upper clamp copies Hugging Face (head_dim - 1); it never binds, since the ramp below runs over
    # pair indices 0 .. head_dim//2 - 1 and clamps to [0, 1] anyway.
    low, high = max(low, 0), min(high, head_dim - 1)
    if low == high:
        high += 0.001  # avoid dividing by zero in the ramp
    ramp = ((torch.arange(head_dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    keep = 1 - ramp  # 1 for high-frequency pairs (kept as trained), 0 for low ones (interpolated)
    inv_freq = (inv_freq / factor) * (1 - keep) + inv_freq * keep
    return inv_freq, float(attention_factor)


def _llama3(inv_freq: torch.Tensor, params: dict) -> torch.Tensor:
    """Llama 3.1: divide long wavelengths by factor, keep short ones, blend smoothly in between."""
    factor = float(params["factor"])
    low_freq_factor, high_freq_factor = float(params["low_freq_factor"]), float(params["high_freq_factor"])
    if high_freq_factor < low_freq_factor:
        raise ValueError(f"scaling['high_freq_factor'] must be >= scaling['low_freq_factor'], "
                         f"got {high_freq_factor} < {low_freq_factor}")
    original_len = params["original_max_position_embeddings"]
    low_freq_wavelen = original_len / low_freq_factor
    high_freq_wavelen = original_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    if high_freq_factor == low_freq_factor:
        # Llama 4 Scout's published settings (low = high = 1): the blend band is empty, so every pair is
        # either kept or divided by factor (Hugging Face gives the same numbers).
        return scaled
    smooth = (original_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium = (wavelen >= high_freq_wavelen) & (wavelen <= low_freq_wavelen)
    return torch.where(is_medium, blended, scaled)


def rope_frequencies(head_dim: int, *, base: float = 10000.0, scaling: dict | None = None,
                     seq_len: int | None = None) -> tuple[torch.Tensor, float]:
    """Inverse frequencies of RoPE, optionally rescaled to extend the context window.

    Args:
        head_dim: features per head, a positive even integer.
        base: the frequency base ("rope_theta"), > 0.
        scaling: ``None`` for plain RoPE, or a Hugging Face style dict with ``"rope_type"`` one of
            ``"default"``, ``"linear"`` (factor: position interpolation, Chen et al. 2023),
            ``"ntk"`` (factor: NTK-aware base change, ``base * factor**(d/(d-2))``; posenc's static form,
            Hugging Face has no such type),
            ``"dynamic"`` (factor, original_max_position_embeddings: NTK base change grown with seq_len),
            ``"yarn"`` (factor, original_max_position_embeddings, optional beta_fast=32, beta_slow=1,
            attention_factor, mscale, mscale_all_dim, truncate=True), or ``"llama3"`` (factor,
            low_freq_factor <= high_freq_factor, original_max_position_embeddings; equal factors, as in
            Llama 4 Scout, leave the blend band empty).
        seq_len: current sequence length, used only by ``"dynamic"`` (defaults to the original length).

    Returns:
        ``(inv_freq, attention_scale)``: ``inv_freq`` has shape ``[head_dim // 2]`` (float32);
        ``attention_scale`` is the factor YaRN multiplies into cos and sin (1.0 for the other types).
    """
    head_dim = check_even("head_dim", head_dim)
    base = check_positive_float("base", base)
    rope_type, params = _parse_scaling(scaling, base)
    if seq_len is not None:
        seq_len = check_int("seq_len", seq_len)
    if rope_type in ("ntk", "dynamic") and head_dim < 4:
        raise ValueError(f"rope_type {rope_type!r} needs head_dim >= 4, got {head_dim}")

    if rope_type == "ntk":
        base = base * float(params["factor"]) ** (head_dim / (head_dim - 2))
    elif rope_type == "dynamic":
        factor, original_len = float(params["factor"]), params["original_max_position_embeddings"]
        length = max(seq_len or original_len, original_len)
        base = base * (factor * length / original_len - (factor - 1)) ** (head_dim / (head_dim - 2))

    inv_freq = default_inv_freq(head_dim, base)
    if rope_type == "linear":
        return inv_freq / float(params["factor"]), 1.0
    if rope_type == "yarn":
        return _yarn(inv_freq, head_dim, base, params)
    if rope_type == "llama3":
        return _llama3(inv_freq, params), 1.0
    return inv_freq, 1.0


def rope_cos_sin(positions: torch.Tensor, inv_freq: torch.Tensor, *, attention_scale: float = 1.0,
                 interleaved: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of ``positions[..., p] * inv_freq[i]``, laid out for ``apply_rope``.

    Args:
        positions: whole-number positions, shape ``[..., seq]`` (e.g. ``[seq]`` or ``[batch, seq]``).
        inv_freq: shape ``[head_dim // 2]``.
        attention_scale: multiplied into both tables (YaRN's temperature; 1.0 otherwise).
        interleaved: ``False`` repeats the angles as ``[a0..a_{d/2-1}, a0..a_{d/2-1}]`` (half-split
            pairing); ``True`` as ``[a0, a0, a1, a1, ...]`` (pairs 2i, 2i+1).

    Returns:
        ``(cos, sin)``, each float32 of shape ``[..., seq, head_dim]``, on the device of ``positions``.

    Angles are ``float32(position) * float32(inv_freq)``, as in Hugging Face, so the tables match its bit for
    bit. Float32 holds whole positions exactly only below 2**24 (16.7M), and the product is rounded to a
    relative 6e-8: at position 1M the fastest pairs' angles are off by up to about 0.03 rad. For contexts of
    millions of tokens, form the angles in float64 yourself.
    """
    check_integer_positions("positions", positions)
    check_tensor("inv_freq", inv_freq, min_dim=1)
    if inv_freq.dim() != 1:
        raise ValueError(f"inv_freq must be 1-D [head_dim // 2], got shape {tuple(inv_freq.shape)}")
    if positions.dim() == 0:
        raise ValueError("positions must have at least 1 dimension [..., seq], got a scalar")
    angles = positions.to(torch.float32)[..., None] * inv_freq.to(positions.device, torch.float32)
    if interleaved:
        angles = angles.repeat_interleave(2, dim=-1)
    else:
        angles = torch.cat((angles, angles), dim=-1)
    return angles.cos() * attention_scale, angles.sin() * attention_scale


def rotate_pairs(x: torch.Tensor, *, interleaved: bool = False) -> torch.Tensor:
    """Rotate every feature pair (a, b) by 90 degrees to (-b, a); shape ``[..., head_dim]`` kept."""
    if interleaved:
        even, odd = x[..., 0::2], x[..., 1::2]
        return torch.stack((-odd, even), dim=-1).flatten(-2)
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


def rope_formula(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *, interleaved: bool = False) -> torch.Tensor:
    """RoPE as usually written, ``x * cos + rotate_pairs(x) * sin``, with no checks and no fast path.

    The definition ``apply_rope`` must agree with; eager, it makes about five passes over ``x``.
    """
    return x * cos + rotate_pairs(x, interleaved=interleaved) * sin


def _angles_repeat_per_pair(cos: torch.Tensor, sin: torch.Tensor, interleaved: bool) -> bool:
    # The fast paths read one angle per pair; that is only right if cos/sin repeat it the way
    # rope_cos_sin lays them out. Anything else takes the general formula.
    if interleaved:
        return torch.equal(cos[..., 0::2], cos[..., 1::2]) and torch.equal(sin[..., 0::2], sin[..., 1::2])
    half = cos.shape[-1] // 2
    return torch.equal(cos[..., :half], cos[..., half:]) and torch.equal(sin[..., :half], sin[..., half:])


def _rotate_interleaved(x: torch.Tensor, cos_half: torch.Tensor, sin_half: torch.Tensor) -> torch.Tensor:
    # Pairs (2i, 2i+1) are adjacent, so they are complex numbers: one complex multiplication by
    # cos + i sin rotates them all in a single pass over x (and it is differentiable).
    pairs = torch.view_as_complex(x.unflatten(-1, (-1, 2)))
    return torch.view_as_real(pairs * torch.complex(cos_half, sin_half)).flatten(-2)


# Chunks of about this many bytes keep the second pass over each chunk in the CPU's cache.
_CHUNK_BYTES = 2 * 2**20


def _rotate_halves(x: torch.Tensor, cos_half: torch.Tensor, sin_half: torch.Tensor) -> torch.Tensor:
    # (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin), written straight into the two halves of the
    # output: no rotated copy of x and no concatenation. When the tables are shared by all leading
    # dimensions (batch, heads), go a few heads at a time so that each chunk is still in cache when
    # the second operation reads it back.
    half, (seq, dim) = x.shape[-1] // 2, x.shape[-2:]
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    if cos_half.dim() == 2 and x.dim() > 2:
        xs, outs = x.reshape(-1, seq, dim), out.view(-1, seq, dim)
        step = max(1, _CHUNK_BYTES // (seq * dim * x.element_size()))
        chunks = [(xs[i:i + step], outs[i:i + step]) for i in range(0, xs.shape[0], step)]
    else:
        chunks = [(x, out)]
    for x_part, out_part in chunks:
        x1, x2, out1, out2 = x_part[..., :half], x_part[..., half:], out_part[..., :half], out_part[..., half:]
        torch.mul(x1, cos_half, out=out1).addcmul_(x2, sin_half, value=-1)
        torch.mul(x2, cos_half, out=out2).addcmul_(x1, sin_half)
    return out


class _HalfSplitRotation(torch.autograd.Function):
    # out= kernels have no autograd; the gradient of a rotation is the rotation by minus the angle.
    @staticmethod
    def forward(ctx, x, cos_half, sin_half):
        ctx.save_for_backward(cos_half, sin_half)
        return _rotate_halves(x, cos_half, sin_half)

    @staticmethod
    def backward(ctx, grad):
        cos_half, sin_half = ctx.saved_tensors
        return _rotate_halves(grad, cos_half, -sin_half), None, None


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *, interleaved: bool = False) -> torch.Tensor:
    """Rotate feature pairs of ``x`` counter-clockwise by the angles whose cos and sin are given.

    Args:
        x: shape ``[..., seq, head_dim]``, any float dtype.
        cos, sin: from ``rope_cos_sin`` with the same ``interleaved``; shape ``[..., seq, head_dim]``,
            broadcastable to ``x`` (e.g. ``[seq, head_dim]`` for ``x`` of ``[batch, heads, seq, head_dim]``).
        interleaved: ``False`` pairs feature i with i + head_dim/2 (GPT-NeoX, Hugging Face Llama);
            ``True`` pairs 2i with 2i+1 (RoFormer, GPT-J, Meta's Llama).

    Returns:
        Tensor of the same shape and dtype as ``x``; the arithmetic is done in at least float32.

    Equal to ``rope_formula`` (``x * cos + rotate_pairs(x) * sin``) but in about one pass over memory
    instead of five: interleaved pairs as one complex multiplication, half-split pairs written straight
    into the output (with a custom backward, since that kernel has no autograd). Tables not laid out as
    ``rope_cos_sin`` lays them out (each angle once per pair member) take the general formula.
    """
    check_tensor("x", x, min_dim=2)
    check_tensor("cos", cos, min_dim=2)
    check_tensor("sin", sin, min_dim=2)
    if cos.shape != sin.shape:
        raise ValueError(f"cos and sin must have the same shape, got {tuple(cos.shape)} and {tuple(sin.shape)}")
    if x.shape[-1] % 2:
        raise ValueError(f"x's last dimension (head_dim) must be even, got {x.shape[-1]}")
    if cos.shape[-2:] != x.shape[-2:]:
        raise ValueError(f"cos/sin must end in [seq, head_dim] = {list(x.shape[-2:])} to match x, "
                         f"got {list(cos.shape[-2:])}")
    return _rotate(x, cos, sin, interleaved=interleaved, layout_known=False)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *, interleaved: bool,
            layout_known: bool) -> torch.Tensor:
    # apply_rope without the argument checks. ``layout_known`` says the tables come from rope_cos_sin
    # (RotaryEmbedding built them), so the fast path needs no look at their values: checking them costs
    # a device -> host synchronisation per call on a GPU.
    compute = torch.promote_types(x.dtype, torch.float32)
    xc, cos, sin = x.to(compute), cos.to(compute), sin.to(compute)
    fast = (torch.broadcast_shapes(x.shape, cos.shape) == x.shape and not (cos.requires_grad or sin.requires_grad)
            and (layout_known or _angles_repeat_per_pair(cos, sin, interleaved)))
    if not fast:
        out = rope_formula(xc, cos, sin, interleaved=interleaved)
    elif interleaved:
        out = _rotate_interleaved(xc.contiguous(), cos[..., 0::2], sin[..., 0::2])
    else:
        half = x.shape[-1] // 2
        out = _HalfSplitRotation.apply(xc, cos[..., :half], sin[..., :half])
    return out.to(x.dtype)


def _rope_by_pairs(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *, interleaved: bool = False):
    # The same rotation written pair by pair, (a, b) -> (a cos - b sin, b cos + a sin): the form that
    # torch.compile fuses best (one read of x, one write of the result).
    if interleaved:
        a, b, c, s = x[..., 0::2], x[..., 1::2], cos[..., 0::2], sin[..., 0::2]
        return torch.stack((a * c - b * s, b * c + a * s), dim=-1).flatten(-2)
    half = x.shape[-1] // 2
    a, b, c, s = x[..., :half], x[..., half:], cos[..., :half], sin[..., :half]
    return torch.cat((a * c - b * s, b * c + a * s), dim=-1)


def compile_apply_rope(**compile_options):
    """RoPE at about the speed of copying ``x``, through ``torch.compile`` where that helps.

    Returns ``f(x, cos, sin, *, interleaved=False)`` for float32/float64 ``x`` and tables from
    ``rope_cos_sin`` (no checks, no fallback for other tables). Half-split pairs go through one
    compiled, fused kernel; interleaved pairs through ``apply_rope``'s complex multiplication, which is
    already a single pass. Needs a working compiler (a C++ compiler on CPU, Triton on GPU); the first
    call for each new shape compiles (seconds). ``compile_options`` go to ``torch.compile`` (default
    ``dynamic=False``). Where no compiler is available, use ``apply_rope``.
    """
    compile_options.setdefault("dynamic", False)
    compiled = torch.compile(_rope_by_pairs, **compile_options)

    def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *, interleaved: bool = False):
        if interleaved:
            return _rotate_interleaved(x.contiguous(), cos[..., 0::2], sin[..., 0::2])
        return compiled(x, cos, sin)

    return rope


class RotaryEmbedding(Float32Buffers):
    """Applies RoPE to queries and keys: ``forward(q, k, *, offset=0, positions=None) -> (q, k)``.

    Args:
        head_dim: features per head (even).
        base, scaling: as in ``rope_frequencies``.
        interleaved: pairing convention, as in ``apply_rope``.

    ``q`` and ``k`` are ``[batch, heads, seq, head_dim]`` (``k`` may have fewer heads, as in grouped-query
    attention). Their positions are ``offset .. offset+seq-1`` unless ``positions`` (``[seq]`` or
    ``[batch, seq]``, whole numbers) is given. With ``"dynamic"`` scaling the frequencies are recomputed
    for ``max(position) + 1``, as Hugging Face does; keys already in a cache keep their old rotation.

    ``inv_freq`` stays float32 through ``module.to(torch.bfloat16)`` / ``.half()`` (it follows the device,
    never the dtype), and the rotation is done in float32 and cast to ``q``'s dtype at the end.
    """

    float32_buffers = ("inv_freq",)

    def __init__(self, head_dim: int, *, base: float = 10000.0, scaling: dict | None = None,
                 interleaved: bool = False):
        super().__init__()
        inv_freq, attention_scale = rope_frequencies(head_dim, base=base, scaling=scaling)
        self.head_dim, self.base, self.scaling, self.interleaved = head_dim, base, scaling, bool(interleaved)
        self.dynamic = _parse_scaling(scaling, float(base))[0] == "dynamic"
        self.attention_scale = attention_scale
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def cos_sin(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin of shape ``[..., seq, head_dim]`` for ``positions`` ``[..., seq]``."""
        inv_freq = self.inv_freq
        if self.dynamic and positions.numel():
            seq_len = int(positions.max()) + 1
            inv_freq, _ = rope_frequencies(self.head_dim, base=self.base, scaling=self.scaling, seq_len=seq_len)
        return rope_cos_sin(positions, inv_freq, attention_scale=self.attention_scale,
                            interleaved=self.interleaved)

    def forward(self, q: torch.Tensor, k: torch.Tensor, *, offset: int = 0,
                positions: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        for name, t in (("q", q), ("k", k)):
            check_tensor(name, t, min_dim=4)
            if t.dim() != 4 or t.shape[-1] != self.head_dim:
                raise ValueError(f"{name} must be [batch, heads, seq, {self.head_dim}], got {tuple(t.shape)}")
        if q.shape[0] != k.shape[0] or q.shape[2] != k.shape[2]:
            raise ValueError(f"q and k must share batch and seq, got {tuple(q.shape)} and {tuple(k.shape)}")
        seq = q.shape[2]
        if positions is None:
            offset = check_int("offset", offset, minimum=0)
            positions = torch.arange(offset, offset + seq, device=q.device)
        else:
            check_integer_positions("positions", positions)
            if positions.dim() not in (1, 2) or positions.shape[-1] != seq:
                raise ValueError(f"positions must be [seq] or [batch, seq] with seq={seq}, "
                                 f"got {tuple(positions.shape)}")
            if positions.dim() == 2 and positions.shape[0] not in (1, q.shape[0]):
                raise ValueError(f"positions' batch size {positions.shape[0]} does not match q's {q.shape[0]}")
            if offset:
                raise ValueError("pass either offset or positions, not both")
        cos, sin = self.cos_sin(positions)
        if cos.dim() == 3:  # [batch, seq, head_dim] -> broadcast over heads
            cos, sin = cos[:, None], sin[:, None]
        return (_rotate(q, cos, sin, interleaved=self.interleaved, layout_known=True),
                _rotate(k, cos, sin, interleaved=self.interleaved, layout_known=True))

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, base={self.base}, scaling={self.scaling}, interleaved={self.interleaved}"
