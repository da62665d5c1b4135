"""RoPE's frequencies and the schemes that rescale them to extend the context window.

``rope_frequencies(head_dim, base=..., scaling=...)`` returns ``(inv_freq, attention_scale)``. The scaling
dicts follow Hugging Face's ``rope_scaling`` / ``rope_parameters`` format; for every type Hugging Face has,
the numbers equal ``transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS`` for the same settings (the
tests check). ``ntk`` is posenc's own *static* NTK-aware base change (Hugging Face's ``dynamic`` type
applies the same change, grown with the sequence length).
"""

from __future__ import annotations

import math

import torch

from .._validate import check_choice, check_even, check_int, check_positive_float

ROPE_TYPES = {
    "default": ((), ()),
    "linear": (("factor",), ()),
    "ntk": (("factor",), ()),
    "dynamic": (("factor", "original_max_position_embeddings"), ()),
    "yarn": (("factor", "original_max_position_embeddings"),
             ("beta_fast", "beta_slow", "attention_factor", "mscale", "mscale_all_dim", "truncate")),
    "llama3": (("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"), ()),
}


def default_inv_freq(head_dim: int, base: float = 10000.0) -> torch.Tensor:
    """``inv_freq[i] = base ** (-2i / head_dim)`` for i < head_dim/2, shape ``[head_dim//2]`` float32.

    Computed in float32 exactly as Hugging Face and Meta's Llama do, so tables match theirs bit for bit.
    """
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim
    return 1.0 / (base ** exponents)


def _parse_scaling(scaling, base: float) -> tuple[str, dict]:
    """Validate a scaling dict; return its rope_type and its other keys."""
    if scaling is None:
        return "default", {}
    if not isinstance(scaling, dict):
        raise TypeError(f"scaling must be a dict like {{'rope_type': 'linear', 'factor': 2.0}} or None, "
                        f"got {type(scaling).__name__}")
    params = dict(scaling)
    rope_type = params.pop("rope_type", params.pop("type", None))  # "type" is HF's legacy key
    if rope_type is None:
        raise ValueError("scaling must contain 'rope_type', one of " + str(sorted(ROPE_TYPES)))
    check_choice("scaling['rope_type']", rope_type, ROPE_TYPES)
    theta = params.pop("rope_theta", None)
    if theta is not None and float(theta) != base:
        raise ValueError(f"scaling['rope_theta']={theta} disagrees with base={base}; pass one of them")
    required, optional = ROPE_TYPES[rope_type]
    missing = [key for key in required if key not in params]
    if missing:
        raise ValueError(f"scaling with rope_type={rope_type!r} is missing {missing}; it needs {list(required)}")
    unknown = sorted(set(params) - set(required) - set(optional))
    if unknown:
        raise ValueError(f"scaling with rope_type={rope_type!r} got unknown keys {unknown}; "
                         f"allowed: {list(required) + list(optional)}")
    if "factor" in params:
        factor = check_positive_float("scaling['factor']", params["factor"])
        if factor < 1:
            raise ValueError(f"scaling['factor'] must be >= 1 (it extends the context), got {factor}")
    if "original_max_position_embeddings" in params:
        check_int("scaling['original_max_position_embeddings']", params["original_max_position_embeddings"])
    return rope_type, params


