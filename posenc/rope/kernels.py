"""Rotating queries and keys: cos/sin tables, ``apply_rope`` and its fast paths.

``rope_formula`` is the definition (``x * cos + rotate_pairs(x) * sin``, five passes over x in eager
PyTorch); ``apply_rope`` computes the same numbers for any tables, written straight into its output a run
of positions at a time, without looking at the table values on a GPU (no host synchronisation);
``compile_apply_rope`` fuses the half-split form with ``torch.compile``.
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
    relative 6e-8: at position 1M the fastest pairs' angles are off by up to about 0.06 rad (one float32 ulp
    of the angle). For contexts of millions of tokens, form the angles in float64 yourself.
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


def _angles_repeat_per_pair(cos: torch.Tensor, sin: torch.Tensor) -> bool:
    # The complex multiplication reads one angle per interleaved pair; that is only right if cos/sin
    # repeat it, as rope_cos_sin lays them out. Looking costs a read of the tables (and, off the CPU,
    # a device -> host synchronisation, which is why only CPU tables are looked at).
    return torch.equal(cos[..., 0::2], cos[..., 1::2]) and torch.equal(sin[..., 0::2], sin[..., 1::2])


# On the CPU, x is rotated a run of positions at a time (all heads together), in chunks of about this
# many bytes, so that the second and third operations on a chunk find it in cache. Measured on a 2-core
# Xeon (2 MiB of L2 per core) for q of [1, 32, 4096, 128] fp32, as ratios to q.clone() in one process
# (one quiet run): chunks of 128 KiB 2.58x, 256 KiB 2.05x, 512 KiB 1.44x, 1 MiB 1.33x, 2 MiB 1.39x,
# 4 MiB 1.49x, no chunks 1.59x; the previous kernel (chunks of whole heads, four operations) 1.72x.
# Small chunks lose because an operation on fewer than 32768 elements runs on one thread and each
# operation costs microseconds however small. Also measured and dropped: two multiply-adds per half
# (four operations, 1.42x); both members' multiply-add as one operation through an as_strided view
# pairing row r's second half with row r+1's first (two operations plus fix-ups at the ends: no faster);
# x broadcast over a [..., 2, half] view of the output (1.7x: inner loops of 64). What stays between this
# and a copy is the second and third operation: eager PyTorch has no fused a*b + c*d for members half a
# row apart (a complex multiplication needs them adjacent, which is why interleaved pairs take one pass).
# On a GPU each chunk would cost kernel launches: no chunks there.
_CHUNK_BYTES = 2**20


def _pair_members(rotary_dim: int, interleaved: bool) -> tuple[slice, slice]:
    """Where the first and the second member of every pair sit among the rotary features."""
    if interleaved:
        return slice(0, None, 2), slice(1, None, 2)
    return slice(0, rotary_dim // 2), slice(rotary_dim // 2, rotary_dim)


def _as_complex(t: torch.Tensor) -> torch.Tensor:
    """``[..., 2n]`` real -> ``[..., n]`` complex view, pairs (2i, 2i+1) as (real, imaginary)."""
    return torch.view_as_complex(t.unflatten(-1, (-1, 2)))


def _complex_viewable(t: torch.Tensor) -> bool:
    """Whether ``_as_complex`` can view ``t``: pairs adjacent, every other stride and the offset even."""
    return t.stride(-1) == 1 and not any(s % 2 for s in t.stride()[:-1]) and not t.storage_offset() % 2


def _rotate_chunk(out: torch.Tensor, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                  turn: torch.Tensor | None, interleaved: bool, scratch: torch.Tensor | None) -> None:
    # out, x: [..., rows, head_dim], a run of positions; cos, sin: [..., rows, r]. With pairs (a, b) at
    # (first, second) among the first r features:
    #     a' = a cos[first] - b sin[first],   b' = b cos[second] + a sin[second],
    # which is rope_formula itself for ANY table, so it needs no look at the values: x * cos over whole
    # rows (one long loop), then one multiply-add per member, on a chunk still in cache. ``turn``
    # (cos + i sin per pair, for interleaved tables that repeat each angle) replaces the three operations
    # by one complex multiplication. ``scratch`` (the compute dtype) holds the result when out is narrower.
    rotary_dim = cos.shape[-1]
    if rotary_dim < x.shape[-1]:
        # partial rotary: copy the whole chunk (one long loop; measured faster than copying only the
        # pass-through features, whose rows are short), then overwrite the rotated features
        out.copy_(x)
        out, x = out[..., :rotary_dim], x[..., :rotary_dim]
    target = out if scratch is None else scratch
    if turn is not None:
        torch.mul(_as_complex(x.to(target.dtype)), turn, out=_as_complex(target))
    else:
        first, second = _pair_members(rotary_dim, interleaved)
        torch.mul(x, cos, out=target)
        target[..., first].addcmul_(x[..., second], sin[..., first], value=-1)
        target[..., second].addcmul_(x[..., first], sin[..., second])
    if scratch is not None:
        out.copy_(scratch)


def _rotate_into(out: torch.Tensor, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *,
                 interleaved: bool, paired: bool) -> torch.Tensor:
    """Fill ``out`` (``x``'s shape and dtype, contiguous) with x's first ``r`` features rotated and the
    rest copied, a run of positions at a time on the CPU.

    ``cos``/``sin``: ``[..., seq, r]`` in the compute dtype, broadcastable to x. ``paired``: the tables
    repeat each angle per pair (interleaved only: the complex multiplication). The arithmetic is done in
    the tables' dtype, through a scratch chunk when ``out`` is narrower (bfloat16, float16). On the CPU
    that chunk is one run of positions, so no float32 copy of the whole of x is made; on other devices
    there are no chunks, and the scratch holds all of x's rotated features in float32 (which is one
    reason this is no faster than ``rope_formula`` on a GPU in bfloat16: chapter 13).
    """
    rotary_dim, seq = cos.shape[-1], x.shape[-2]
    turn = None
    if interleaved and paired:
        turn = torch.complex(cos[..., 0::2], sin[..., 0::2])
        x = x if _complex_viewable(x) else x.contiguous()
    step = seq  # on a GPU each chunk would cost kernel launches: no chunks there
    single_pass = turn is not None and rotary_dim == x.shape[-1] and out.dtype == cos.dtype
    if x.device.type == "cpu" and not single_pass:  # a single pass gains nothing from chunks
        bytes_per_position = x.shape[:-2].numel() * rotary_dim * cos.element_size()  # all heads
        step = max(1, _CHUNK_BYTES // max(bytes_per_position, 1))
    scratch = None
    if out.dtype != cos.dtype:
        scratch = torch.empty(out[..., :step, :rotary_dim].shape, dtype=cos.dtype, device=out.device)
    if step >= seq:  # one chunk: no slicing (it costs microseconds a tensor, which decoding feels)
        _rotate_chunk(out, x, cos, sin, turn, interleaved, scratch)
        return out
    for start in range(0, seq, step):
        rows = slice(start, start + step)
        _rotate_chunk(out[..., rows, :], x[..., rows, :], cos[..., rows, :], sin[..., rows, :],
                      None if turn is None else turn[..., rows, :], interleaved,
                      None if scratch is None else scratch[..., :min(step, seq - start), :])
    return out


def _swap_members(t: torch.Tensor, interleaved: bool) -> torch.Tensor:
    """Each pair's two entries exchanged: ``[..., r]`` -> ``[..., r]``."""
    if interleaved:
        return t.unflatten(-1, (-1, 2)).flip(-1).flatten(-2)
    first, second = t.chunk(2, dim=-1)
    return torch.cat((second, first), dim=-1)


