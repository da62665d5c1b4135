"""A short causal convolution: the cheapest source of order (Canon layers, Allen-Zhu 2025, arXiv 2512.17351).

Each channel of token t becomes a learned weighted sum of the same channel over the last ``width`` tokens::

    y_t[c] = sum_{s=0..width-1} w[c, s] x_{t - width + 1 + s}[c]        (x before the first token: 0)

It is depthwise (one filter per channel, no mixing across channels) and causal. A layer that sees its
neighbours' features at fixed offsets knows "one back", "two back": local order, with no encoding and no
attention. Qwen3-Next's, Qwen3.5's and Kimi Linear's linear-attention layers and every Mamba layer start
with one of width 4 (not every hybrid's: MiniMax-01's lightning-attention layers have none). A Canon layer adds it to the residual stream, ``h + conv(h)``, which is what
``ShortConv`` does; ``LayerSpec(conv=4)`` puts one before a layer's token mixer.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .._validate import check_int, check_tensor


def causal_conv(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``x[batch, seq, channels]``, ``weight[channels, width]`` -> ``[batch, seq, channels]``, the depthwise
    causal convolution above (``weight[:, -1]`` multiplies the current token)."""
    check_tensor("x", x, min_dim=3)
    check_tensor("weight", weight, min_dim=2)
    if weight.dim() != 2 or weight.shape[0] != x.shape[-1]:
        raise ValueError(f"weight must be [channels={x.shape[-1]}, width], got {tuple(weight.shape)}")
    width = weight.shape[1]
    padded = F.pad(x.transpose(1, 2), (width - 1, 0))  # [batch, channels, width - 1 + seq]
    return F.conv1d(padded, weight[:, None, :].to(x.dtype), groups=x.shape[-1]).transpose(1, 2)


class ShortConv(nn.Module):
    """``x + causal_conv(x, self.weight)`` with ``self.weight`` ``[dim, width]`` (initialised as PyTorch's
    ``nn.Conv1d``: uniform in +-1/sqrt(width))."""

    def __init__(self, dim: int, width: int = 4):
        super().__init__()
        self.dim, self.width = check_int("dim", dim), check_int("width", width)
        bound = 1 / width ** 0.5
        self.weight = nn.Parameter(torch.empty(dim, width).uniform_(-bound, bound))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + causal_conv(x, self.weight)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, width={self.width}"
