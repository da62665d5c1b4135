"""Forgetting attention (the Forgetting Transformer, FoX; Lin et al. 2025, arXiv 2503.02130).

Every head has a forget gate per token, ``f_t = sigmoid(w . x_t + b)`` in (0, 1). Key j's score at query i
gets the log of every gate between them::

    score(i, j) = q_i . k_j / sqrt(d) + sum_{t=j+1..i} log f_t = q_i . k_j / sqrt(d) + c_i - c_j,

with ``c = cumsum(log f)``. A constant gate ``f`` gives ``(i - j) log f``: ALiBi with slope ``-log f``. So FoX
is ALiBi in which every token sets its own slope: a token with ``f_t`` near 1 lets attention pass over it,
one near 0 cuts off everything before it. No other position signal is needed (the paper uses none).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .._validate import check_tensor
from .base import HeadsMixer


def forget_bias(log_f: torch.Tensor) -> torch.Tensor:
    """The additive score bias of forgetting attention, causal mask included.

    ``log_f[batch, heads, seq]`` (the log of each token's forget gate, <= 0) ->
    ``[batch, heads, seq, seq]`` with ``c_i - c_j`` (``c = cumsum(log_f)``) where ``j <= i`` and ``-inf``
    above the diagonal. The cumulative sum runs in float32 at least (a half-precision running sum loses
    the small differences between nearby tokens).
    """
    check_tensor("log_f", log_f, min_dim=3)
    c = log_f.to(torch.promote_types(log_f.dtype, torch.float32)).cumsum(-1)
    bias = c[..., :, None] - c[..., None, :]
    seq = log_f.shape[-1]
    future = torch.ones(seq, seq, dtype=torch.bool, device=log_f.device).triu(1)
    return bias.masked_fill(future, float("-inf"))


def forgetting_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, log_f: torch.Tensor) -> torch.Tensor:
    """Causal softmax attention with FoX's forget-gate bias.

    ``q, k, v``: ``[batch, heads, seq, head_dim]``; ``log_f``: ``[batch, heads, seq]``. Returns
    ``[batch, heads, seq, head_dim]``. With ``log_f`` all zeros it is plain causal attention; with
    ``log_f[..., t] = -m`` for every t, ALiBi with slope m.
    """
    bias = forget_bias(log_f).to(q.dtype)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)


class ForgettingAttention(HeadsMixer):
    """A FoX layer: ``HeadsMixer``'s projections, a forget gate per head (``self.forget``,
    ``nn.Linear(dim, n_heads)``, zero bias at init as in the paper's code, so f starts near 1/2) and
    ``forgetting_attention``. ``forget_gates(x) -> [batch, heads, seq]`` gives the gates, to read what
    each head keeps."""

    kind = "forgetting"

    def __init__(self, dim: int, n_heads: int, **options):
        super().__init__(dim, n_heads, **options)
        self.forget = nn.Linear(dim, n_heads)
        nn.init.zeros_(self.forget.bias)  # the paper's code: a zero bias, so f starts near 1/2

    def log_forget(self, x: torch.Tensor) -> torch.Tensor:
        """``x[batch, seq, dim] -> log f [batch, heads, seq]`` (float32)."""
        return F.logsigmoid(self.forget(x).float()).transpose(1, 2)

    def forget_gates(self, x: torch.Tensor) -> torch.Tensor:
        return self.log_forget(x).exp()

    def weights(self, q, k, x):
        scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
        return torch.softmax(scores.float() + forget_bias(self.log_forget(x)), dim=-1)

    def mix(self, q, k, v, x):
        return forgetting_attention(q, k, v, self.log_forget(x))
