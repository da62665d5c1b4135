"""Stick-breaking attention (Tan et al. 2025, arXiv 2410.17980): recency without a position encoding.

Softmax shares one unit of attention among all keys at once. Stick-breaking walks back from the query: each
earlier key j takes a fraction ``beta_ij = sigmoid(q_i . k_j / sqrt(d))`` of what the nearer keys left::

    A_ij = beta_ij * prod_{j<t<i} (1 - beta_it),        j < i.

A key closer to the query is served first, so order is built into the weights. The weights sum to at
most 1; what is left, ``1 - sum_j A_ij``, goes to the query's own value, as in the authors' reference
(``stickbreaking_attention/sb_ref.py`` and its test: ``o + rem * v``). The authors' code has two other
conventions: the remainder dropped (the released 3B model, ``"sb_remainder": false`` in its config, and
flash-linear-attention's layer), and a learned per-head bias times the remainder followed by a per-head
GroupNorm (dolomite's later ``SBAttention``); posenc implements the first two (``remainder="own"``, the
default, and ``remainder="drop"``). In log space, with
``log(1 - sigmoid(z)) = -softplus(z)``, the product is a sum, which keeps long products from underflowing:
``log A_ij = logsigmoid(z_ij) - sum_{j<t<i} softplus(z_it)`` (the paper's numerically stable form).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .._validate import check_tensor
from .base import HeadsMixer


def stick_breaking_weights(scores: torch.Tensor) -> torch.Tensor:
    """``scores[..., seq, seq]`` (query i, key j; already scaled) -> ``A[..., seq, seq]``, zero for
    ``j >= i``, computed in log space in float32 at least. Row i sums to at most 1."""
    check_tensor("scores", scores, min_dim=2)
    seq = scores.shape[-1]
    z = scores.to(torch.promote_types(scores.dtype, torch.float32))
    earlier = torch.ones(seq, seq, dtype=torch.bool, device=z.device).tril(-1)  # j < i
    log_beta = F.logsigmoid(z).masked_fill(~earlier, float("-inf"))
    log_rest = (-F.softplus(z)).masked_fill(~earlier, 0.0)  # log(1 - beta), 0 where no key
    # sum over t in (j, i): a reverse cumulative sum along the keys, excluding j itself
    after_j = log_rest.flip(-1).cumsum(-1).flip(-1) - log_rest
    return (log_beta + after_j).exp()


REMAINDERS = ("own", "drop")


def check_remainder(remainder: str) -> str:
    if remainder not in REMAINDERS:
        raise ValueError(f"remainder must be one of {REMAINDERS} (the query's own value, as the authors' "
                         f"reference; dropped, as their released 3B model), got {remainder!r}")
    return remainder


def stick_breaking_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *,
                             remainder: str = "own") -> torch.Tensor:
    """``q, k, v[batch, heads, seq, head_dim] -> [batch, heads, seq, head_dim]``: ``A @ v``, plus what A
    leaves, ``1 - sum_j A_ij``, times the query's own value (``remainder="own"``) or nothing
    (``remainder="drop"``: the first token's output is then zero)."""
    check_remainder(remainder)
    weights = stick_breaking_weights(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]))
    out = weights.to(v.dtype) @ v
    if remainder == "drop":
        return out
    return out + (1 - weights.sum(-1, keepdim=True)).to(v.dtype) * v


class StickBreakingAttention(HeadsMixer):
    """A stick-breaking layer: ``HeadsMixer``'s projections and ``stick_breaking_attention``, with its
    ``remainder`` convention (keyword, ``"own"`` or ``"drop"``). A ``LayerSpec`` builds the default;
    ``spec`` refuses a layer that drops the remainder, which no ``LayerSpec`` describes."""

    kind = "stick_breaking"

    def __init__(self, dim: int, n_heads: int, *, gate: bool = False, causal: bool = True,
                 remainder: str = "own"):
        super().__init__(dim, n_heads, gate=gate, causal=causal)
        self.remainder = check_remainder(remainder)

    @property
    def spec(self):
        if self.remainder != "own":
            raise ValueError(f"a LayerSpec describes stick-breaking with remainder='own' only; this layer has "
                             f"remainder={self.remainder!r}")
        return super().spec

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, remainder={self.remainder!r}"

    def weights(self, q, k, x):
        return stick_breaking_weights(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]))

    def mix(self, q, k, v, x):
        return stick_breaking_attention(q, k, v, remainder=self.remainder)
