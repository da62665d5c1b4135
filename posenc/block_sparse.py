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
in this PyTorch), no explicit positions, no T5 bias. Where ``torch.compile`` is not available (no C
compiler) it falls back, once and with a warning, to the dense masked path: the same numbers, the dense
cost. Colab's CPU and GPU runtimes have a compiler.
"""

from __future__ import annotations

import warnings
from functools import lru_cache

import torch
import torch.nn.functional as F

from ._validate import check_int, check_tensor
from .masks import layer_mask
from .sinks import sink_attention

# FlexAttention's block: a block of 64 queries x 64 keys is computed whole or skipped. Measured on this book's
# 2-core CPU (8 heads of 64, window or chunks of 128): blocks of 64 instead of PyTorch's default 128 take the
# window from 0.62x to 0.47x full causal SDPA at T = 2,048 (chunks 0.47x -> 0.34x) and from 0.19x to 0.15x at
# 8,192, since fewer of the blocks a short window keeps straddle its edges; causal alone is the same.
BLOCK_SIZE = 64


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


@lru_cache(maxsize=64)
def block_mask(seq: int, *, window: int | None = None, chunk: int | None = None, sink: bool = False,
               device: str = "cpu"):
    """The ``BlockMask`` of a causal layer over ``seq`` tokens (``seq + 1`` keys with ``sink``), cached:
    building it costs about as much as one attention pass."""
    from torch.nn.attention.flex_attention import create_block_mask
    seq = check_int("seq", seq)
    return create_block_mask(_visible(window, chunk, seq, sink), None, None, seq, seq + sink, device=device,
                             BLOCK_SIZE=BLOCK_SIZE)


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
    """``torch.compile(flex_attention)``, built once; None where compiling failed before."""
    if "flex" not in _COMPILED:
        from torch.nn.attention.flex_attention import flex_attention
        _COMPILED["flex"] = torch.compile(flex_attention, dynamic=False)
    return _COMPILED["flex"]


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
    flex = None if _COMPILED.get("failed") else _flex()
    if flex is None:
        return dense_attention(q, k, v, **options)
    seq, sink = q.shape[2], sinks is not None
    if sink:  # the sink: one zero key and value at index seq; its score comes from score_mod
        k, v = F.pad(k, (0, 0, 0, 1)), F.pad(v, (0, 0, 0, 1))
    mask = block_mask(seq, window=window, chunk=chunk, sink=sink, device=str(q.device))
    try:
        with torch._dynamo.config.patch(recompile_limit=COMPILED_VERSIONS):
            return flex(q, k, v, score_mod=_score_mod(slopes, sinks, seq), block_mask=mask, scale=scale)
    except Exception as error:  # no C compiler, or an unsupported platform: the dense path from now on
        _COMPILED["failed"] = True
        warnings.warn(f"compiling FlexAttention failed ({type(error).__name__}); block_sparse_attention uses "
                      f"the dense masked path from now on", RuntimeWarning)
        return dense_attention(q[..., :seq, :], k[..., :seq, :], v[..., :seq, :], **options)


def use_block_sparse(model: torch.nn.Module, enabled: bool = True) -> torch.nn.Module:
    """Route every ``MultiHeadAttention`` of ``model`` through ``block_sparse_attention`` for its full
    passes without a gradient (``enabled=False`` turns it off); returns ``model``."""
    from .attention import MultiHeadAttention
    for module in model.modules():
        if isinstance(module, MultiHeadAttention):
            module.block_sparse = bool(enabled)
    return model
