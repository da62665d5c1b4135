"""A decay layer: gated linear attention with one data-dependent decay per head and token, in its
parallel form (the scalar-gate case of GLA, Yang et al. 2024, and of Mamba-2's state-space duality, Dao
and Gu 2024; the layer family of Qwen3-Next's Gated DeltaNet, Kimi's KDA and Granite 4.0-H's Mamba-2, without
their delta rule or channel-wise gates).

As a recurrence, each head keeps a ``head_dim x head_dim`` state that decays by ``a_t`` in (0, 1) and
takes in each new key and value::

    S_t = a_t S_{t-1} + k_t v_t^T,        o_t = S_t^T q_t.

Unrolled, ``o_i = sum_{j<=i} exp(c_i - c_j) (q_i . k_j) v_j`` with ``c = cumsum(log a)``: forgetting
attention (``posenc.mixers.forgetting``) without the softmax. The decay is the only source of order. The
parallel form below computes that sum for all queries at once (the recurrence costs O(seq) state updates;
both give the same numbers, which the tests check in float64).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .base import HeadsMixer
from .forgetting import forget_bias

GATE_NORMALISER = 16  # GLA's gate_logit_normalizer: log a = logsigmoid(z) / 16, so a starts near 0.96


def decay_weights(scores: torch.Tensor, log_a: torch.Tensor) -> torch.Tensor:
    """``scores[batch, heads, seq, seq]`` (``q_i . k_j``) and ``log_a[batch, heads, seq]`` ->
    ``scores * exp(c_i - c_j)`` for ``j <= i``, 0 above the diagonal (``c = cumsum(log_a)`` in float32
    at least; the exponent is masked before ``exp``, so no overflow from the future)."""
    return scores * forget_bias(log_a).exp()  # FoX's bias, exponentiated: exp(-inf) = 0 above the diagonal


def decay_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, log_a: torch.Tensor) -> torch.Tensor:
    """``q, k, v[batch, heads, seq, head_dim]``, ``log_a[batch, heads, seq]`` ->
    ``o[batch, heads, seq, head_dim]``, ``o_i = sum_{j<=i} exp(c_i - c_j) (q_i . k_j) v_j``."""
    dtype = torch.promote_types(q.dtype, torch.float32)
    weights = decay_weights(q.to(dtype) @ k.to(dtype).transpose(-1, -2), log_a)
    return (weights @ v.to(dtype)).to(v.dtype)


class DecayLayer(HeadsMixer):
    """A decay layer: ``HeadsMixer``'s projections, a decay per head (``self.decay``, ``nn.Linear(dim, n_heads)``,
    ``log a = logsigmoid(.) / GATE_NORMALISER``), queries scaled by ``head_dim ** -0.5``, and each head's
    output normalised to unit root-mean-square (GLA and Mamba-2 normalise it too: without a softmax
    nothing bounds the sum). ``decays(x) -> a [batch, heads, seq]``."""

    kind = "decay"

    def __init__(self, dim: int, n_heads: int, **options):
        super().__init__(dim, n_heads, **options)
        self.decay = nn.Linear(dim, n_heads)

    def log_decay(self, x: torch.Tensor) -> torch.Tensor:
        """``x[batch, seq, dim] -> log a [batch, heads, seq]`` (float32)."""
        return (F.logsigmoid(self.decay(x).float()) / GATE_NORMALISER).transpose(1, 2)

    def decays(self, x: torch.Tensor) -> torch.Tensor:
        return self.log_decay(x).exp()

    def weights(self, q, k, x):
        return decay_weights(q.float() @ k.float().transpose(-1, -2) / q.shape[-1] ** 0.5, self.log_decay(x))

    def mix(self, q, k, v, x):
        heads = decay_attention(q / self.head_dim ** 0.5, k, v, self.log_decay(x))
        return F.rms_norm(heads, (self.head_dim,), eps=1e-6)
