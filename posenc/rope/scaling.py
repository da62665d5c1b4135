"""RoPE's frequencies and the schemes that rescale them to extend the context window.

``rope_frequencies(head_dim, base=..., scaling=...)`` returns ``(inv_freq, attention_scale)``. The scaling
dicts follow Hugging Face's ``rope_scaling`` (v4) / ``rope_parameters`` (v5) format: ``rope_theta`` may sit
inside the dict, ``partial_rotary_factor`` may come with any type, and ``rope_parameters_for`` picks one
layer type's dict out of v5's nested per-layer-type form. For every type Hugging Face has, the numbers equal
``transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS`` (or a model's ``compute_default_rope_parameters``
for ``"default"``) for the same settings (the tests check). ``ntk`` is posenc's own *static* NTK-aware base
change (Hugging Face's ``dynamic`` type applies the same change, grown with the sequence length).

Two ways to rotate part of a head, easy to confuse (the tests check both against Hugging Face):

- ``partial_rotary_factor`` p with any type but ``"proportional"`` (GPT-NeoX, Phi, GLM, Qwen3-Next): the
  rotary dim is ``r = int(head_dim * p)``, ``inv_freq`` has ``r // 2`` entries with exponents over r, and
  ``apply_rope`` rotates the first r features, pairing i with i + r/2.
- ``"proportional"`` (Gemma 4's global layers): ``inv_freq`` keeps ``head_dim // 2`` entries with exponents
  over the *full* head_dim; the first ``int(p * head_dim // 2)`` turn, the rest are 0 (those pairs, i with
  i + head_dim/2, pass unrotated).
"""

from __future__ import annotations

import math
import numbers

import torch

from .._validate import check_choice, check_even, check_int, check_positive_float

