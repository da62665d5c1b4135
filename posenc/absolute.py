"""Absolute position encodings: the sinusoidal table of Vaswani et al. (2017) and a learned table.

Both are *added* to the token embeddings before the first layer: ``x + PE[offset : offset + seq]``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ._float32 import Float32Buffers
from ._validate import check_choice, check_even, check_int, check_positive_float, check_tensor


#: Orders of the sine and cosine columns in use (see ``sinusoidal_encoding``).
SINUSOID_LAYOUTS = ("interleaved", "sin_cos", "cos_sin")
#: Spacings of the frequencies in use: ``w_i = base ** (-i / denominator)``, ``i = 0 .. dim/2 - 1``.
FREQ_DENOMINATORS = ("d/2", "d/2-1")


def sinusoidal_encoding(n_positions: int, dim: int, *, base: float = 10000.0, offset: int = 0,
                        layout: str = "interleaved", freq_denominator: str = "d/2",
                        dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The sinusoidal position table.

    With the defaults, Vaswani et al.'s formula: ``PE[row, 2i] = sin(p * w_i)`` and
    ``PE[row, 2i+1] = cos(p * w_i)`` with ``w_i = base**(-2i/dim)`` and ``p = offset + row``.

    Released code uses three column orders and two frequency spacings; ``layout`` and
    ``freq_denominator`` build each of them (chapter 3):

    - ``layout="interleaved"``: ``sin, cos`` pairs, ``PE[row, 2i] = sin``, ``PE[row, 2i+1] = cos``
      (the paper);
      ``"sin_cos"``: all sines, then all cosines, ``PE[row, i] = sin``, ``PE[row, dim/2 + i] = cos``
      (tensor2tensor, fairseq, Whisper, each axis of MAE's 2D table);
      ``"cos_sin"``: all cosines, then all sines (diffusers' ``flip_sin_to_cos=True``, DiT's and GLIDE's
      timestep embedding, MusicGen).
    - ``freq_denominator="d/2"``: ``w_i = base**(-i/(dim/2)) = base**(-2i/dim)`` (the paper, MAE, diffusers'
      ``downscale_freq_shift=0``); ``"d/2-1"``: ``w_i = base**(-i/(dim/2 - 1))``, so the slowest pair's
      wavelength is exactly ``2*pi*base`` (tensor2tensor, fairseq, Whisper, diffusers' default
      ``downscale_freq_shift=1``).

    For example Whisper's encoder table ``sinusoids(length, channels)`` is
    ``sinusoidal_encoding(length, channels, layout="sin_cos", freq_denominator="d/2-1")``, and fairseq's
    table, whose positions start after the padding index, is the same with ``offset=padding_idx + 1``.

    Args:
        n_positions: number of rows (positions), >= 1.
        dim: model width, a positive even integer (>= 4 with ``freq_denominator="d/2-1"``).
        base: wavelength base (10000 in the original Transformer), > 0.
        offset: position of the first row, >= 0 (used when decoding with a cache).
        layout: ``"interleaved"``, ``"sin_cos"`` or ``"cos_sin"``.
        freq_denominator: ``"d/2"`` or ``"d/2-1"``.
        dtype: dtype of the result; the trigonometry is always done in float64 and then cast.

    Returns:
        Tensor of shape ``[n_positions, dim]``.
    """
    n_positions = check_int("n_positions", n_positions)
    dim = check_even("dim", dim)
    base = check_positive_float("base", base)
    offset = check_int("offset", offset, minimum=0)
    layout = check_choice("layout", layout, SINUSOID_LAYOUTS)
    freq_denominator = check_choice("freq_denominator", freq_denominator, FREQ_DENOMINATORS)
    half = dim // 2
    if freq_denominator == "d/2-1" and half < 2:
        raise ValueError(f"dim must be >= 4 with freq_denominator='d/2-1' (it divides by dim/2 - 1), "
                         f"got {dim}")
    denominator = half if freq_denominator == "d/2" else half - 1
    positions = torch.arange(offset, offset + n_positions, dtype=torch.float64)
    inv_freq = base ** (-torch.arange(half, dtype=torch.float64) / denominator)  # [dim/2]
    angles = positions[:, None] * inv_freq[None, :]  # [n_positions, dim/2]
    if layout == "interleaved":
        table = torch.stack((angles.sin(), angles.cos()), dim=-1).reshape(n_positions, dim)
    elif layout == "sin_cos":
        table = torch.cat((angles.sin(), angles.cos()), dim=-1)
    else:
        table = torch.cat((angles.cos(), angles.sin()), dim=-1)
    return table.to(dtype)


