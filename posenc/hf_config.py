"""Read a Hugging Face model config as a posenc plan: what each layer does with position.

``plan_from_hf_config(config)`` returns one ``posenc.plan.LayerSpec`` per layer from the config's
``layer_types``, ``rope_parameters`` (flat, or nested per layer type as in transformers v5),
``sliding_window``, ``attention_chunk_size``, ``no_rope_layers`` and the family-specific switches. A
transformers 4.x ``config.json`` (``rope_scaling`` beside a top-level ``rope_theta``) reads the same:

- ``llama4`` (``llama4_text``): ``no_rope_layers[i]`` (1 = RoPE), ``attention_chunk_size``,
  ``attn_temperature_tuning``, ``floor_scale``, ``attn_scale``; interleaved pairs. RoPE layers with a
  ``chunk``, NoPE layers with a ``Temperature``.
- ``gemma3`` (``gemma3_text``): ``layer_types``, nested ``rope_parameters``, ``sliding_window``,
  ``query_pre_attn_scalar``. RoPE per layer type, a ``window`` on sliding layers, ``softmax_scale``.
- ``cohere2``: ``layer_types``; RoPE only on the sliding layers, interleaved pairs. RoPE + ``window`` on
  sliding layers, NoPE on the others.
- ``gpt_oss``: ``layer_types``, ``sliding_window``, learned ``sinks``. RoPE + ``window`` + ``sinks``.
- ``smollm3``: ``no_rope_layers[i]`` (1 = RoPE), ``use_sliding_window``. RoPE or NoPE.
- anything else (llama, qwen2, mistral, phi3, ...): ``rope_parameters`` (``partial_rotary_factor``
  included). RoPE everywhere.

It covers position only: a posenc ``MultiHeadAttention`` also assumes ``head_dim = hidden_size /
num_attention_heads``, as many key-value heads as query heads and no query/key norms, so the equality
tests build their Hugging Face models that way (``tests/test_hf_families.py``).
"""

from __future__ import annotations

from .plan import LayerSpec, Rope, Temperature
from .rope.scaling import rope_parameters_for

INTERLEAVED_FAMILIES = ("llama4", "llama4_text", "cohere", "cohere2")  # pairs (2i, 2i+1)
ROPE_ON_SLIDING_ONLY = ("cohere2",)


def _get(config, name, default=None):
    return config.get(name, default) if isinstance(config, dict) else getattr(config, name, default)


def _legacy_rope_parameters(config) -> dict:
    """transformers 4.x configs: ``rope_scaling`` (or None) beside a top-level ``rope_theta``."""
    params = dict(_get(config, "rope_scaling") or {"rope_type": "default"})
    if _get(config, "rope_theta") is not None:
        params.setdefault("rope_theta", _get(config, "rope_theta"))
    if _get(config, "partial_rotary_factor") is not None:
        params.setdefault("partial_rotary_factor", _get(config, "partial_rotary_factor"))
    return params


def plan_from_hf_config(config) -> list[LayerSpec]:
    """One ``LayerSpec`` per layer of a Hugging Face config (object or dict), see the module docstring."""
    model_type = _get(config, "model_type", "")
    n_layers = _get(config, "num_hidden_layers")
    if not isinstance(n_layers, int) or n_layers < 1:
        raise ValueError(f"config.num_hidden_layers must be a positive integer, got {n_layers!r}")
    layer_types = _get(config, "layer_types") or ["full_attention"] * n_layers
    no_rope_layers = _get(config, "no_rope_layers")  # llama4 and smollm3: 1 means the layer USES RoPE
    rope_parameters = _get(config, "rope_parameters") or _legacy_rope_parameters(config)
    head_dim = _get(config, "head_dim") or _get(config, "hidden_size") // _get(config, "num_attention_heads")
    pre_attn = _get(config, "query_pre_attn_scalar")
    softmax_scale = None if pre_attn is None or pre_attn == head_dim else float(pre_attn) ** -0.5
    interleaved = model_type in INTERLEAVED_FAMILIES
    plan = []
    for i, layer_type in enumerate(layer_types):
        uses_rope = True
        if no_rope_layers is not None:
            uses_rope = bool(no_rope_layers[i])
        if model_type in ROPE_ON_SLIDING_ONLY:
            uses_rope = layer_type == "sliding_attention"
        window = chunk = temperature = None
        if layer_type == "sliding_attention" and (model_type != "smollm3" or _get(config, "use_sliding_window")):
            window = _get(config, "sliding_window")
        if layer_type == "chunked_attention":
            chunk = _get(config, "attention_chunk_size")
        if not uses_rope and _get(config, "attn_temperature_tuning"):
            temperature = Temperature(floor_scale=_get(config, "floor_scale"), scale=_get(config, "attn_scale"))
        rope = None
        if uses_rope:
            params = dict(rope_parameters_for(rope_parameters, layer_type))
            partial = _get(config, "partial_rotary_factor")
            if partial not in (None, 1.0) and "partial_rotary_factor" not in params:
                params["partial_rotary_factor"] = partial
            if params.get("rope_type") == "longrope" and "factor" not in params:
                params["max_position_embeddings"] = _get(config, "max_position_embeddings")  # HF derives factor
            rope = Rope(scaling=params, interleaved=interleaved)
        plan.append(LayerSpec("rope" if uses_rope else "none", rope=rope, window=window, chunk=chunk,
                              temperature=temperature, sinks=model_type == "gpt_oss", softmax_scale=softmax_scale))
    return plan
