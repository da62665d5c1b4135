"""Absolute positions: binary codes (chapter 2), the sinusoidal table (chapter 3) and its 2D form (chapter 4)."""

from __future__ import annotations

import torch

from ..absolute import sinusoidal_encoding, sinusoidal_encoding_2d
from ._common import _as_tensor, _close, _diagnose, _passed


# ---- chapter 2: binary position codes ------------------------------------------------------------------

def _binary_code(positions: torch.Tensor, bits: int) -> torch.Tensor:
    """Chapter 2's code, ``[n, bits]`` float64: feature k is bit k of the position (least significant
    first), so positions ``2**bits`` apart get the same code."""
    return ((positions[:, None] >> torch.arange(bits)) & 1).double()



def check_binary_code(fn) -> bool:
    """``fn(positions[n], bits) -> [n, bits]``: bit k of each position in feature k, least significant bit
    first, as 0 and 1 (chapter 2's ``binary_code`` without its constant feature)."""
    for positions, bits in ((torch.arange(64), 6), (torch.tensor([7, 8, 31, 32, 63, 64, 100]), 6),
                            (torch.arange(300), 9), (torch.arange(4), 1)):
        expected = _binary_code(positions, bits)
        answer = _as_tensor("the code", fn(positions, bits), expected.shape)
        if not _close(answer, expected, 1e-9):
            known = {"the bits are in reverse order: feature 0 is the least significant bit, (p >> 0) & 1":
                         expected.flip(-1),
                     "the bits are -1 and +1 (2b - 1, exercise 2's code); this exercise keeps 0 and 1":
                         2 * expected - 1,
                     "feature k is p // 2**k, not bit k: keep its last bit, (p >> k) & 1 or (p // 2**k) % 2":
                         (positions[:, None] // 2 ** torch.arange(bits)).double()}
            _diagnose(f"binary code ({len(positions)} positions, {bits} bits)", answer, expected, known, 1e-9)
    return _passed("binary code")



def check_sinusoidal(fn) -> bool:
    """``fn(n_positions, dim) -> [n_positions, dim]``: the sinusoidal table of Vaswani et al."""
    for n, dim in ((50, 16), (7, 2), (128, 64)):
        expected = sinusoidal_encoding(n, dim, dtype=torch.float64)
        answer = _as_tensor("the table", fn(n, dim), (n, dim))
        if not _close(answer, expected, 1e-4):
            known = {
                "sines and cosines are in separate halves (all sines, then all cosines); this exercise "
                "interleaves them: sin at feature 2i, cos at 2i + 1":
                    sinusoidal_encoding(n, dim, layout="sin_cos", dtype=torch.float64),
                "sin and cos are swapped: feature 2i is sin(p w_i), 2i + 1 is cos(p w_i)":
                    sinusoidal_encoding(n, dim, dtype=torch.float64).view(n, dim // 2, 2).flip(-1).reshape(n, dim),
                "positions start at 1; the first row is position 0 (sin 0 = 0, cos 0 = 1)":
                    sinusoidal_encoding(n, dim, offset=1, dtype=torch.float64),
            }
            if dim >= 4:  # tensor2tensor's spacing needs two frequencies at least
                known["the frequencies use dim/2 - 1 in the exponent (tensor2tensor's spacing); the paper's "
                      "is w_i = 10000^(-2i/dim)"] = sinusoidal_encoding(n, dim, freq_denominator="d/2-1",
                                                                        dtype=torch.float64)
            _diagnose(f"sinusoidal table ({n} x {dim})", answer, expected, known, 1e-4)
    return _passed("sinusoidal table")



# ---- chapter 4: the 2D sinusoidal table ----------------------------------------------------------------

def _rows_then_columns(rows: torch.Tensor, columns: torch.Tensor) -> torch.Tensor:
    """``[height, f]`` row codes and ``[width, f]`` column codes -> ``[height * width, 2f]``, raster order."""
    height, width = rows.shape[0], columns.shape[0]
    return torch.cat((rows[:, None].expand(height, width, -1), columns[None].expand(height, width, -1)),
                     dim=-1).reshape(height * width, -1)



def check_sinusoidal_2d(fn) -> bool:
    """``fn(height, width, dim) -> [height * width, dim]``: patch ``r * width + c`` is ``[PE(r), PE(c)]``,
    chapter 3's interleaved table of width ``dim / 2`` for the row, then for the column."""
    for height, width, dim in ((3, 5, 16), (4, 4, 8), (1, 6, 8), (6, 2, 32)):
        expected = sinusoidal_encoding_2d(height, width, dim, dtype=torch.float64)
        answer = _as_tensor("the table", fn(height, width, dim), expected.shape)
        if not _close(answer, expected, 1e-6):
            half = dim // 2
            wide = [sinusoidal_encoding(n, dim, dtype=torch.float64)[:, :half] for n in (height, width)]
            known = {
                "the halves are swapped: the first dim/2 features code the row, the last dim/2 the column "
                "(MAE's original code puts the column first)": expected.roll(half, dims=1),
                "the patches are numbered column by column; in raster order row r, column c is patch "
                "r * width + c": expected.view(height, width, dim).transpose(0, 1).reshape(-1, dim),
                "each half takes the frequencies of a table dim wide; it is a table of width dim/2, "
                "w_i = 10000 ** (-2i / (dim/2))": _rows_then_columns(*wide),
                "each half is all sines, then all cosines (Hugging Face's ViTMAE); this exercise interleaves "
                "them, as chapter 3's table does":
                    sinusoidal_encoding_2d(height, width, dim, layout="sin_cos", dtype=torch.float64),
            }
            _diagnose(f"2D table ({height} x {width}, dim {dim})", answer, expected, known, 1e-6)
    return _passed("2D sinusoidal table")

