"""Length-dependent query temperature: sharpen attention as the context grows.

Softmax over n keys flattens as n grows: with scores of a fixed spread, the largest weight falls like 1/n
and the entropy of the weights grows like log n. Scalable-Softmax (Nakanishi 2025) multiplies the logits by
a factor that grows with log n; Llama 4 applies a stepwise version of it to the queries of its NoPE layers:

    q  <-  q * (1 + scale * ln(1 + floor((p + 1) / floor_scale)))          (p: the query's position)

so the factor is exactly 1 for the first ``floor_scale - 1`` positions and rises by ``scale * ln 2``,
``scale * ln 3``, ... at each further multiple of ``floor_scale``. (Mistral's ``llama_4_scaling_beta``, in
Ministral 3 and Mistral 4, has the same form but steps one position later, ``floor(p / L0)`` with L0 the
``original_max_position_embeddings``, and scales the queries of every layer, after RoPE; transformers'
``ministral3.get_llama_4_attn_scale``.) Hugging Face's ``Llama4TextAttention`` (``attn_temperature_tuning``)
computes the same numbers as this function; the tests check.
"""

from __future__ import annotations

import torch

from ._validate import check_integer_positions, check_positive_float


def attention_temperature(positions: torch.Tensor, *, floor_scale: float = 8192, scale: float = 0.1) -> torch.Tensor:
    """Llama 4's query scale ``1 + scale * ln(1 + floor((p + 1) / floor_scale))``, float32 shaped like positions.

    Args:
        positions: whole-number positions >= 0, any shape (e.g. ``[seq]`` or ``[batch, seq]``).
        floor_scale: positions per step of the staircase (Llama 4: 8192), > 0.
        scale: the growth per step in log units (Llama 4: 0.1), > 0.
    """
    check_integer_positions("positions", positions)
    floor_scale = check_positive_float("floor_scale", floor_scale)
    scale = check_positive_float("scale", scale)
    steps = torch.floor((positions.to(torch.float32) + 1.0) / floor_scale)
    return torch.log1p(steps) * scale + 1.0


def softmax_entropy(scores: torch.Tensor) -> torch.Tensor:
    """Entropy (nats) of ``softmax(scores)`` over the last axis: ``[...]`` for scores ``[..., n]``."""
    p = torch.softmax(scores, dim=-1)
    return -(p * p.clamp_min(torch.finfo(p.dtype).tiny).log()).sum(-1)


def holding_factor(scores: torch.Tensor, entropy: float, *, low: float = 1e-3, high: float = 100.0,
                   steps: int = 60) -> float:
    """The factor ``tau`` on the logits at which the mean entropy of ``softmax(tau * scores)`` over the
    rows of ``scores`` ``[rows, n]`` equals ``entropy``, found by bisection (the entropy falls as ``tau``
    grows). No closed form is assumed: for large n the sum of ``exp(tau * z)`` is dominated by its largest
    terms, where the Gaussian estimate ``n * E[exp(tau * z)]`` no longer holds."""
    if not softmax_entropy(high * scores).mean() < entropy < softmax_entropy(low * scores).mean():
        raise ValueError(f"entropy={entropy} is not reached for tau in [{low}, {high}]")
    for _ in range(steps):
        middle = (low + high) / 2
        if softmax_entropy(middle * scores).mean() > entropy:
            low = middle
        else:
            high = middle
    return (low + high) / 2