def sinusoidal_encoding_2d(height: int, width: int, dim: int, *, base: float = 10000.0,
                           layout: str = "interleaved", freq_denominator: str = "d/2",
                           dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A 2D sinusoidal table for a ``height x width`` grid of patches, flattened row by row.

    Row ``r * width + c`` (patch in grid row r, column c) is ``[PE_1d(r), PE_1d(c)]``: the first
    ``dim/2`` features are ``sinusoidal_encoding`` of the row index, the last ``dim/2`` of the column
    index. With ``layout="sin_cos"`` this is Hugging Face transformers 5.x's ViTMAE table
    (``build_2d_sinusoidal_position_embedding``, ``[sin_h | cos_h | sin_w | cos_w]``, rows first). MAE's
    original code (``get_2d_sincos_pos_embed``, whose ``np.meshgrid(grid_w, grid_h)`` puts w first) encodes
    the column in the first half, i.e. the halves swapped: ``torch.cat((t[:, dim//2:], t[:, :dim//2]), 1)``.

    Args:
        height, width: grid size, >= 1.
        dim: model width, a positive multiple of 4.
        base, layout, freq_denominator: as in ``sinusoidal_encoding``, for each half.
        dtype: dtype of the result.

    Returns:
        Tensor of shape ``[height * width, dim]``.
    """
    height, width = check_int("height", height), check_int("width", width)
    dim = check_int("dim", dim)
    if dim % 4:
        raise ValueError(f"dim must be a positive multiple of 4 (two even halves), got {dim}")
    options = {"base": base, "layout": layout, "freq_denominator": freq_denominator, "dtype": dtype}
    rows = sinusoidal_encoding(height, dim // 2, **options)  # [height, dim/2]
    cols = sinusoidal_encoding(width, dim // 2, **options)  # [width, dim/2]
    grid = torch.cat((rows[:, None, :].expand(height, width, dim // 2),
                      cols[None, :, :].expand(height, width, dim // 2)), dim=-1)
    return grid.reshape(height * width, dim)


def resize_position_table_2d(table: torch.Tensor, old_size: tuple[int, int], new_size: tuple[int, int], *,
                             mode: str = "bicubic", antialias: bool = True,
                             num_prefix_tokens: int = 0) -> torch.Tensor:
    """Resample a learned 2D position table to a new grid, as ViT fine-tuning at a new resolution does.

    The table's grid rows are reshaped to ``old_size``, interpolated as an image with one channel per
    feature (``torch.nn.functional.interpolate``, align_corners=False; timm's defaults: bicubic with
    antialiasing), and flattened again. The first ``num_prefix_tokens`` rows (e.g. ViT's [CLS]
    position) are kept as they are.

    Args:
        table: ``[num_prefix_tokens + old_h * old_w, dim]``.
        old_size, new_size: ``(height, width)`` of the grids.
        mode: ``"bicubic"``, ``"bilinear"`` or ``"nearest"``.
        antialias: smooth before downsampling (ignored by ``"nearest"``).
        num_prefix_tokens: rows before the grid that are not resampled.

    Returns:
        ``[num_prefix_tokens + new_h * new_w, dim]``, the dtype of ``table``.
    """
    check_tensor("table", table, min_dim=2)
    old_h, old_w = (check_int("old_size", n) for n in old_size)
    new_h, new_w = (check_int("new_size", n) for n in new_size)
    num_prefix_tokens = check_int("num_prefix_tokens", num_prefix_tokens, minimum=0)
    if mode not in ("bicubic", "bilinear", "nearest"):
        raise ValueError(f"mode must be one of ['bicubic', 'bilinear', 'nearest'], got {mode!r}")
    if table.dim() != 2 or table.shape[0] != num_prefix_tokens + old_h * old_w:
        raise ValueError(f"table must be [num_prefix_tokens + {old_h}*{old_w}, dim] = "
                         f"[{num_prefix_tokens + old_h * old_w}, dim], got {tuple(table.shape)}")
    prefix, grid = table[:num_prefix_tokens], table[num_prefix_tokens:]
    image = grid.float().reshape(1, old_h, old_w, -1).permute(0, 3, 1, 2)  # [1, dim, h, w]
    options = {} if mode == "nearest" else {"antialias": antialias, "align_corners": False}
    image = F.interpolate(image, size=(new_h, new_w), mode=mode, **options)
    grid = image.permute(0, 2, 3, 1).reshape(new_h * new_w, -1).to(table.dtype)
    return torch.cat((prefix, grid), dim=0)


def _check_input(x, dim: int) -> torch.Tensor:
    check_tensor("x", x, min_dim=3)
    if x.dim() != 3 or x.shape[-1] != dim:
        raise ValueError(f"x must have shape [batch, seq, {dim}], got {tuple(x.shape)}")
    return x


class SinusoidalEncoding(Float32Buffers):
    """Adds the sinusoidal table to its input: ``forward(x[batch, seq, dim], offset=0) -> x + scale * PE``.

    The table is computed on demand (cached for the longest length seen), so any length works.
    ``scale`` (default 1, the original Transformer) multiplies the table, to match it to the size of the
    token embeddings it is added to. ``layout`` and ``freq_denominator`` choose one of the layouts in use
    (see ``sinusoidal_encoding``; default: the paper's). The cached table stays float32 when the module is
    cast to half precision; it is cast to ``x``'s dtype only when added.
    """

    float32_buffers = ("_table",)

    def __init__(self, dim: int, *, base: float = 10000.0, scale: float = 1.0, layout: str = "interleaved",
                 freq_denominator: str = "d/2"):
        super().__init__()
        self.dim = check_even("dim", dim)
        self.base = check_positive_float("base", base)
        self.scale = check_positive_float("scale", scale)
        self.layout = check_choice("layout", layout, SINUSOID_LAYOUTS)
        self.freq_denominator = check_choice("freq_denominator", freq_denominator, FREQ_DENOMINATORS)
        sinusoidal_encoding(1, self.dim, layout=self.layout, freq_denominator=self.freq_denominator)  # checks
        self.register_buffer("_table", torch.empty(0, dim), persistent=False)

    def table(self, n_positions: int) -> torch.Tensor:
        """Rows ``0 .. n_positions-1`` of the table, shape ``[n_positions, dim]`` (float32)."""
        if self._table.shape[0] < n_positions:
            self._table = sinusoidal_encoding(max(n_positions, 2 * self._table.shape[0]), self.dim,
                                              base=self.base, layout=self.layout,
                                              freq_denominator=self.freq_denominator).to(self._table.device)
        return self._table[:n_positions]

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        _check_input(x, self.dim)
        offset = check_int("offset", offset, minimum=0)
        pe = self.table(offset + x.shape[1])[offset:]
        return x + (self.scale * pe).to(x.dtype)

    def extra_repr(self) -> str:
        extra = "" if (self.layout, self.freq_denominator) == ("interleaved", "d/2") else (
            f", layout={self.layout!r}, freq_denominator={self.freq_denominator!r}")
        return f"dim={self.dim}, base={self.base}, scale={self.scale}{extra}"


class LearnedEncoding(nn.Module):
    """A trainable table of ``max_len`` position vectors (GPT-2, BERT), added to the input.

    ``forward(x[batch, seq, dim], offset=0) -> x + table[offset : offset + seq]``. Positions at or beyond
    ``max_len`` have no vector: asking for them raises ``ValueError`` rather than wrapping around.
    Initialised from N(0, 0.02^2), as in BERT and Hugging Face's GPT-2 (``initializer_range``); OpenAI's
    original GPT-2 code drew its position table with standard deviation 0.01.
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