# rope_type -> (required keys, optional keys). Every type also takes the keys in COMMON_KEYS.
ROPE_TYPES = {
    "default": ((), ()),
    "linear": (("factor",), ()),
    "ntk": (("factor",), ()),
    # dynamic's original length: posenc's original_max_position_embeddings, or Hugging Face's name for it,
    # max_position_embeddings (HF's dynamic dict holds only factor; the length is config.max_position_embeddings)
    "dynamic": (("factor",), ("original_max_position_embeddings", "max_position_embeddings")),
    "yarn": (("factor", "original_max_position_embeddings"),
             ("beta_fast", "beta_slow", "attention_factor", "mscale", "mscale_all_dim", "truncate")),
    "llama3": (("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
               ("attention_factor",)),
    "longrope": (("short_factor", "long_factor", "original_max_position_embeddings"),
                 ("factor", "attention_factor", "max_position_embeddings")),
    "proportional": (("partial_rotary_factor",), ("factor",)),
}
COMMON_KEYS = ("rope_theta", "partial_rotary_factor")
DEFAULT_BASE = 10000.0


def default_inv_freq(head_dim: int, base: float = DEFAULT_BASE) -> torch.Tensor:
    """``inv_freq[i] = base ** (-2i / head_dim)`` for i < head_dim/2, shape ``[head_dim//2]`` float32.

    Computed in float32 exactly as Hugging Face and Meta's Llama do, so tables match theirs bit for bit.
    """
    return 1.0 / (base ** _exponents(head_dim, head_dim))


def _exponents(rotary_dim: int, over: int) -> torch.Tensor:
    # 2i / over for i < rotary_dim / 2, float32, formed as Hugging Face forms them (int64 arange, then float)
    return torch.arange(0, rotary_dim, 2, dtype=torch.int64).float() / over


def _is_nested(rope_parameters: dict) -> bool:
    # HF v5's per-layer-type form: {"sliding_attention": {...}, "full_attention": {...}}. A flat dict holds
    # numbers, strings and lists (rope_type, factor, short_factor...), never only dicts.
    return bool(rope_parameters) and all(value is None or isinstance(value, dict)
                                         for value in rope_parameters.values())


def rope_parameters_for(rope_parameters: dict, layer_type: str | None = None) -> dict:
    """The flat RoPE dict of one layer type, from Hugging Face v5's nested ``rope_parameters``.

    Args:
        rope_parameters: a flat dict (``{"rope_type": ..., "rope_theta": ...}``), returned unchanged whatever
            ``layer_type`` is (one setting for every layer, as Hugging Face reads it), or a dict nested per
            layer type, e.g. Gemma 3's ``{"sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
            "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6}}``.
        layer_type: the key to pick from a nested dict (Hugging Face's ``config.layer_types`` entries).

    Returns:
        The flat dict, ready for ``rope_frequencies(head_dim, scaling=...)`` / ``RotaryEmbedding``.

    A nested entry that is ``None`` (Hugging Face's mark for a layer type without RoPE) raises: posenc
    reads ``scaling=None`` as plain RoPE, so passing it on would silently rotate a NoPE layer.
    """
    if not isinstance(rope_parameters, dict):
        raise TypeError(f"rope_parameters must be a dict (flat, or nested per layer type), "
                        f"got {type(rope_parameters).__name__}")
    if not _is_nested(rope_parameters):
        return rope_parameters
    layer_types = sorted(rope_parameters)
    if layer_type is None:
        raise ValueError(f"rope_parameters is nested per layer type {layer_types}: pass layer_type, one of them")
    if layer_type not in rope_parameters:
        raise ValueError(f"layer_type={layer_type!r} is not in rope_parameters; it has {layer_types}")
    if rope_parameters[layer_type] is None:
        raise ValueError(f"rope_parameters[{layer_type!r}] is None: Hugging Face's mark for a layer type without "
                         f"RoPE; give such layers no rotary embedding (position 'none')")
    return rope_parameters[layer_type]


def _resolve_base(base, rope_theta) -> float:
    """``base`` if given, else the dict's ``rope_theta``, else 10000; the two must agree when both are given."""
    if rope_theta is not None:
        rope_theta = check_positive_float("scaling['rope_theta']", rope_theta)
    if base is None:
        return DEFAULT_BASE if rope_theta is None else rope_theta
    base = check_positive_float("base", base)
    if rope_theta is not None and rope_theta != base:
        raise ValueError(f"base={base} disagrees with scaling['rope_theta']={rope_theta}; pass one of them "
                         f"(base=None takes rope_theta)")
    return base


def _parse_scaling(scaling, base=None) -> tuple[str, dict, float]:
    """Validate a scaling dict; return its rope_type, its other keys (None values dropped) and the base."""
    if scaling is None:
        return "default", {}, _resolve_base(base, None)
    if not isinstance(scaling, dict):
        raise TypeError(f"scaling must be a dict like {{'rope_type': 'linear', 'factor': 2.0}} or None, "
                        f"got {type(scaling).__name__}")
    if _is_nested(scaling):
        raise ValueError(f"scaling is nested per layer type {sorted(scaling)}; pick one layer type's dict with "
                         f"rope_parameters_for(scaling, layer_type)")
    params = {key: value for key, value in scaling.items() if value is not None}  # HF writes absent keys as null
    rope_type = params.pop("rope_type", params.pop("type", None))  # "type" is HF's legacy key
    if rope_type is None:
        raise ValueError("scaling must contain 'rope_type', one of " + str(sorted(ROPE_TYPES))
                         + " ('default' for plain RoPE)")
    check_choice("scaling['rope_type']", rope_type, ROPE_TYPES)
    base = _resolve_base(base, params.pop("rope_theta", None))
    required, optional = ROPE_TYPES[rope_type]
    missing = [key for key in required if key not in params]
    if missing:
        raise ValueError(f"scaling with rope_type={rope_type!r} is missing {missing}; it needs {list(required)}")
    allowed = list(dict.fromkeys(required + optional + COMMON_KEYS))
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise ValueError(f"scaling with rope_type={rope_type!r} got unknown keys {unknown}; allowed: {allowed}")
    if "factor" in params:
        factor = check_positive_float("scaling['factor']", params["factor"])
        if factor < 1:
            raise ValueError(f"scaling['factor'] must be >= 1 (it extends the context), got {factor}")
    for key in ("original_max_position_embeddings", "max_position_embeddings"):
        if key in params:
            check_int(f"scaling[{key!r}]", params[key])
    if rope_type == "dynamic":
        params = _dynamic_original_length(params)
    if "partial_rotary_factor" in params:
        share = check_positive_float("scaling['partial_rotary_factor']", params["partial_rotary_factor"])
        if share > 1:
            raise ValueError(f"scaling['partial_rotary_factor'] must be in (0, 1] (the share of head_dim that "
                             f"rotates), got {share}")
    return rope_type, params, base


def _dynamic_original_length(params: dict) -> dict:
    """``params`` with dynamic's original length under ``original_max_position_embeddings`` (taken from
    Hugging Face's ``max_position_embeddings`` when only that is given)."""
    original = params.get("original_max_position_embeddings")
    hf_length = params.pop("max_position_embeddings", None)
    if original is None and hf_length is None:
        raise ValueError("scaling with rope_type='dynamic' needs the original length: "
                         "'original_max_position_embeddings', or 'max_position_embeddings' as Hugging Face's "
                         "config names it")
    if original is not None and hf_length is not None and original != hf_length:
        raise ValueError(f"scaling['original_max_position_embeddings']={original} and "
                         f"scaling['max_position_embeddings']={hf_length} disagree; for 'dynamic' both name the "
                         f"original length: pass one")
    params["original_max_position_embeddings"] = original if original is not None else hf_length
    return params


def _rotary_dim(head_dim: int, params: dict) -> int:
    """``int(head_dim * partial_rotary_factor)``: the features that rotate (all of head_dim by default)."""
    share = params.get("partial_rotary_factor", 1.0)
    rotary_dim = int(head_dim * share)
    if rotary_dim < 2 or rotary_dim % 2:
        raise ValueError(f"scaling['partial_rotary_factor']={share} with head_dim={head_dim} gives rotary dim "
                         f"int({head_dim} * {share}) = {rotary_dim}; it must be a positive even number")
    return rotary_dim


def _yarn(inv_freq: torch.Tensor, rotary_dim: int, base: float, params: dict) -> tuple[torch.Tensor, float]:
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
        return rotary_dim * math.log(original_len / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = pair_index_with(beta_fast), pair_index_with(beta_slow)
    if params.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    # The upper clamp copies Hugging Face (rotary_dim - 1); it never binds, since the ramp below runs over
    # pair indices 0 .. rotary_dim//2 - 1 and clamps to [0, 1] anyway.
    low, high = max(low, 0), min(high, rotary_dim - 1)
    if low == high:
        high += 0.001  # avoid dividing by zero in the ramp
    ramp = ((torch.arange(rotary_dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    keep = 1 - ramp  # 1 for high-frequency pairs (kept as trained), 0 for low ones (interpolated)
    # 1 / (factor * base**(2i/d)), formed as Hugging Face forms it (dividing inv_freq by factor can differ
    # in the last bit)
    interpolated = 1.0 / (factor * base ** _exponents(rotary_dim, rotary_dim))
    inv_freq = interpolated * (1 - keep) + inv_freq * keep
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


def _factor_list(key: str, values, n_pairs: int) -> torch.Tensor:
    """``scaling[key]`` (LongRoPE's short_factor / long_factor) as float32 ``[n_pairs]``, all finite and > 0."""
    if isinstance(values, (str, bytes, dict)) or not hasattr(values, "__len__"):
        raise TypeError(f"scaling[{key!r}] must be a list of {n_pairs} numbers, got {type(values).__name__}")
    if not isinstance(values, torch.Tensor) and not all(
            isinstance(v, numbers.Real) and not isinstance(v, bool) for v in values):
        raise TypeError(f"scaling[{key!r}] must be a list of {n_pairs} numbers, got {list(values)[:4]}...")
    factors = torch.as_tensor(values, dtype=torch.float32).cpu()
    if factors.dim() != 1 or factors.numel() != n_pairs:
        raise ValueError(f"scaling[{key!r}] must have rotary_dim // 2 = {n_pairs} entries (one per rotating "
                         f"pair), got shape {tuple(factors.shape)}")
    if not (torch.isfinite(factors).all() and (factors > 0).all()):
        raise ValueError(f"scaling[{key!r}] must hold finite numbers > 0")
    return factors


def _longrope_attention_factor(params: dict) -> float:
    """LongRoPE's cos/sin scale: ``attention_factor`` if given, else ``sqrt(1 + ln s / ln L0)`` (1 if s <= 1).

    The scale s is ``factor``, or (as Hugging Face derives it for Phi-3, whose configs carry no factor)
    ``max_position_embeddings / original_max_position_embeddings``.
    """
    if "attention_factor" in params:
        return check_positive_float("scaling['attention_factor']", params["attention_factor"])
    original_len = params["original_max_position_embeddings"]
    if "factor" in params:
        factor = float(params["factor"])
    elif "max_position_embeddings" in params:
        if params["max_position_embeddings"] < original_len:
            raise ValueError(f"scaling['max_position_embeddings']={params['max_position_embeddings']} must be >= "
                             f"scaling['original_max_position_embeddings']={original_len}")
        factor = params["max_position_embeddings"] / original_len
    else:
        raise ValueError("scaling with rope_type='longrope' needs 'factor', 'attention_factor', or "
                         "'max_position_embeddings' (Hugging Face's factor is then max_position_embeddings / "
                         "original_max_position_embeddings)")
    if factor <= 1:
        return 1.0
    if original_len < 2:
        raise ValueError(f"scaling['original_max_position_embeddings'] must be >= 2 for longrope, got {original_len}")
    return math.sqrt(1 + math.log(factor) / math.log(original_len))


def _longrope(rotary_dim: int, base: float, params: dict, seq_len: int | None) -> tuple[torch.Tensor, float]:
    """LongRoPE (Ding et al. 2024, Phi-3): ``inv_freq[i] = 1 / (factor_i * base ** (2i / rotary_dim))``.

    The long factors apply once ``seq_len`` exceeds the original length, the short ones otherwise.
    """
    short = _factor_list("short_factor", params["short_factor"], rotary_dim // 2)
    long = _factor_list("long_factor", params["long_factor"], rotary_dim // 2)
    use_long = seq_len is not None and seq_len > params["original_max_position_embeddings"]
    factors = long if use_long else short
    return 1.0 / (factors * base ** _exponents(rotary_dim, rotary_dim)), _longrope_attention_factor(params)


def _proportional(head_dim: int, base: float, params: dict) -> torch.Tensor:
    """Gemma 4's proportional RoPE: ``head_dim // 2`` entries, exponents over the full head_dim.

    The first ``int(p * head_dim // 2)`` pairs turn at ``base ** (-2i / head_dim) / factor``; the others
    get 0 (cos 1, sin 0: they pass unrotated).
    """
    share = params["partial_rotary_factor"]
    turning = int(share * head_dim // 2)
    if turning < 1:
        raise ValueError(f"scaling['partial_rotary_factor']={share} with head_dim={head_dim} turns "
                         f"int({share} * {head_dim} // 2) = 0 pairs; it must turn at least one")
    inv_freq = torch.cat((1.0 / (base ** _exponents(2 * turning, head_dim)),
                          torch.zeros(head_dim // 2 - turning)))
    return inv_freq / float(params.get("factor", 1.0))


def rope_frequencies(head_dim: int, *, base: float | None = None, scaling: dict | None = None,
                     seq_len: int | None = None) -> tuple[torch.Tensor, float]:
    """Inverse frequencies of RoPE, optionally rescaled to extend the context window.

    Args:
        head_dim: features per head, a positive even integer.
        base: the frequency base ("rope_theta"), > 0. ``None``: the scaling dict's ``"rope_theta"`` if it
            has one (Hugging Face v5's ``rope_parameters``), else 10000. A base that disagrees with the
            dict's ``rope_theta`` raises.
        scaling: ``None`` for plain RoPE, or a flat Hugging Face style dict (``rope_scaling`` or
            ``rope_parameters``; see ``rope_parameters_for`` for the nested per-layer-type form) with
            ``"rope_type"`` (or the legacy ``"type"``) one of
            ``"default"``,
            ``"linear"`` (factor: position interpolation, Chen et al. 2023),
            ``"ntk"`` (factor: NTK-aware base change, ``base * factor**(r/(r-2))``; posenc's static form,
            Hugging Face has no such type),
            ``"dynamic"`` (factor, original_max_position_embeddings: NTK base change grown with seq_len; the
            original length may instead be given as ``max_position_embeddings``, the Hugging Face config's
            field that its dynamic type reads),
            ``"yarn"`` (factor, original_max_position_embeddings, optional beta_fast=32, beta_slow=1,
            attention_factor, mscale, mscale_all_dim, truncate=True),
            ``"llama3"`` (factor, low_freq_factor <= high_freq_factor, original_max_position_embeddings;
            equal factors, as in Llama 4 Scout, leave the blend band empty; optional attention_factor,
            which Llama 3 does not use: posenc takes it so that a study can give Llama 3's bands YaRN's
            temperature and separate YaRN's interpolation from its temperature),
            ``"longrope"`` (short_factor, long_factor: one per rotating pair; original_max_position_embeddings;
            optional factor, attention_factor, max_position_embeddings: see below), or
            ``"proportional"`` (partial_rotary_factor, optional factor: Gemma 4's global layers).
            Any type may carry ``"rope_theta"`` (see ``base``) and ``"partial_rotary_factor"`` p in (0, 1]:
            then only ``r = int(head_dim * p)`` features rotate (r must be even) and every formula runs over r
            instead of head_dim, as in Hugging Face; for ``"proportional"`` p means something else (module
            docstring). Keys set to ``None`` count as absent.
        seq_len: current sequence length, used by ``"dynamic"`` (defaults to the original length) and
            ``"longrope"`` (long factors when ``seq_len > original_max_position_embeddings``, else short).

    Returns:
        ``(inv_freq, attention_scale)``: ``inv_freq`` float32 of shape ``[r // 2]`` (``[head_dim // 2]`` without
        partial_rotary_factor, and always for ``"proportional"``, whose non-turning pairs get 0);
        ``attention_scale`` is the factor YaRN and LongRoPE multiply into cos and sin (1.0 for the other
        types, but for ``"llama3"`` with an ``attention_factor``). LongRoPE's is ``attention_factor`` if given, else ``sqrt(1 + ln s / ln L0)`` with ``L0`` the
        original length and ``s`` the factor, or ``max_position_embeddings / L0`` when there is no factor
        (what Hugging Face does with Phi-3's configs).
    """
    head_dim = check_even("head_dim", head_dim)
    rope_type, params, base = _parse_scaling(scaling, base)
    if seq_len is not None:
        seq_len = check_int("seq_len", seq_len)
    if rope_type == "proportional":
        return _proportional(head_dim, base, params), 1.0
    rotary_dim = _rotary_dim(head_dim, params)
    if rope_type in ("ntk", "dynamic") and rotary_dim < 4:
        raise ValueError(f"rope_type {rope_type!r} needs a rotary dim >= 4, got {rotary_dim} (head_dim={head_dim})")

    if rope_type == "ntk":
        base = base * float(params["factor"]) ** (rotary_dim / (rotary_dim - 2))
    elif rope_type == "dynamic":
        factor, original_len = float(params["factor"]), params["original_max_position_embeddings"]
        length = max(seq_len or original_len, original_len)
        base = base * (factor * length / original_len - (factor - 1)) ** (rotary_dim / (rotary_dim - 2))
    elif rope_type == "longrope":
        return _longrope(rotary_dim, base, params, seq_len)

    inv_freq = default_inv_freq(rotary_dim, base)
    if rope_type == "linear":
        return inv_freq / float(params["factor"]), 1.0
    if rope_type == "yarn":
        return _yarn(inv_freq, rotary_dim, base, params)
    if rope_type == "llama3":
        scale = params.get("attention_factor")
        return _llama3(inv_freq, params), 1.0 if scale is None else check_positive_float(
            "scaling['attention_factor']", scale)
    return inv_freq, 1.0
