"""What the layers that carry position without a position encoding share: ``HeadsMixer``.

Each of ``forgetting``, ``stick_breaking``, ``cope`` and ``decay`` defines one subclass that says how a query
combines the earlier tokens (``weights``, and ``mix`` where the output is not simply ``weights @ v``); the
projections, heads, optional output gate and the checks live here once.
"""

from __future__ import annotations

import torch
from torch import nn

from .._validate import check_int, check_tensor
from ..plan import LayerSpec


class HeadsMixer(nn.Module):
    """Multi-head token mixing with its own notion of order. Subclasses set ``kind`` and define
    ``weights(q, k, x) -> [batch, heads, seq, seq]`` (how much query i takes from token j), or ``mix``.

    Args:
        dim: model width, divisible by ``n_heads``.
        n_heads: number of heads.
        gate: multiply the concatenated heads by ``sigmoid(self.gate(x))`` before ``self.out`` (as
            ``MultiHeadAttention``'s ``gate``).
        causal: must be True: these layers are defined for decoders.

    ``forward(x[batch, seq, dim], *, need_weights=False, cache=None, ...) -> [batch, seq, dim]`` (and the
    weights ``[batch, heads, seq, seq]`` with ``need_weights``). There is no incremental decoding: a
    ``cache`` raises ``ValueError``; explicit ``positions`` are ignored, as a NoPE layer ignores them
    (order comes from the order of the tokens).
    """

    kind = ""
    position = "none"  # nothing is added to or rotated in the queries and keys

    def __init__(self, dim: int, n_heads: int, *, gate: bool = False, causal: bool = True):
        super().__init__()
        dim, n_heads = check_int("dim", dim), check_int("n_heads", n_heads)
        if dim % n_heads:
            raise ValueError(f"dim must be divisible by n_heads, got dim={dim}, n_heads={n_heads}")
        if not causal:
            raise ValueError(f"mixer={self.kind!r} is defined for causal decoders only: causal must be True")
        self.dim, self.n_heads, self.head_dim, self.causal = dim, n_heads, dim // n_heads, True
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.gate = nn.Linear(dim, dim) if gate else None

    @classmethod
    def from_spec(cls, dim: int, n_heads: int, spec: LayerSpec, *, causal: bool = True) -> "HeadsMixer":
        """The layer a ``LayerSpec`` with ``mixer == cls.kind`` describes."""
        if spec.mixer != cls.kind:
            raise ValueError(f"{cls.__name__} builds mixer={cls.kind!r}, got a LayerSpec with mixer={spec.mixer!r}")
        if spec.conv is not None:
            raise ValueError("LayerSpec.conv is a posenc.mixers.conv.ShortConv before the layer, built by TransformerLM's "
                             "Block: build it yourself or drop conv from the spec")
        return cls(dim, n_heads, gate=spec.gate, causal=causal, **cls._options(spec))

    @staticmethod
    def _options(spec: LayerSpec) -> dict:
        return {}

    @property
    def spec(self) -> LayerSpec:
        """This layer as a ``LayerSpec``."""
        return LayerSpec("none", mixer=self.kind, gate=self.gate is not None)

    def weights(self, q: torch.Tensor, k: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def mix(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """``[batch, heads, seq, head_dim]`` per head; by default ``weights @ v``."""
        return self.weights(q, k, x).to(v.dtype) @ v

    def forward(self, x: torch.Tensor, *, need_weights: bool = False, cache=None, position_bias=None,
                positions=None, rope_cos_sin=None):
        check_tensor("x", x, min_dim=3)
        if cache is not None:
            raise ValueError(f"mixer={self.kind!r} has no incremental decoding in posenc: call the model on whole "
                             f"sequences (cache=None)")
        if x.dim() != 3 or x.shape[-1] != self.dim:
            raise ValueError(f"x must be [batch, seq, {self.dim}], got {tuple(x.shape)}")
        batch, seq, _ = x.shape
        q, k, v = self.qkv(x).view(batch, seq, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        heads = self.mix(q, k, v, x).transpose(1, 2).reshape(batch, seq, self.dim)
        if self.gate is not None:
            heads = heads * torch.sigmoid(self.gate(x))
        out = self.out(heads)
        return (out, self.weights(q, k, x)) if need_weights else out

    def extra_repr(self) -> str:
        return f"kind={self.kind!r}, dim={self.dim}, n_heads={self.n_heads}"
