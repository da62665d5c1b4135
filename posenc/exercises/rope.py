"""RoPE: its frequencies and rotation (chapter 6), Llama 3.1's rule (chapter 7), partial and proportional
rotation (chapter 14) and M-RoPE's ids (chapter 18)."""

from __future__ import annotations

import math

import torch

from ..rope import mrope_positions, rope_frequencies
from ..rope.scaling import _llama3
from ._common import ExerciseFailed, _as_tensor, _close, _diagnose, _passed


def check_rope_frequencies(fn) -> bool:
    """``fn(head_dim, base) -> [head_dim // 2]``: ``base ** (-2i / head_dim)``."""
    for head_dim, base in ((64, 10000.0), (128, 500000.0), (8, 10.0)):
        expected = rope_frequencies(head_dim, base=base)[0].double()
        answer = _as_tensor("the frequencies", fn(head_dim, base), (head_dim // 2,))
        if not _close(answer, expected, 0.0, 1e-5):
            i = torch.arange(head_dim // 2, dtype=torch.float64)
            known = {"these are wavelengths (base ** (2i/d)); RoPE's inverse frequencies are their reciprocals, "
                     "base ** (-2i/d)": base ** (2 * i / head_dim),
                     "the exponent uses i / head_dim; it is 2i / head_dim (one frequency per pair of features)":
                         base ** (-i / head_dim),
                     "the exponent divides by head_dim - 2 (or d/2 - 1); it is 2i / head_dim":
                         base ** (-2 * i / (head_dim - 2)) if head_dim > 2 else expected}
            _diagnose(f"frequencies (head_dim {head_dim}, base {base:g})", answer, expected, known, 0.0, 1e-5)
    return _passed("RoPE frequencies")



def _rope(x, positions, base, interleaved=False, dtype=torch.float64):
    inv_freq = (base ** (-torch.arange(0, x.shape[-1], 2, dtype=torch.float64) / x.shape[-1])).to(dtype)
    angles = positions.to(dtype)[:, None] * inv_freq
    if interleaved:
        angles = angles.repeat_interleave(2, dim=-1)
    else:
        angles = torch.cat([angles, angles], dim=-1)
    cos, sin = angles.cos(), angles.sin()
    if interleaved:
        pairs = x.double().view(*x.shape[:-1], -1, 2)
        turned = torch.stack([-pairs[..., 1], pairs[..., 0]], -1).view(x.shape)
    else:
        half = x.shape[-1] // 2
        turned = torch.cat([-x.double()[..., half:], x.double()[..., :half]], -1)
    return x.double() * cos.double() + turned * sin.double()



def check_apply_rope(fn) -> bool:
    """``fn(x, positions, base) -> x rotated``, half-split pairs, float64 reference; also checks large
    positions, where angles computed in half precision go wrong (float32 angles, as Hugging Face and
    posenc compute them, are within the tolerance there: about 1e-3 at position 30,000)."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 12, 16, generator=generator, dtype=torch.float64)
    for positions in (torch.arange(12), torch.arange(30000, 30012)):
        expected = _rope(x, positions, 10000.0)
        answer = _as_tensor("the rotated x", fn(x, positions, 10000.0), x.shape)
        tolerance = 1e-5 if positions[0] == 0 else 1e-2
        if not _close(answer, expected, tolerance):
            known = {
                "pairs are interleaved (2i with 2i + 1, as RoFormer and Meta's Llama); this exercise pairs "
                "feature i with i + head_dim/2 (half-split, as Hugging Face's Llama)":
                    _rope(x, positions, 10000.0, interleaved=True),
                "off by one: the first token should be at position 0 (it is not rotated)":
                    _rope(x, positions + 1, 10000.0),
                "the rotation goes the wrong way (sin with the opposite sign)": _rope(x, -positions, 10000.0),
            }
            known["the angles are computed in half precision, which loses them (badly at large positions): "
                  "compute position * frequency in float32 or float64"] = _rope(x, positions, 10000.0,
                                                                                 dtype=torch.float16)
            known["the angles are computed in bfloat16 (chapter 6's bug: 8 bits of mantissa lose them even at "
                  "small positions): compute position * frequency in float32 or float64"] = _rope(
                x, positions, 10000.0, dtype=torch.bfloat16)
            _diagnose(f"apply_rope at positions {int(positions[0])}..{int(positions[-1])}", answer, expected,
                      known, tolerance)
    return _passed("apply_rope")



# ---- chapter 7: Llama 3.1's rule -----------------------------------------------------------------------

def check_llama3_frequencies(fn) -> bool:
    """``fn(inv_freq[pairs], factor, low_freq_factor, high_freq_factor, original_length) -> [pairs]``:
    Llama 3.1's rescaled RoPE frequencies, compared in float64 with posenc's ``"llama3"`` type."""
    heads = ((128, 5e5, 8192, 8.0, 1.0, 4.0), (128, 1e4, 4096, 4.0, 1.0, 4.0), (64, 1e4, 1024, 16.0, 1.0, 4.0),
             (128, 5e5, 8192, 16.0, 1.0, 1.0))  # the last: Llama 4 Scout, an empty blend band
    for head_dim, base, length, factor, low, high in heads:
        inv_freq = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
        params = {"factor": factor, "low_freq_factor": low, "high_freq_factor": high,
                  "original_max_position_embeddings": length}
        expected = _llama3(inv_freq, params)
        answer = _as_tensor("the frequencies", fn(inv_freq.clone(), factor, low, high, length), expected.shape)
        if not _close(answer, expected, 0.0, 1e-6):
            wavelength = 2 * math.pi / inv_freq
            band = (wavelength >= length / high) & (wavelength <= length / low)
            known = {
                "every pair is divided by the factor (position interpolation); Llama 3's rule keeps the pairs "
                "whose wavelength is below L / high_freq_factor": inv_freq / factor,
                "the wavelength is 1 / theta; it is 2 pi / theta, and without the 2 pi the bands move":
                    _llama3(inv_freq * 2 * math.pi, params) / (2 * math.pi),
                "the blend is reversed: smooth = (L / wavelength - low) / (high - low) is the weight of the "
                "kept frequency, (1 - smooth) that of the divided one":
                    torch.where(band, inv_freq / factor + inv_freq - expected, expected),
            }
            _diagnose(f"Llama 3 frequencies (head_dim {head_dim}, base {base:g}, L {length}, factor {factor:g}, "
                      f"low {low:g}, high {high:g})", answer, expected, known, 0.0, 1e-6)
    return _passed("Llama 3 frequencies")



# ---- chapter 14: partial and proportional rotation -----------------------------------------------------

def _rotation_mistakes(head_dim: int, base: float, share: float, rope_type: str) -> dict:
    """The other construction, and each with its exponent over the wrong width (float64)."""
    rotary, turning = int(share * head_dim), int(share * head_dim // 2)
    i = torch.arange(head_dim // 2, dtype=torch.float64)
    partial = base ** (-2 * torch.arange(rotary // 2, dtype=torch.float64) / rotary)
    proportional = torch.where(i < turning, base ** (-2 * i / head_dim), 0.0)
    if rope_type == "default":
        return {"this is proportional rotation (Gemma 4's rope_type \"proportional\"); partial rotation has "
                "r // 2 frequencies, base ** (-2i / r), with r = int(p * head_dim)": proportional,
                "the exponent runs over head_dim; partial rotation's runs over the rotary dim r = "
                "int(p * head_dim): base ** (-2i / r)": proportional[:turning]}
    return {"this is partial rotation (rope_type \"default\" with a partial_rotary_factor); proportional "
            "keeps all head_dim // 2 frequencies, base ** (-2i / head_dim), and gives the pairs from "
            "int(p * head_dim // 2) on frequency 0": partial,
            "the exponent runs over the rotary dim; proportional keeps the full head's, base ** (-2i / head_dim)":
                torch.where(i < turning, base ** (-2 * i / rotary), 0.0)}



def check_partial_rotation(fn) -> bool:
    """``fn(head_dim, base, partial_rotary_factor, rope_type)`` -> inverse frequencies: ``rope_type="default"``
    is partial rotation (GPT-NeoX; ``r = int(p * head_dim)`` features turn, ``[r // 2]`` frequencies
    ``base ** (-2i / r)``); ``"proportional"`` (Gemma 4) gives ``[head_dim // 2]``, ``base ** (-2i / head_dim)``
    for the first ``int(p * head_dim // 2)`` pairs and 0 for the rest."""
    for head_dim, base, share in ((512, 1e6, 0.25), (64, 1e4, 0.5), (128, 1e4, 0.25)):
        for rope_type in ("default", "proportional"):
            scaling = {"rope_type": rope_type, "partial_rotary_factor": share}
            expected = rope_frequencies(head_dim, base=base, scaling=scaling)[0].double()
            answer = _as_tensor("the frequencies", fn(head_dim, base, share, rope_type))
            if not _close(answer, expected, 1e-12, 1e-6):
                _diagnose(f"{rope_type} rotation (head_dim {head_dim}, base {base:g}, p {share})", answer,
                          expected, _rotation_mistakes(head_dim, base, share, rope_type), 1e-12, 1e-6)
    return _passed("partial and proportional rotation")



# ---- chapter 18: M-RoPE ids ----------------------------------------------------------------------------

def _mrope_ids(segments, *, advance_by_tokens: bool = False, frames: bool = True) -> torch.Tensor:
    """M-RoPE ids ``[3, seq]`` written out, with switches for two usual mistakes."""
    ids, p = [], 0
    for item in segments:
        if isinstance(item, int):
            ids += [(p + i,) * 3 for i in range(item)]
            p += item
            continue
        t, h, w = item
        ids += [(p + (f if frames else 0), p + r, p + c) for f in range(t) for r in range(h) for c in range(w)]
        p += t * h * w if advance_by_tokens else max(t, h, w)
    return torch.tensor(ids, dtype=torch.long).T



def check_mrope_positions(fn) -> bool:
    """``fn(segments) -> [3, seq]``: M-RoPE's (t, h, w) ids of a list of text runs (ints) and ``(t, h, w)``
    grids, as ``posenc.mrope_positions`` (Qwen2-VL's rule: resume one past the largest id)."""
    for segments in ([3, (1, 3, 4), 2, (2, 2, 3), 3], [2, (6, 2, 2), 3], [4], [(1, 2, 2)],
                     [1, (3, 2, 5), 2, (1, 4, 2), 1]):
        expected = mrope_positions(segments)
        answer = _as_tensor("the ids", fn(list(segments)), expected.shape)
        if _close(answer, expected, 0.0):
            continue
        known = {"after a grid the running position moves by its number of tokens, as after text; M-RoPE "
                 "resumes one past the largest id the grid used, p + max(t, h, w)":
                     _mrope_ids(segments, advance_by_tokens=True),
                 "after a grid the text resumes at p + max(h, w) (transformers 5.3 to 5.23), which puts the "
                 "text after a long video on its last frames' t ids; the trained rule is p + max(t, h, w)":
                     mrope_positions(segments, resume="transformers_5.3"),
                 "the h and w rows are swapped: row 1 holds the grid row (h), row 2 the column (w), and the "
                 "tokens run row by row": expected[[0, 2, 1]],
                 "the t id does not advance with the frames: frame f of a grid that starts at p has t = p + f":
                     _mrope_ids(segments, frames=False)}
        for mistake, wrong in known.items():
            if _close(answer, wrong, 0.0):
                raise ExerciseFailed(f"M-RoPE ids of {segments}: {mistake}")
        token = int(torch.nonzero((answer.double() != expected.double()).any(0))[0])
        yours = tuple(float(v) for v in answer[:, token])
        raise ExerciseFailed(f"M-RoPE ids of {segments}: token {token} has (t, h, w) = {yours}, expected "
                             f"{tuple(expected[:, token].tolist())}")
    return _passed("M-RoPE ids")

