"""The feed-forward layer of a block (the "MLP"), applied to each token on its own.

``TransformerLM(mlp=...)`` picks one for every block:

- ``"gelu"``: ``Linear(dim, hidden) -> GELU -> Linear(hidden, dim)`` (GPT-2, the book's small models), an
  ``nn.Sequential`` whose parameters are ``0.weight``, ``0.bias``, ``2.weight``, ``2.bias``.
- ``"swiglu"``: ``SwiGLU`` (Shazeer 2020; Llama, Qwen, Mistral, SmolLM): a SiLU-gated linear unit.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ._validate import check_choice, check_int

FEED_FORWARDS = ("gelu", "swiglu")


class SwiGLU(nn.Module):
    """``down_proj(silu(gate_proj(x)) * up_proj(x))``: the feed-forward layer of Llama (``LlamaMLP``).

    Args:
        dim: model width. hidden: width of the gated layer (SmolLM2-135M: 1,536 for dim 576).
        bias: biases on the three projections (Llama has none).

    ``forward(x[..., dim]) -> [..., dim]``. The submodules carry Hugging Face's names.
    """

    def __init__(self, dim: int, hidden: int, *, bias: bool = False):
        super().__init__()
        dim, hidden = check_int("dim", dim), check_int("hidden", hidden)
        self.gate_proj = nn.Linear(dim, hidden, bias=bias)
        self.up_proj = nn.Linear(dim, hidden, bias=bias)
        self.down_proj = nn.Linear(hidden, dim, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


def make_feed_forward(kind: str, dim: int, hidden: int, *, bias: bool = True) -> nn.Module:
    """The feed-forward layer ``kind`` (one of ``FEED_FORWARDS``) of width ``hidden``."""
    check_choice("mlp", kind, FEED_FORWARDS)
    if kind == "gelu":
        return nn.Sequential(nn.Linear(dim, hidden, bias=bias), nn.GELU(), nn.Linear(hidden, dim, bias=bias))
    return SwiGLU(dim, hidden, bias=bias)
