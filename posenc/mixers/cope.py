"""Contextual position encoding, CoPE (Golovneva et al. 2024, arXiv 2405.18719): positions that count
what the query cares about.

A gate per query and key, ``g_ij = sigmoid(s_ij)`` with ``s_ij = q_i . k_j / sqrt(d)`` the causal scores,
decides whether token j counts; key j's position, seen from query i, is how many counted tokens lie
between them, itself included::

    p_ij = sum_{t=j..i} g_it         (fractional; at most i - j + 1; clipped at max_positions - 1)

With every gate 1 it is the ordinary relative distance plus one; with gates that fire on, say, full
stops it counts sentences. A learned vector ``e[p]`` per integer position (shared by the heads of a layer,
zero at initialisation, as in the paper's code, so CoPE starts as NoPE) gives the score ``q_i . e[p]``,
interpolated between the two integers around ``p_ij``; it is added to ``s_ij`` before the softmax.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .._validate import check_int, check_tensor
from ..plan import LayerSpec
from .base import HeadsMixer


def cope_positions(scores: torch.Tensor, max_positions: int) -> torch.Tensor:
    """``scores[..., seq, seq]`` (scaled, causal: ``-inf`` above the diagonal) -> ``p[..., seq, seq]``:
    the reverse cumulative sum of ``sigmoid(scores)`` along the keys, clipped at ``max_positions - 1``
    (0 above the diagonal)."""
    check_tensor("scores", scores, min_dim=2)
    max_positions = check_int("max_positions", max_positions, minimum=2)
    gates = torch.sigmoid(scores.to(torch.promote_types(scores.dtype, torch.float32)))
    return gates.flip(-1).cumsum(-1).flip(-1).clamp(max=max_positions - 1)


def cope_scores(q: torch.Tensor, positions: torch.Tensor, embeddings: torch.Tensor) -> torch.Tensor:
    """The position term of CoPE's scores.

    ``q[batch, heads, seq, head_dim]``, ``positions[batch, heads, seq, seq]`` (from ``cope_positions``),
    ``embeddings[max_positions, head_dim]`` -> ``[batch, heads, seq, seq]``: ``q_i . e[p_ij]`` with ``e``
    interpolated linearly between ``floor(p)`` and ``ceil(p)`` (the paper computes ``q_i . e[p]`` for the
    integers once and interpolates the scores, which is the same number and cheaper).
    """
    dtype = torch.promote_types(q.dtype, torch.float32)
    at_integers = q.to(dtype) @ embeddings.to(dtype).T  # [batch, heads, seq, max_positions]
    low, high = positions.floor().long(), positions.ceil().long()
    w = positions - low
    return at_integers.gather(-1, high) * w + at_integers.gather(-1, low) * (1 - w)


class CoPEAttention(HeadsMixer):
    """A CoPE layer: ``HeadsMixer``'s projections, ``self.embeddings`` ``[max_positions, head_dim]`` (zeros at
    init) and softmax over ``s_ij + cope_scores``. ``max_positions`` (``LayerSpec.cope_positions``) bounds
    the counted positions; the paper uses up to the context length."""

    kind = "cope"

    def __init__(self, dim: int, n_heads: int, *, max_positions: int = 64, **options):
        super().__init__(dim, n_heads, **options)
        self.max_positions = check_int("max_positions", max_positions, minimum=2)
        self.embeddings = nn.Parameter(torch.zeros(self.max_positions, self.head_dim))

    @staticmethod
    def _options(spec):
        return {"max_positions": spec.cope_positions}

    @property
    def spec(self):
        return LayerSpec("none", mixer=self.kind, gate=self.gate is not None, cope_positions=self.max_positions)

    def weights(self, q, k, x):
        seq = q.shape[-2]
        future = torch.ones(seq, seq, dtype=torch.bool, device=q.device).triu(1)
        scores = (q.float() @ k.float().transpose(-1, -2) / math.sqrt(q.shape[-1])).masked_fill(future, float("-inf"))
        positions = cope_positions(scores, self.max_positions)
        return torch.softmax(scores + cope_scores(q, positions, self.embeddings), dim=-1)
