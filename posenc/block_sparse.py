"""Attention that costs what its mask allows: FlexAttention with a block mask (inference).

A sliding window of w keys at T tokens needs T * w scores, but a dense kernel given the window as a mask
computes all T * T of them and throws most away. PyTorch's FlexAttention (``torch.nn.attention.
flex_attention``) takes the mask as a function of (query, key) indices, checks it once per block of
64 x 64 (``create_block_mask``) and, compiled, skips the blocks the mask hides: the cost grows with
T * w. The same trick covers the other masks of ``posenc.masks`` (causal, chunked) and, as score
modifications, ALiBi's distance penalty and a learned sink: one extra key, visible to every query, whose
score is the sink logit and whose value is zero.

``block_sparse_attention(q, k, v, window=..., chunk=..., slopes=..., sinks=...)`` computes what
``MultiHeadAttention`` computes with those settings; ``MultiHeadAttention(..., block_sparse=True)`` (or
``use_block_sparse(model)``) routes its full passes here. Limits, all checked: queries and keys of the same
length (a full pass, not cached decoding), no gradient (compiled FlexAttention has no backward pass on CPU
in this PyTorch), no explicit positions, no T5 bias. Where the platform has no compiled kernel (a CPU
without AVX2 or a Mac, where PyTorch's FlexAttention has none; no C++ compiler on a CPU, no Triton or too
old a GPU for it on CUDA: ``NO_COMPILER_ERRORS``) it falls back, once per device type and with a warning,
to the dense masked path: the same numbers, the dense cost. Any
other error is raised. Colab's CPU and GPU runtimes have a compiler.

The block mask is built from index arithmetic on blocks (``block_mask``), never from the ``T x T`` grid of
query-key pairs that ``create_block_mask`` evaluates: a window of 4,096 at T = 131,072 needs a few tens of
MB of block indices, where the grid of pairs is 16 G booleans.
"""

from __future__ import annotations

import warnings
from functools import lru_cache

import torch
import torch.nn.functional as F

from ._validate import check_int, check_tensor
from .masks import layer_mask
from .sinks import sink_attention

# FlexAttention's block: a block of queries x keys is computed whole or skipped. On a CPU, 64: measured on this
# book's 2-core CPU (8 heads of 64, window or chunks of 128), blocks of 64 instead of PyTorch's default 128 take
# the window from 0.62x to 0.47x full causal SDPA at T = 2,048 (chunks 0.47x -> 0.34x) and from 0.19x to 0.15x
# at 8,192, since fewer of the blocks a short window keeps straddle its edges; causal alone is the same. On
# CUDA, 128: the compiled Triton kernel's tile (BLOCK_M, BLOCK_N) must divide the block, and torch.compile
# refuses 64 there ("Q and KV block size must be divisible by BLOCK_M and BLOCK_N").
BLOCK_SIZE = 64
CUDA_BLOCK_SIZE = 128


def block_size(device) -> int:
    """The block size ``block_sparse_attention`` uses on ``device`` (a ``torch.device`` or its name)."""
    return CUDA_BLOCK_SIZE if torch.device(device).type == "cuda" else BLOCK_SIZE


