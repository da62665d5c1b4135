"""Multimodal RoPE: position ids and cos/sin tables for text mixed with images and video.

Two schemes, both from the Qwen vision-language models:

- **M-RoPE** (Qwen2-VL; interleaved in Qwen3-VL) for the language model. Every token has three position
  ids, one per axis (t, h, w). Text tokens have the same id on all three; the tokens of an image or video
  grid have their frame, row and column, offset by the running position. Each rotation pair of the head
  takes its angle from one axis: ``mrope_section = [s_t, s_h, s_w]`` says how many pairs follow each.
- **Axial 2D RoPE** for the patches of a vision encoder (the Qwen2-VL / Qwen3-VL ViT): half of the pairs
  turn with the patch's row, half with its column.

Shape legend:

- ``seq``: language-model tokens, text and (merged) vision tokens together, in order.
- ``3``: the M-RoPE axes, in this order: ``t`` (frame), ``h`` (row), ``w`` (column).
- ``head_dim``: features per head; ``head_dim / 2`` rotation pairs, pair i being features (i, i + head_dim/2)
  (the half-split layout of ``apply_rope``), each with frequency ``inv_freq[i]``.
- ``sections``: ``mrope_section = [s_t, s_h, s_w]`` with ``s_t + s_h + s_w = head_dim / 2``. Contiguous
  (Qwen2-VL, e.g. ``[16, 24, 24]``): pairs ``0 .. s_t-1`` follow t, the next ``s_h`` follow h, the last
  ``s_w`` follow w. Interleaved (Qwen3-VL, e.g. ``[24, 20, 20]``): h and w take turns with t across the
  spectrum (pairs 1, 4, 7, ... follow h; 2, 5, 8, ... follow w; the rest t), so every axis gets both fast
  and slow frequencies.
- ``n``: patches of one image in the vision encoder; ``2``: the axial axes, row then column.

Text only, the three ids are equal and M-RoPE is exactly 1-D RoPE; the tests check that, that every
table here equals the one Hugging Face transformers 5.23 builds, and that the ids equal its
``get_rope_index`` with ``resume="transformers_5.3"`` (the default follows the Qwen2-VL paper instead; see
``mrope_positions``).
"""

from __future__ import annotations

import numbers

import torch

from .._validate import check_even, check_int, check_integer_positions, check_positive_float, check_tensor
from .scaling import default_inv_freq


def _grid(name: str, item) -> tuple[int, int, int]:
    if not isinstance(item, (tuple, list)) or len(item) != 3:
        raise TypeError(f"{name} must be an int (text tokens) or a (t, h, w) grid of 3 ints, got {item!r}")
    return tuple(check_int(f"{name}[{axis}]", size) for axis, size in enumerate(item))


MROPE_RESUME_RULES = ("largest_id_plus_one", "transformers_5.3")


def mrope_positions(segments, *, resume: str = "largest_id_plus_one", seq_len: int | None = None,
                    device=None) -> torch.Tensor:
    """M-RoPE position ids of a layout of text and image/video grids: LongTensor ``[3, seq]``.

    Args:
        segments: a list whose items are either an int (that many text tokens) or a ``(t, h, w)`` grid of
            vision tokens as the language model sees them, i.e. after the vision encoder merged patches
            (Qwen2-VL's ``image_grid_thw`` holds ``(t, h * m, w * m)`` with ``m = spatial_merge_size``).
            A grid stands for ``t * h * w`` tokens in raster order: frame by frame, row by row.
        resume: where the running position goes after a grid that starts at ``p``.
            ``"largest_id_plus_one"`` (default): one past the largest id used, ``p + max(t, h, w)``:
            Qwen2-VL's rule, the Qwen2-VL paper's ("position numbering for each modality is initialized
            by incrementing the maximum position ID of the preceding modality by one"), the Qwen team's
            code, and ``get_rope_index`` in transformers up to 5.2. Qwen2.5-VL was trained to resume
            one past the largest id too, but it spaces a video's t ids by
            ``interval = second_per_grid_t * tokens_per_second`` (transformers 5.23
            ``get_vision_position_ids``: ``arange(t) * time_interval``), so its rule is
            ``p + max(floor((t - 1) * interval) + 1, h, w)``. This function builds Qwen2-VL's ids, not
            Qwen2.5-VL's video ids.
            ``"transformers_5.3"``: ``p + max(h, w)``, what ``get_rope_index`` does from transformers
            5.3 (the refactor huggingface/transformers#43972) through at least 5.23; kept for parity
            tests with those versions. On Qwen2-VL's ids the two differ only after a video with more
            temporal patches than ``max(h, w)``, where the 5.3 rule gives the following text the t ids
            of the last frames (and disagrees with the ``rope_deltas`` those versions use for
            generation, which count from the largest id plus one).
        seq_len: if given, the number of tokens the layout must cover (``ValueError`` otherwise).
        device: where to put the ids.

    Returns:
        LongTensor ``[3, seq]``: rows t, h, w. Text tokens get the running position on all three rows. The
        token at frame f, row r, column c of a grid starting at running position p gets ``(p + f, p + r,
        p + c)``; after the grid the running position moves as ``resume`` says.
    """
    if resume not in MROPE_RESUME_RULES:
        raise ValueError(f"resume must be one of {MROPE_RESUME_RULES}, got {resume!r}")
    if not isinstance(segments, (list, tuple)):
        raise TypeError(f"segments must be a list of ints (text tokens) and (t, h, w) grids, "
                        f"got {type(segments).__name__}")
    pieces, start = [], 0
    for index, item in enumerate(segments):
        name = f"segments[{index}]"
        if isinstance(item, numbers.Integral) and not isinstance(item, bool):
            count = check_int(name, item, minimum=0)
            pieces.append(torch.arange(start, start + count, device=device).expand(3, count))
            start += count
            continue
        t, h, w = _grid(name, item)
        frame, row, column = torch.meshgrid(torch.arange(t, device=device), torch.arange(h, device=device),
                                            torch.arange(w, device=device), indexing="ij")
        pieces.append(torch.stack((frame, row, column)).reshape(3, -1) + start)
        start += max(t, h, w) if resume == "largest_id_plus_one" else max(h, w)
    positions = torch.cat(pieces, dim=1) if pieces else torch.zeros(3, 0, dtype=torch.long, device=device)
    if seq_len is not None and positions.shape[1] != check_int("seq_len", seq_len, minimum=0):
        raise ValueError(f"segments cover {positions.shape[1]} tokens (text counts plus t*h*w per grid), "
                         f"but seq_len is {seq_len}")
    return positions


