"""Grouped-query attention (Ainslie et al. 2023): several query heads share one key/value head.

Llama 2 70B, Llama 3, Mistral, Qwen and SmolLM2 project fewer key and value heads than query heads: with
``n_heads`` queries and ``n_kv_heads`` keys and values, query head h reads key/value head
``h // (n_heads // n_kv_heads)`` (SmolLM2-135M: 9 query heads in 3 groups of 3). The KV cache holds only the
``n_kv_heads`` heads, a factor ``n_heads / n_kv_heads`` smaller; ``n_kv_heads == 1`` is multi-query attention
(Shazeer 2019), ``n_kv_heads == n_heads`` ordinary multi-head attention.

Position is untouched by the grouping: RoPE rotates each key head once, and every query head of its group
meets the same rotated key, so a plan's ``LayerSpec`` (position method, window, sinks, ...) means what it
means for ``MultiHeadAttention``, which this layer subclasses.
"""

from __future__ import annotations

import torch
from torch import nn

from ._validate import check_int
from .attention import MultiHeadAttention


def repeat_kv_heads(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """``[batch, n_kv_heads, seq, head_dim]`` -> ``[batch, n_kv_heads * n_rep, seq, head_dim]``, each head
    repeated ``n_rep`` times in place (heads ``0, 0, 0, 1, 1, 1, ...``), so query head h meets head ``h // n_rep``."""
    return x if n_rep == 1 else x.repeat_interleave(n_rep, dim=1)


class GroupedQueryAttention(MultiHeadAttention):
    """``MultiHeadAttention`` with ``n_kv_heads`` key/value heads and optional biases.

    Args:
        dim, n_heads: as ``MultiHeadAttention`` (and every keyword it takes: position, window, sinks, ...).
        n_kv_heads: key/value heads, dividing ``n_heads``; None means ``n_heads``.
        bias: biases on the projections (``qkv``, ``out`` and ``gate``); Llama has none.

    ``qkv`` projects to ``[q | k | v]`` of widths ``n_heads * head_dim``, ``n_kv_heads * head_dim`` and
    ``n_kv_heads * head_dim`` (Hugging Face's ``q_proj``, ``k_proj``, ``v_proj`` stacked in that order).
    ``forward`` is ``MultiHeadAttention.forward``: the cache stores the ``n_kv_heads`` heads, which are
    repeated to ``n_heads`` (``repeat_kv_heads``) only to attend.
    """

    def __init__(self, dim: int, n_heads: int, *, n_kv_heads: int | None = None, bias: bool = True, **options):
        super().__init__(dim, n_heads, **options)
        self.n_kv_heads = n_heads if n_kv_heads is None else check_int("n_kv_heads", n_kv_heads)
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_kv_heads must divide n_heads={self.n_heads}, got n_kv_heads={self.n_kv_heads}")
        self.bias = bool(bias)
        kv_width = self.n_kv_heads * self.head_dim
        self.qkv = nn.Linear(dim, self.inner_dim + 2 * kv_width, bias=bias)  # replaces MultiHeadAttention's
        self.out = nn.Linear(self.inner_dim, dim, bias=bias)
        if self.gate is not None:
            self.gate = nn.Linear(dim, self.inner_dim, bias=bias)

    def _project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``x[batch, seq, dim]`` -> q ``[batch, n_heads, seq, head_dim]``, k and v ``[batch, n_kv_heads, seq,
        head_dim]``."""
        batch, seq, _ = x.shape
        kv_width = self.n_kv_heads * self.head_dim
        q, k, v = self.qkv(x).split([self.inner_dim, kv_width, kv_width], dim=-1)
        return (q.view(batch, seq, self.n_heads, self.head_dim).transpose(1, 2),
                k.view(batch, seq, self.n_kv_heads, self.head_dim).transpose(1, 2),
                v.view(batch, seq, self.n_kv_heads, self.head_dim).transpose(1, 2))

    def _attention(self, q, k, v, *args):
        n_rep = self.n_heads // self.n_kv_heads
        return super()._attention(q, repeat_kv_heads(k, n_rep), repeat_kv_heads(v, n_rep), *args)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, n_kv_heads={self.n_kv_heads}, bias={self.bias}"