def _visible(window: int | None, chunk: int | None, k_len: int, sink: bool):
    """The mask as FlexAttention's ``mask_mod(batch, head, q_idx, kv_idx) -> bool``."""
    def mask_mod(b, h, q_idx, kv_idx):
        seen = kv_idx <= q_idx
        if window is not None:
            seen = seen & (q_idx - kv_idx < window)
        if chunk is not None:
            seen = seen & (q_idx // chunk == kv_idx // chunk)
        return (seen | (kv_idx == k_len)) if sink else seen  # the sink key: seen by every query
    return mask_mod


def block_classes(seq: int, block: int, *, window: int | None = None, chunk: int | None = None,
                  sink: bool = False, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Which blocks of the causal (``window``, ``chunk``) mask over ``seq`` tokens hold a visible pair.

    Returns ``(partial, full)``, boolean ``[n_q_blocks, n_k_blocks]`` with ``n_q_blocks = ceil(seq / block)``
    and ``n_k_blocks = ceil((seq + sink) / block)``: ``full`` where every pair of the block is visible (the
    kernel skips the mask there), ``partial`` where some but not all are (the mask is applied), neither
    where none is (the block is skipped). Computed from each block's first and last index, in
    ``O(n_q_blocks * n_k_blocks)``: query i sees key j when ``0 <= i - j < window`` (``window`` infinite
    when causal), or with chunks when ``start(i) <= j <= i`` where ``start(i)`` is the first index of i's
    chunk; with ``sink``, key ``seq`` is seen by every query.
    """
    k_len = seq + sink
    q_first = torch.arange(0, seq, block, device=device)[:, None]
    k_first = torch.arange(0, k_len, block, device=device)[None, :]
    q_last, k_last = (q_first + block - 1).clamp(max=seq - 1), (k_first + block - 1).clamp(max=k_len - 1)
    real_k_last = k_last.clamp(max=seq - 1)  # the last real (non-sink) key of each key block
    if chunk is not None:  # the keys query i sees are [start(i), i]; over a block of queries, [start(first), last]
        any_seen = (k_first <= q_last) & (real_k_last >= (q_first // chunk) * chunk)
        all_seen = (real_k_last <= q_first) & (k_first >= (q_last // chunk) * chunk)
    else:  # i - j ranges over [q_first - k_last, q_last - k_first] in a block
        limit = seq if window is None else window - 1
        any_seen = (q_last - k_first >= 0) & (q_first - real_k_last <= limit)
        all_seen = (q_first - real_k_last >= 0) & (q_last - k_first <= limit)
    any_seen = any_seen & (k_first < seq)
    whole = ((q_last - q_first + 1) == block) & ((k_last - k_first + 1) == block) & (k_last < seq)
    full = all_seen & whole  # a block cut by the end of the sequence or holding the sink is never full
    if sink:  # the sink's block: seen by every query, never full
        any_seen = any_seen | (k_last >= seq)
    return any_seen & ~full, full


def _ordered(blocks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """FlexAttention's layout of a ``[n_q, n_k]`` boolean: counts ``[1, 1, n_q]`` and indices
    ``[1, 1, n_q, n_k]`` (int32), each row's marked key blocks first, in increasing order."""
    counts = blocks.sum(-1, dtype=torch.int32)
    indices = torch.argsort((~blocks).to(torch.int8), dim=-1, stable=True).to(torch.int32)
    return counts[None, None], indices[None, None]


@lru_cache(maxsize=64)
def block_mask(seq: int, *, window: int | None = None, chunk: int | None = None, sink: bool = False,
               device: str = "cpu"):
    """The ``BlockMask`` of a causal layer over ``seq`` tokens (``seq + 1`` keys with ``sink``), cached, with
    ``block_size(device)``: built from ``block_classes`` without evaluating the mask on every pair (equal
    to ``create_block_mask``'s, which does), so that long sequences fit in memory."""
    from torch.nn.attention.flex_attention import BlockMask
    seq = check_int("seq", seq)
    if window is not None and chunk is not None:
        raise ValueError("pass window or chunk, not both")
    for name, value in (("window", window), ("chunk", chunk)):
        if value is not None:
            check_int(name, value)
    block = block_size(device)
    partial, full = block_classes(seq, block, window=window, chunk=chunk, sink=sink, device=device)
    return BlockMask.from_kv_blocks(*_ordered(partial), *_ordered(full), BLOCK_SIZE=block,
                                    mask_mod=_visible(window, chunk, seq, sink), seq_lengths=(seq, seq + sink))


def _score_mod(slopes: torch.Tensor | None, sinks: torch.Tensor | None, k_len: int):
    """ALiBi's penalty and the sink logit as FlexAttention's ``score_mod``; None when there is neither."""
    if slopes is None and sinks is None:
        return None

    def score_mod(score, b, h, q_idx, kv_idx):
        if slopes is not None:
            score = score - slopes[h] * (q_idx - kv_idx)
        if sinks is not None:
            score = torch.where(kv_idx == k_len, sinks[h].to(score.dtype), score)
        return score
    return score_mod


_COMPILED: dict = {}
# One compiled kernel per mask, score modification, shape and dtype. PyTorch keeps at most 8 versions of a
# compiled function by default and runs the ninth uncompiled: FlexAttention in eager mode, which computes
# every score (posenc.bench on an H100 ran its ninth and later versions at about 21 ms at T = 8,192, the
# eighth at 0.4 ms). A model has a few masks and lengths; a benchmark sweeping them has more.
COMPILED_VERSIONS = 64


def _flex():
    """``torch.compile(flex_attention)``, built once."""
    if "flex" not in _COMPILED:
        from torch.nn.attention.flex_attention import flex_attention
        _COMPILED["flex"] = torch.compile(flex_attention, dynamic=False)
    return _COMPILED["flex"]


# The errors that mean "this platform has no compiler for the kernel": no working C++ compiler (CPU), no
# Triton, or a GPU too old for Triton (CUDA). torch.compile raises them wrapped (BackendCompilerFailed and
# others keep the original as ``inner_exception`` or ``__cause__``). Anything else is a bug to see, not hide.
NO_COMPILER_ERRORS = ("InvalidCxxCompiler", "TritonMissing", "GPUTooOldForTriton")


def kernel_available(device) -> bool:
    """Whether FlexAttention has a compiled kernel for ``device`` here: not after a no-compiler error on its
    type, and on a CPU only where PyTorch's own check passes (its CPU kernel needs AVX2, and neither macOS
    nor ``ATEN_CPU_CAPABILITY=default``; PyTorch raises ``NotImplementedError`` there otherwise)."""
    device_type = torch.device(device).type
    if device_type in _COMPILED.setdefault("failed", set()):
        return False
    if device_type != "cpu":
        return True
    try:
        from torch._inductor.kernel.flex.flex_cpu import check_cpu_supported
    except ImportError:  # another PyTorch: try, and fall back on a no-compiler error
        return True
    return bool(check_cpu_supported())


def _dense_from_now_on(device_type: str, reason: str) -> None:
    """Remember that ``device_type`` has no compiled kernel, and say so once."""
    _COMPILED.setdefault("failed", set()).add(device_type)
    warnings.warn(f"no compiled FlexAttention kernel on {device_type} ({reason}); block_sparse_attention uses "
                  f"the dense masked path from now on", RuntimeWarning)


def _no_compiler(error: BaseException) -> bool:
    """Whether ``error``, or an error it wraps, is one of ``NO_COMPILER_ERRORS``."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if type(error).__name__ in NO_COMPILER_ERRORS:
            return True
        error = getattr(error, "inner_exception", None) or error.__cause__ or error.__context__
    return False


def dense_attention(q, k, v, *, window=None, chunk=None, slopes=None, sinks=None, scale=None) -> torch.Tensor:
    """The same attention through a materialised ``[seq, seq]`` mask (``posenc.masks``): the reference
    ``block_sparse_attention`` is tested against, and its fallback."""
    seq = q.shape[2]
    visible = layer_mask(seq, seq, window=window, chunk=chunk, device=q.device)
    bias = torch.zeros(visible.shape, dtype=q.dtype, device=q.device).masked_fill(~visible, float("-inf"))
    if slopes is not None:
        distance = torch.arange(seq, device=q.device)[:, None] - torch.arange(seq, device=q.device)[None, :]
        bias = bias - slopes.to(q.dtype)[:, None, None] * distance
    bias = bias.expand(1, q.shape[1], seq, seq) if bias.dim() == 3 else bias[None, None]
    if sinks is not None:
        return sink_attention(q, k, v, sinks, mask=bias, scale=scale)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=scale)


def block_sparse_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, window: int | None = None,
                           chunk: int | None = None, slopes: torch.Tensor | None = None,
                           sinks: torch.Tensor | None = None, scale: float | None = None) -> torch.Tensor:
    """Causal attention that skips the blocks its mask hides.

    Args:
        q, k, v: ``[batch, heads, seq, head_dim]``, the same ``seq`` (a full pass).
        window, chunk: a sliding window or attention chunk (``posenc.masks``), or neither (causal).
        slopes: ALiBi slopes ``[heads]`` (score minus ``slope * (i - j)``), or None.
        sinks: learned sink logits ``[heads]`` (gpt-oss), or None.
        scale: the softmax scale, default ``head_dim ** -0.5``.

    Returns ``[batch, heads, seq, head_dim]``, equal to ``dense_attention`` with the same arguments
    (within float32 rounding). Raises ``ValueError`` when a gradient is needed (compiled FlexAttention has
    no backward pass on CPU here: train with the dense path).
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, t, min_dim=4)
    if not q.shape[2] == k.shape[2] == v.shape[2]:
        raise ValueError(f"q, k and v must have the same seq (a full pass), got {q.shape[2]}, {k.shape[2]}, "
                         f"{v.shape[2]}")
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)):
        raise ValueError("block_sparse_attention is for inference: call it under torch.no_grad() (compiled "
                         "FlexAttention has no backward pass on CPU in this PyTorch)")
    options = dict(window=window, chunk=chunk, slopes=slopes, sinks=sinks, scale=scale)
    if not kernel_available(q.device):
        if q.device.type not in _COMPILED["failed"]:
            _dense_from_now_on(q.device.type, "PyTorch has no FlexAttention kernel for this CPU")
        return dense_attention(q, k, v, **options)
    seq, sink = q.shape[2], sinks is not None
    mask = block_mask(seq, window=window, chunk=chunk, sink=sink, device=str(q.device))
    if sink:  # the sink: one zero key and value at index seq; its score comes from score_mod
        k, v = F.pad(k, (0, 0, 0, 1)), F.pad(v, (0, 0, 0, 1))
    try:
        with torch._dynamo.config.patch(recompile_limit=COMPILED_VERSIONS):
            return _flex()(q, k, v, score_mod=_score_mod(slopes, sinks, seq), block_mask=mask, scale=scale)
    except Exception as error:
        if not _no_compiler(error):
            raise
        _dense_from_now_on(q.device.type, f"{type(error).__name__}: {error}")
        return dense_attention(q[..., :seq, :], k[..., :seq, :], v[..., :seq, :], **options)


def use_block_sparse(model: torch.nn.Module, enabled: bool = True) -> torch.nn.Module:
    """Route every ``MultiHeadAttention`` of ``model`` (every module with a ``block_sparse`` switch) through
    ``block_sparse_attention`` for its full passes without a gradient (``enabled=False`` turns it off);
    returns ``model``. Found by the switch, not by class, so that this module does not import
    ``posenc.attention``, which imports it."""
    for module in model.modules():
        if hasattr(module, "block_sparse"):
            module.block_sparse = bool(enabled)
    return model