def mrope_pair_axes(mrope_section, *, interleaved_sections: bool = False) -> torch.Tensor:
    """Which axis each rotation pair follows: LongTensor ``[head_dim / 2]`` of 0 (t), 1 (h), 2 (w).

    Args:
        mrope_section: ``[s_t, s_h, s_w]``, whole numbers >= 0; their sum is ``head_dim / 2``.
        interleaved_sections: ``False``: contiguous blocks ``[0]*s_t + [1]*s_h + [2]*s_w`` (Qwen2-VL).
            ``True``: Qwen3-VL's interleaving: pair i follows h if ``i % 3 == 1 and i < 3 * s_h``, w if
            ``i % 3 == 2 and i < 3 * s_w``, and t otherwise (``[24, 20, 20]``: t h w t h w ... t t t t).
    """
    if not isinstance(mrope_section, (list, tuple)) or len(mrope_section) != 3:
        raise TypeError(f"mrope_section must be a list of 3 ints [s_t, s_h, s_w], got {mrope_section!r}")
    sections = [check_int(f"mrope_section[{axis}]", s, minimum=0) for axis, s in enumerate(mrope_section)]
    n_pairs = sum(sections)
    if n_pairs == 0:
        raise ValueError("mrope_section must have a positive sum (head_dim / 2), got [0, 0, 0]")
    if not interleaved_sections:
        return torch.repeat_interleave(torch.arange(3), torch.tensor(sections))
    pair = torch.arange(n_pairs)
    axes = torch.zeros(n_pairs, dtype=torch.long)
    axes[(pair % 3 == 1) & (pair < 3 * sections[1])] = 1
    axes[(pair % 3 == 2) & (pair < 3 * sections[2])] = 2
    if axes.bincount(minlength=3).tolist() != sections:
        raise ValueError(f"mrope_section {sections} cannot be interleaved over {n_pairs} pairs: h takes pairs "
                         f"1, 4, 7, ... and w pairs 2, 5, 8, ..., so s_h <= {len(range(1, n_pairs, 3))} and "
                         f"s_w <= {len(range(2, n_pairs, 3))}")
    return axes


