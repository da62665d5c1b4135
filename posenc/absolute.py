"""Absolute position encodings: the sinusoidal table of Vaswani et al. (2017) and a learned table.

Both are *added* to the token embeddings before the first layer: ``x + PE[offset : offset + seq]``.
"""

from __future__ import annotations

import torch
from torch import nn

from ._validate import check_even, check_int, check_positive_float, check_tensor


def sinusoidal_encoding(n_positions: int, dim: int, *, base: float = 10000.0, offset: int = 0,
                        dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The sinusoidal position table.

    ``PE[row, 2i] = sin(p / base**(2i/dim))`` and ``PE[row, 2i+1] = cos(p / base**(2i/dim))``
    with ``p = offset + row``.

    Args:
        n_positions: number of rows (positions), >= 1.
        dim: model width, a positive even integer.
        base: wavelength base (10000 in the original Transformer), > 0.
        offset: position of the first row, >= 0 (used when decoding with a cache).
        dtype: dtype of the result; the trigonometry is always done in float64 and then cast.

    Returns:
        Tensor of shape ``[n_positions, dim]``.
    """
    n_positions = check_int("n_positions", n_positions)
    dim = check_even("dim", dim)
    base = check_positive_float("base", base)
    offset = check_int("offset", offset, minimum=0)
    positions = torch.arange(offset, offset + n_positions, dtype=torch.float64)
    inv_freq = base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)  # [dim/2]
    angles = positions[:, None] * inv_freq[None, :]  # [n_positions, dim/2]
    table = torch.stack((angles.sin(), angles.cos()), dim=-1)  # [n_positions, dim/2, 2]
    return table.reshape(n_positions, dim).to(dtype)


def _check_input(x, dim: int) -> torch.Tensor:
    check_tensor("x", x, min_dim=3)
    if x.dim() != 3 or x.shape[-1] != dim:
        raise ValueError(f"x must have shape [batch, seq, {dim}], got {tuple(x.shape)}")
    return x


class SinusoidalEncoding(nn.Module):
    """Adds the sinusoidal table to its input: ``forward(x[batch, seq, dim], offset=0) -> x + PE``.

    The table is computed on demand (cached for the longest length seen), so any length works.
    """

    def __init__(self, dim: int, *, base: float = 10000.0):
        super().__init__()
        self.dim = check_even("dim", dim)
        self.base = check_positive_float("base", base)
        self.register_buffer("_table", torch.empty(0, dim), persistent=False)

    def table(self, n_positions: int) -> torch.Tensor:
        """Rows ``0 .. n_positions-1`` of the table, shape ``[n_positions, dim]`` (float32)."""
        if self._table.shape[0] < n_positions:
            self._table = sinusoidal_encoding(max(n_positions, 2 * self._table.shape[0]), self.dim,
                                              base=self.base).to(self._table.device)
        return self._table[:n_positions]

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        _check_input(x, self.dim)
        offset = check_int("offset", offset, minimum=0)
        pe = self.table(offset + x.shape[1])[offset:]
        return x + pe.to(x.dtype)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, base={self.base}"


class LearnedEncoding(nn.Module):
    """A trainable table of ``max_len`` position vectors (GPT-2, BERT), added to the input.

    ``forward(x[batch, seq, dim], offset=0) -> x + table[offset : offset + seq]``. Positions at or beyond
    ``max_len`` have no vector: asking for them raises ``ValueError`` rather than wrapping around.
    Initialised from N(0, 0.02^2), as in GPT-2.
    """

    def __init__(self, max_len: int, dim: int):
        super().__init__()
        self.max_len = check_int("max_len", max_len)
        self.dim = check_int("dim", dim)
        self.weight = nn.Parameter(torch.randn(max_len, dim) * 0.02)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        _check_input(x, self.dim)
        offset = check_int("offset", offset, minimum=0)
        end = offset + x.shape[1]
        if end > self.max_len:
            raise ValueError(f"positions {offset}..{end - 1} exceed the learned table: max_len={self.max_len} "
                             f"allows positions 0..{self.max_len - 1}")
        return x + self.weight[offset:end].to(x.dtype)

    def extra_repr(self) -> str:
        return f"max_len={self.max_len}, dim={self.dim}"
