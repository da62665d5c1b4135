"""ALiBi: attention with linear biases (Press, Smith and Lewis, 2022).

No position vectors at all: each head h adds ``-slope[h] * distance`` to its attention scores, so far-away
keys are penalised linearly, with a different steepness per head.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .masks import causal_mask  # noqa: F401 (re-exported: posenc.alibi.causal_mask)
from ._validate import check_int, check_tensor


def _geometric_slopes(n_heads: int) -> list[float]:
    # For a power of two n: start = ratio = 2**(-8/n), so the slopes run 2**(-8/n) .. 2**-8.
    start = 2.0 ** (-8.0 / n_heads)
    return [start ** (i + 1) for i in range(n_heads)]


def alibi_slopes(n_heads: int) -> torch.Tensor:
    """Per-head ALiBi slopes, shape ``[n_heads]`` float32.

    For a power of two n the slopes are the geometric sequence ``2**(-8/n), 2**(-16/n), ..., 2**-8``.
    Otherwise, as in the paper's code: the slopes of the closest lower power of two, followed by every
    other slope of the next power of two, until there are n.
    """
    n_heads = check_int("n_heads", n_heads)
    if n_heads & (n_heads - 1) == 0:
        slopes = _geometric_slopes(n_heads)
    else:
        lower = 2 ** math.floor(math.log2(n_heads))
        slopes = _geometric_slopes(lower) + _geometric_slopes(2 * lower)[0::2][: n_heads - lower]
    return torch.tensor(slopes, dtype=torch.float32)


def _checked_slopes(slopes, n_heads: int) -> torch.Tensor:
    if slopes is None:
        return alibi_slopes(n_heads)
    check_tensor("slopes", slopes, min_dim=1)
    if slopes.shape != (n_heads,):
        raise ValueError(f"slopes must have shape [n_heads]=[{n_heads}], got {tuple(slopes.shape)}")
    return slopes


def alibi_bias(n_heads: int, q_len: int, k_len: int | None = None, *,
               slopes: torch.Tensor | None = None) -> torch.Tensor:
    """The ALiBi bias added to attention scores, shape ``[n_heads, q_len, k_len]`` float32.

    ``bias[h, i, j] = -slopes[h] * |(i + k_len - q_len) - j|``: the queries are the *last* q_len of the
    k_len positions, as when decoding with a KV cache. No causal mask is applied here.

    Args:
        n_heads: number of heads, >= 1.
        q_len: number of query positions, >= 1.
        k_len: number of key positions, >= q_len (default q_len).
        slopes: optional ``[n_heads]`` slopes (default ``alibi_slopes(n_heads)``).
    """
    n_heads = check_int("n_heads", n_heads)
    q_len = check_int("q_len", q_len)
    k_len = q_len if k_len is None else check_int("k_len", k_len)
    if k_len < q_len:
        raise ValueError(f"k_len must be >= q_len (queries are the last q_len keys), got k_len={k_len} < q_len={q_len}")
    slopes = _checked_slopes(slopes, n_heads)
    query_pos = torch.arange(k_len - q_len, k_len, device=slopes.device)
    key_pos = torch.arange(k_len, device=slopes.device)
    distance = (query_pos[:, None] - key_pos[None, :]).abs().to(torch.float32)  # [q_len, k_len]
    return -slopes.to(torch.float32)[:, None, None] * distance


def alibi_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, slopes: torch.Tensor | None = None,
                    causal: bool = True) -> torch.Tensor:
    """Scaled dot-product attention with ALiBi biases.

    Args:
        q: ``[batch, heads, q_len, head_dim]``; the queries are the last q_len of the k_len positions.
        k, v: ``[batch, heads, k_len, head_dim]`` with ``k_len >= q_len``.
        slopes: optional ``[heads]`` (default ``alibi_slopes(heads)``).
        causal: mask keys after each query.

    Returns:
        ``[batch, heads, q_len, head_dim]``, dtype of q.

    In the causal case the bias ``-slope * (i - j)`` differs from ``slope * j`` only by a per-row constant,
    which softmax ignores; ``slope * j`` is rank one, so it is folded into one extra feature of q and k and
    PyTorch's fused causal kernel runs without any ``[heads, q_len, k_len]`` bias tensor: memory O(T)
    instead of O(heads * T^2); time stays O(T^2), as for any exact attention.

    Limits of that path: causal, ``q_len == k_len`` (no KV cache, no chunked prefill) and float32 or
    float64 (half precision cannot hold ``slope * j``). Everything else builds the ``[heads, q, k]`` bias
    (passed as a 4-D mask). Precision: the extra feature adds ``slope * j`` (up to ``slope * (T-1)``) to
    float32 scores before the row constant cancels, so the logit error grows like
    ``eps_float32 * slope * T``: about 1e-4 to 1e-3 for T in the thousands (tests and chapter 8 use a
    tolerance that grows with T). In production the bias is computed inside the kernel:
    FlashAttention-2's ``alibi_slopes`` (fp16 and bf16 on GPUs) or a FlexAttention ``score_mod``.
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, t, min_dim=4)
        if t.dim() != 4:
            raise ValueError(f"{name} must be [batch, heads, seq, head_dim], got {tuple(t.shape)}")
    batch, heads, q_len, head_dim = q.shape
    k_len = k.shape[2]
    if k.shape[:2] != (batch, heads) or k.shape[-1] != head_dim or v.shape[:3] != k.shape[:3]:
        raise ValueError(f"q, k, v shapes do not match: {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if k_len < q_len:
        raise ValueError(f"k_len must be >= q_len, got k_len={k_len} < q_len={q_len}")
    slopes = _checked_slopes(slopes, heads).to(q.device)
    scale = 1.0 / math.sqrt(head_dim)
    if causal and q_len == k_len and q.dtype in (torch.float32, torch.float64):
        # scores = q.k * scale + slope_h * j, with j = 0..k_len-1, written as one more feature pair.
        key_pos = torch.arange(k_len, device=q.device, dtype=q.dtype)
        q_extra = (slopes.to(q.dtype) / scale)[None, :, None, None].expand(batch, heads, q_len, 1)
        k_extra = key_pos[None, None, :, None].expand(batch, heads, k_len, 1)
        q_aug = torch.cat((q, q_extra), dim=-1)
        k_aug = torch.cat((k, k_extra), dim=-1)
        # Fused kernels need one head size for q, k and v: pad with zeros, which change nothing.
        width = max(q_aug.shape[-1], v.shape[-1])
        q_aug, k_aug, v_pad = (F.pad(t, (0, width - t.shape[-1])) for t in (q_aug, k_aug, v))
        out = F.scaled_dot_product_attention(q_aug, k_aug, v_pad, is_causal=True, scale=scale)
        return out[..., : v.shape[-1]]
    bias = alibi_bias(heads, q_len, k_len, slopes=slopes).to(q.dtype)
    if causal:
        bias = bias.masked_fill(~causal_mask(q_len, k_len, device=q.device), float("-inf"))
    # [1, heads, q, k]: with a 3-D mask PyTorch's CPU dispatch would take the unfused math kernel.
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias[None], scale=scale)