class _Rotation(torch.autograd.Function):
    # out= kernels have no autograd. The rotation is linear in x; its transpose is the same kernel with
    # sin's pair entries exchanged and negated (for tables that repeat each angle: minus the angle).
    @staticmethod
    def forward(ctx, x, cos, sin, interleaved, paired):
        ctx.save_for_backward(cos, sin)
        ctx.interleaved, ctx.paired = interleaved, paired
        out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        return _rotate_into(out, x, cos, sin, interleaved=interleaved, paired=paired)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        cos, sin = ctx.saved_tensors
        back_sin = -sin if ctx.paired else -_swap_members(sin, ctx.interleaved)
        grad_x = torch.empty(grad.shape, dtype=grad.dtype, device=grad.device)
        _rotate_into(grad_x, grad, cos, back_sin, interleaved=ctx.interleaved, paired=ctx.paired)
        return grad_x, None, None, None, None


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *, interleaved: bool = False) -> torch.Tensor:
    """Rotate feature pairs of ``x`` counter-clockwise by the angles whose cos and sin are given.

    Args:
        x: shape ``[..., seq, head_dim]``, any float dtype.
        cos, sin: from ``rope_cos_sin`` with the same ``interleaved``; shape ``[..., seq, rotary_dim]``,
            broadcastable to ``x`` (e.g. ``[seq, head_dim]`` for ``x`` of ``[batch, heads, seq, head_dim]``).
            With ``rotary_dim < head_dim`` (partial rotary: GPT-NeoX, Phi, GLM, Qwen3-Next) the first
            ``rotary_dim`` features are rotated, pairing within them, and the rest pass unchanged.
        interleaved: ``False`` pairs feature i with i + rotary_dim/2 (GPT-NeoX, Hugging Face Llama);
            ``True`` pairs 2i with 2i+1 (RoFormer, GPT-J, Meta's Llama).

    Returns:
        Tensor of the same shape and dtype as ``x``; the arithmetic is done in at least float32.

    Equal to ``rope_formula`` (``x * cos + rotate_pairs(x) * sin``) for any tables, but written straight
    into the output a run of positions at a time (three operations on a chunk still in cache, instead of
    five passes over x), with a custom backward. Interleaved tables that repeat each angle per pair, as
    ``rope_cos_sin`` lays them out, take one complex multiplication instead; ``apply_rope`` looks at the
    tables to know that only when they are on the CPU (a plain read there; on a GPU it would wait for
    the device), and ``RotaryEmbedding`` never needs to look. No host synchronisation on any device.
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
    if not all(n == m or 1 in (n, m) for n, m in zip(reversed(cos.shape[:-2]), reversed(x.shape[:-2]))):
        raise ValueError(f"cos/sin's leading dimensions must broadcast with x's, got cos/sin of "
                         f"{tuple(cos.shape)} for x of {tuple(x.shape)}")
    return _rotate(x, cos, sin, interleaved=interleaved, layout_known=False)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *, interleaved: bool,
            layout_known: bool) -> torch.Tensor:
    # apply_rope without the argument checks. ``layout_known``: the tables come from rope_cos_sin
    # (RotaryEmbedding built them), so interleaved pairs may take the complex multiplication unseen.
    compute = torch.promote_types(x.dtype, torch.float32)
    cos, sin = cos.to(compute), sin.to(compute)
    rotary_dim = cos.shape[-1]
    leading = x.shape[-cos.dim():-1]  # x's dimensions that the tables' [..., seq] lines up with
    tables_fit = cos.dim() <= x.dim() and all(n in (1, m) for n, m in zip(cos.shape[:-1], leading))
    if not tables_fit or cos.requires_grad or sin.requires_grad:
        # tables bigger than x, or that need a gradient: the formula, through autograd
        rotated = rope_formula(x[..., :rotary_dim].to(compute), cos, sin, interleaved=interleaved).to(x.dtype)
        return torch.cat((rotated, x[..., rotary_dim:]), dim=-1) if rotary_dim < x.shape[-1] else rotated
    paired = interleaved and (layout_known or (cos.device.type == "cpu" and _angles_repeat_per_pair(cos, sin)))
    if torch.is_grad_enabled() and x.requires_grad:
        return _Rotation.apply(x, cos, sin, interleaved, paired)
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    return _rotate_into(out, x, cos, sin, interleaved=interleaved, paired=paired)


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
            return _rotate(x, cos, sin, interleaved=True, layout_known=True)
        return compiled(x, cos, sin)

    return rope
