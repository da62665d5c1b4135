"""Rotating queries and keys: cos/sin tables, ``apply_rope`` and its fast paths.

``rope_formula`` is the definition (``x * cos + rotate_pairs(x) * sin``); ``apply_rope`` computes the same
numbers in about one pass over memory; ``compile_apply_rope`` fuses the half-split form with
``torch.compile``.
"""

from __future__ import annotations

import torch

from .._validate import check_integer_positions, check_tensor

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
        cos, sin: from ``rope_cos_sin`` with the same ``interleaved``; shape ``[..., seq, rotary_dim]``,
            broadcastable to ``x`` (e.g. ``[seq, head_dim]`` for ``x`` of ``[batch, heads, seq, head_dim]``).
            With ``rotary_dim < head_dim`` (partial rotary: GPT-NeoX, Phi, GLM, Qwen3-Next) the first
            ``rotary_dim`` features are rotated, pairing within them, and the rest pass unchanged.
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
    rotary_dim = cos.shape[-1]
    if cos.shape[-2] != x.shape[-2] or rotary_dim > x.shape[-1] or rotary_dim % 2:
        raise ValueError(f"cos/sin must end in [seq, rotary_dim] with seq = {x.shape[-2]} and an even "
                         f"rotary_dim <= head_dim = {x.shape[-1]}, got {list(cos.shape[-2:])}")
    return _rotate(x, cos, sin, interleaved=interleaved, layout_known=False)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *, interleaved: bool,
            layout_known: bool) -> torch.Tensor:
    # apply_rope without the argument checks. ``layout_known`` says the tables come from rope_cos_sin
    # (RotaryEmbedding built them), so the fast path needs no look at their values: checking them costs
    # a device -> host synchronisation per call on a GPU.
    rotary_dim = cos.shape[-1]
    if rotary_dim < x.shape[-1]:  # partial rotary: rotate the first rotary_dim features, pass the rest
        rotated = _rotate(x[..., :rotary_dim], cos, sin, interleaved=interleaved, layout_known=layout_known)
        return torch.cat((rotated, x[..., rotary_dim:]), dim=-1)
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
