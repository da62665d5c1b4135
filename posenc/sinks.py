"""Learned attention sinks (gpt-oss): a place for attention to go when no key deserves it.

A trained transformer often parks attention on the first token, an "attention sink" (Xiao et al. 2024),
because softmax must give its weights to *some* key. gpt-oss learns the sink instead: one logit per head,
concatenated to each row of scores before the softmax and dropped after, so a head can put weight
``exp(sink) / (exp(sink) + sum_j exp(score_j))`` on nothing at all and its output shrinks toward zero.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ._validate import check_tensor


def sink_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, sinks: torch.Tensor, *,
                   mask: torch.Tensor | None = None, scale: float | None = None,
                   need_weights: bool = False):
    """``softmax([q k^T * scale + mask, sink])`` with the sink column dropped, times v.

    Args:
        q: ``[batch, heads, q_len, head_dim]``; k, v: ``[batch, heads, k_len, head_dim]``.
        sinks: one logit per head, ``[heads]``.
        mask: additive float ``[..., q_len, k_len]`` (``-inf`` where hidden) or boolean (True where
            visible), broadcastable to ``[batch, heads, q_len, k_len]``; None for no mask.
        scale: softmax scale, default ``head_dim ** -0.5``.
        need_weights: also return the weights ``[batch, heads, q_len, k_len]`` (the sink's share dropped,
            so rows sum to less than 1).

    Returns:
        ``[batch, heads, q_len, head_dim]`` (and the weights when ``need_weights``).

    The sink is a key whose score is ``sink[h]`` for every query and whose value is zero: one zero key and
    value are appended and the sink logits become that key's column of the additive mask, so PyTorch's
    fused kernel does the rest. The formula written out (scores, concatenation, softmax, drop) is what
    ``posenc.bench`` times against.
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, t, min_dim=4)
    heads, q_len, k_len = q.shape[1], q.shape[2], k.shape[2]
    check_tensor("sinks", sinks, min_dim=1)
    if tuple(sinks.shape) != (heads,):
        raise ValueError(f"sinks must have shape [heads] = [{heads}], got {tuple(sinks.shape)}")
    compute = q.dtype
    leading = (1, heads) if mask is None or mask.dim() < 4 else (mask.shape[0], heads)
    bias = torch.zeros(*leading, q_len, k_len + 1, dtype=compute, device=q.device)
    if mask is not None:
        if not mask.is_floating_point():
            mask = torch.zeros(mask.shape, dtype=compute, device=mask.device).masked_fill(~mask, float("-inf"))
        bias[..., :k_len] = mask.to(compute)
    bias[..., k_len] = sinks.to(compute)[:, None]  # the sink logits: one extra column per head
    if need_weights:
        scale = q.shape[-1] ** -0.5 if scale is None else scale
        scores = torch.cat((q @ k.transpose(-2, -1) * scale, torch.zeros_like(q[..., :1])), dim=-1) + bias
        weights = scores.softmax(dim=-1)[..., :k_len]
        return weights @ v, weights
    k = F.pad(k, (0, 0, 0, 1))  # the sink: a zero key (its score is its mask entry, the sink logit) ...
    v = F.pad(v, (0, 0, 0, 1))  # ... and a zero value (it adds nothing to the output)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=scale)