def mrope_cos_sin(positions: torch.Tensor, inv_freq: torch.Tensor, mrope_section, *,
                  interleaved_sections: bool = False,
                  attention_scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """M-RoPE cos and sin tables for the half-split ``apply_rope``.

    Args:
        positions: whole numbers, ``[3, seq]`` (from ``mrope_positions``) or ``[batch, 3, seq]``. Note the
            order: Hugging Face passes ``[3, batch, seq]``; use ``hf_ids.transpose(0, 1)``.
        inv_freq: ``[head_dim / 2]``, e.g. from ``rope_frequencies``.
        mrope_section: ``[s_t, s_h, s_w]`` summing to ``head_dim / 2`` (see ``mrope_pair_axes``).
        interleaved_sections: Qwen3-VL's interleaved layout instead of Qwen2-VL's contiguous one.
        attention_scale: multiplied into both tables, as in ``rope_cos_sin``.

    Returns:
        ``(cos, sin)``, each float32 ``[seq, head_dim]`` (``[batch, seq, head_dim]`` for batched positions),
        on the device of ``positions``. Pair i turns by ``positions[axis[i], s] * inv_freq[i]`` with
        ``axis = mrope_pair_axes(mrope_section, ...)``; the two members of a pair share the angle.

    With the same id on all three axes (text) this is ``rope_cos_sin(positions[0], inv_freq)`` exactly.
    """
    check_integer_positions("positions", positions)
    check_tensor("inv_freq", inv_freq, min_dim=1)
    if positions.dim() not in (2, 3) or positions.shape[-2] != 3:
        raise ValueError(f"positions must be [3, seq] or [batch, 3, seq] (axes t, h, w), "
                         f"got shape {tuple(positions.shape)}")
    if inv_freq.dim() != 1:
        raise ValueError(f"inv_freq must be 1-D [head_dim // 2], got shape {tuple(inv_freq.shape)}")
    axes = mrope_pair_axes(mrope_section, interleaved_sections=interleaved_sections)
    if len(axes) != len(inv_freq):
        raise ValueError(f"mrope_section must sum to head_dim / 2 = len(inv_freq) = {len(inv_freq)}, "
                         f"got {list(mrope_section)} (sum {len(axes)})")
    pair_positions = positions[..., axes.to(positions.device), :].transpose(-1, -2)  # [..., seq, head_dim/2]
    angles = pair_positions.to(torch.float32) * inv_freq.to(positions.device, torch.float32)
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos() * attention_scale, angles.sin() * attention_scale


def axial_positions(height: int, width: int, *, merge_size: int = 1, device=None) -> torch.Tensor:
    """(row, column) of every patch of a ``height x width`` grid: LongTensor ``[2, height * width]``.

    Args:
        height, width: patches per column and per row (>= 1).
        merge_size: 1 gives raster order (row by row). ``m > 1`` gives the order of the Qwen2-VL / Qwen3-VL
            vision encoders (``spatial_merge_size``): ``m x m`` blocks in raster order, raster order inside
            each block, so that every ``m * m`` consecutive patches merge into one language-model token.
            It must divide ``height`` and ``width``.
        device: where to put the ids.
    """
    height, width = check_int("height", height), check_int("width", width)
    merge_size = check_int("merge_size", merge_size)
    if height % merge_size or width % merge_size:
        raise ValueError(f"merge_size must divide height and width, got merge_size={merge_size} for a "
                         f"{height} x {width} grid")
    row, column = torch.meshgrid(torch.arange(height, device=device), torch.arange(width, device=device),
                                 indexing="ij")
    blocks = (height // merge_size, merge_size, width // merge_size, merge_size)
    return torch.stack([ids.reshape(blocks).transpose(1, 2).flatten() for ids in (row, column)])


def axial_rope_cos_sin(positions: torch.Tensor, head_dim: int, *,
                       base: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Axial 2D RoPE tables for image patches, laid out as the Qwen2-VL / Qwen3-VL vision encoders do.

    Args:
        positions: whole numbers ``[2, n]`` (row, column; from ``axial_positions``) or ``[..., 2, n]``.
        head_dim: features per head, a multiple of 4.
        base: the RoPE base (``rope_theta``).

    Returns:
        ``(cos, sin)``, each float32 ``[n, head_dim]`` (``[..., n, head_dim]``) for the half-split
        ``apply_rope``. With ``inv_freq = default_inv_freq(head_dim // 2, base)`` (``head_dim / 4``
        frequencies), pair i < head_dim/4 turns by ``row * inv_freq[i]`` and pair head_dim/4 + i by
        ``column * inv_freq[i]``. That is M-RoPE with two axes, sections ``[head_dim/4, head_dim/4]`` and
        the same frequencies for both, so the score of two rotated patches depends only on
        ``(row difference, column difference)``.
    """
    check_integer_positions("positions", positions)
    head_dim = check_even("head_dim", head_dim)
    if head_dim % 4:
        raise ValueError(f"head_dim must be a multiple of 4 (half the pairs per axis), got {head_dim}")
    if positions.dim() < 2 or positions.shape[-2] != 2:
        raise ValueError(f"positions must be [2, n] or [..., 2, n] (row, column), got shape {tuple(positions.shape)}")
    inv_freq = default_inv_freq(head_dim // 2, check_positive_float("base", base)).to(positions.device)
    angles = positions.to(torch.float32)[..., None] * inv_freq  # [..., 2, n, head_dim/4]
    angles = torch.cat((angles[..., 0, :, :], angles[..., 1, :, :]), dim=-1)  # row pairs, then column pairs
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos(), angles.sin()