def _yarn(inv_freq: torch.Tensor, head_dim: int, base: float, params: dict) -> tuple[torch.Tensor, float]:
    """YaRN (Peng et al. 2023): interpolate low frequencies, keep high ones, ramp in between."""
    factor = float(params["factor"])
    original_len = params["original_max_position_embeddings"]
    beta_fast = params.get("beta_fast") or 32
    beta_slow = params.get("beta_slow") or 1

    def mscale(scale: float, coefficient: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * coefficient * math.log(scale) + 1.0

    attention_factor = params.get("attention_factor")
    if attention_factor is None:
        if params.get("mscale") and params.get("mscale_all_dim"):
            attention_factor = mscale(factor, params["mscale"]) / mscale(factor, params["mscale_all_dim"])
        else:
            attention_factor = mscale(factor)

    def pair_index_with(rotations: float) -> float:
        # The (fractional) pair index whose wavelength fits `rotations` times into the original context.
        return head_dim * math.log(original_len / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = pair_index_with(beta_fast), pair_index_with(beta_slow)
    if params.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    # The upper clamp copies Hugging Face (head_dim - 1); it never binds, since the ramp below runs over
    # pair indices 0 .. head_dim//2 - 1 and clamps to [0, 1] anyway.
    low, high = max(low, 0), min(high, head_dim - 1)
    if low == high:
        high += 0.001  # avoid dividing by zero in the ramp
    ramp = ((torch.arange(head_dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    keep = 1 - ramp  # 1 for high-frequency pairs (kept as trained), 0 for low ones (interpolated)
    inv_freq = (inv_freq / factor) * (1 - keep) + inv_freq * keep
    return inv_freq, float(attention_factor)


def _llama3(inv_freq: torch.Tensor, params: dict) -> torch.Tensor:
    """Llama 3.1: divide long wavelengths by factor, keep short ones, blend smoothly in between."""
    factor = float(params["factor"])
    low_freq_factor, high_freq_factor = float(params["low_freq_factor"]), float(params["high_freq_factor"])
    if high_freq_factor < low_freq_factor:
        raise ValueError(f"scaling['high_freq_factor'] must be >= scaling['low_freq_factor'], "
                         f"got {high_freq_factor} < {low_freq_factor}")
    original_len = params["original_max_position_embeddings"]
    low_freq_wavelen = original_len / low_freq_factor
    high_freq_wavelen = original_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    if high_freq_factor == low_freq_factor:
        # Llama 4 Scout's published settings (low = high = 1): the blend band is empty, so every pair is
        # either kept or divided by factor (Hugging Face gives the same numbers).
        return scaled
    smooth = (original_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium = (wavelen >= high_freq_wavelen) & (wavelen <= low_freq_wavelen)
    return torch.where(is_medium, blended, scaled)


def rope_frequencies(head_dim: int, *, base: float = 10000.0, scaling: dict | None = None,
                     seq_len: int | None = None) -> tuple[torch.Tensor, float]:
    """Inverse frequencies of RoPE, optionally rescaled to extend the context window.

    Args:
        head_dim: features per head, a positive even integer.
        base: the frequency base ("rope_theta"), > 0.
        scaling: ``None`` for plain RoPE, or a Hugging Face style dict with ``"rope_type"`` one of
            ``"default"``, ``"linear"`` (factor: position interpolation, Chen et al. 2023),
            ``"ntk"`` (factor: NTK-aware base change, ``base * factor**(d/(d-2))``; posenc's static form,
            Hugging Face has no such type),
            ``"dynamic"`` (factor, original_max_position_embeddings: NTK base change grown with seq_len),
            ``"yarn"`` (factor, original_max_position_embeddings, optional beta_fast=32, beta_slow=1,
            attention_factor, mscale, mscale_all_dim, truncate=True), or ``"llama3"`` (factor,
            low_freq_factor <= high_freq_factor, original_max_position_embeddings; equal factors, as in
            Llama 4 Scout, leave the blend band empty).
        seq_len: current sequence length, used only by ``"dynamic"`` (defaults to the original length).

    Returns:
        ``(inv_freq, attention_scale)``: ``inv_freq`` has shape ``[head_dim // 2]`` (float32);
        ``attention_scale`` is the factor YaRN multiplies into cos and sin (1.0 for the other types).
    """
    head_dim = check_even("head_dim", head_dim)
    base = check_positive_float("base", base)
    rope_type, params = _parse_scaling(scaling, base)
    if seq_len is not None:
        seq_len = check_int("seq_len", seq_len)
    if rope_type in ("ntk", "dynamic") and head_dim < 4:
        raise ValueError(f"rope_type {rope_type!r} needs head_dim >= 4, got {head_dim}")

    if rope_type == "ntk":
        base = base * float(params["factor"]) ** (head_dim / (head_dim - 2))
    elif rope_type == "dynamic":
        factor, original_len = float(params["factor"]), params["original_max_position_embeddings"]
        length = max(seq_len or original_len, original_len)
        base = base * (factor * length / original_len - (factor - 1)) ** (head_dim / (head_dim - 2))

    inv_freq = default_inv_freq(head_dim, base)
    if rope_type == "linear":
        return inv_freq / float(params["factor"]), 1.0
    if rope_type == "yarn":
        return _yarn(inv_freq, head_dim, base, params)
    if rope_type == "llama3":
        return _llama3(inv_freq, params), 1.0
    return inv_freq, 1.0
