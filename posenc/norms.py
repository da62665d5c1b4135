"""The normalisation a block applies before attention and before its feed-forward layer.

``TransformerLM(norm=...)`` picks one for every block and the final norm:

- ``"layer"``: ``nn.LayerNorm`` (GPT-2, the book's small models): subtract the mean, divide by the standard
  deviation, then a learned scale and shift.
- ``"rms"``: ``RMSNorm`` (Llama, Qwen, Gemma, DeepSeek; Zhang and Sennrich 2019): divide by the root mean
  square, then a learned scale; no mean, no shift.
"""

from __future__ import annotations

import torch
from torch import nn

from ._validate import check_choice, check_int, check_positive_float

NORMS = ("layer", "rms")


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``weight * x / sqrt(mean(x**2) + eps)`` over the last dim: ``x[..., dim]``, ``weight[dim]`` -> ``[..., dim]``.

    The mean square and the division are computed in at least float32 (half-precision squares overflow), the
    result cast back to x's dtype before the scale, in Hugging Face's order (``LlamaRMSNorm``), so float32
    outputs are the same bits as Hugging Face's.
    """
    wide = x.to(torch.promote_types(x.dtype, torch.float32))
    normed = wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + eps)
    return weight * normed.to(x.dtype)


class RMSNorm(nn.Module):
    """Root-mean-square normalisation with a learned scale (``weight``, ones at init): ``rms_norm``.

    ``forward(x[..., dim]) -> [..., dim]``. ``eps`` defaults to 1e-6, Hugging Face's default; Llama files
    carry their own (SmolLM2: 1e-5).
    """

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(check_int("dim", dim)))
        self.eps = check_positive_float("eps", eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps:g}"


def make_norm(kind: str, dim: int, eps: float = 1e-5) -> nn.Module:
    """The norm ``kind`` (one of ``NORMS``) over ``dim`` features: ``nn.LayerNorm(dim, eps=eps)`` or ``RMSNorm``."""
    check_choice("norm", kind, NORMS)
    if kind == "layer":
        return nn.LayerNorm(dim, eps=eps)
    return RMSNorm(dim, eps)
