"""Read a Hugging Face model config as a posenc plan: what each layer does with position.

``plan_from_hf_config(config)`` returns one ``posenc.plan.LayerSpec`` per layer. ``config`` is either a
transformers (5.x) config object or a ``config.json`` as a dict, exactly as published. Most published files
are still in transformers 4.x form: ``rope_scaling`` beside a top-level ``rope_theta``, Gemma 3's
``rope_local_base_freq`` and ``sliding_window_pattern``, Cohere 2's ``sliding_window_pattern``, Phi-3's
top-level ``original_max_position_embeddings``, Llama 4's ``no_rope_layers: []``, and keys left out because
they equal the class defaults. So a dict is never read key by key: it goes through transformers' own config
class (``AutoConfig.for_model(config["model_type"], **config)``), which translates the legacy keys and fills
in the defaults exactly as ``from_pretrained`` does, and the plan is read from that object. Reading a config
therefore needs transformers >= 5 installed (it is not a dependency of posenc itself). A multimodal config
(Llama 4, Gemma 3) is read through its text config: the plan is the text decoder's.

Only families whose attention has been checked against transformers' own layers (``tests/test_hf_families.py``,
a full pass and cached decoding) are read; any other ``model_type`` raises ``ValueError`` rather than
come back as a plausible plan. The families, and what each layer gets:

- ``llama``, ``qwen2``, ``qwen3``: RoPE on every layer (a window on ``sliding_attention`` layers).
- ``mistral``, ``phi3``, ``starcoder2``: RoPE and the model-wide ``sliding_window`` on every layer (these
  configs have no ``layer_types``; Mistral 7B v0.1 and StarCoder2 ship 4096).
- ``gemma3_text`` (``gemma3``): RoPE per layer type (local base 1e4, global 1e6 with the file's scaling), a
  ``window`` on sliding layers, ``softmax_scale`` from ``query_pre_attn_scalar``.
- ``cohere2``: interleaved RoPE + ``window`` on sliding layers, NoPE on the full layers.
- ``exaone4``: RoPE + ``window`` on sliding layers, NoPE on the full ones (RoPE everywhere without a window).
- ``gpt_oss``: RoPE (YaRN) on every layer, ``window`` on sliding layers, learned ``sinks``.
- ``smollm3``: ``no_rope_layers[i]`` (1 = RoPE) chooses RoPE or NoPE.
- ``llama4_text`` (``llama4``): interleaved RoPE with a ``chunk`` on the ``no_rope_layers`` layers, NoPE with
  a ``Temperature`` on the others.
- ``cohere``, ``glm``, ``glm4``: interleaved RoPE on every layer (GLM: on the first half of each head).
- ``gptj``: interleaved RoPE on the first ``rotary_dim`` features, base 10000.

Pairing comes from each family's Hugging Face model code (``_FAMILIES`` names the function): half-split
(i with i + d/2) unless marked interleaved (2i with 2i+1).

Refused, with the reason: multi-head latent attention (``deepseek_v2``, ``deepseek_v3``; use
``posenc.mla``), sparse-attention indexers (``deepseek_v32``), Gemma 3n (layers reuse other layers' keys and
values), linear-attention, recurrent and state-space layers (``qwen3_next``, ``mamba``, ``jamba``, ...),
bidirectional encoders (``modernbert``), attention logit soft-capping (``gemma2``), Qwen's dual chunk
attention, and any ``layer_types`` entry other than full, sliding or chunked attention.

Head width: many configs set ``head_dim`` apart from ``hidden_size / num_attention_heads`` (Gemma 3 4B: 256
against 320; gpt-oss-20b: 64 against 45; Mistral Small 3: 128 against 160), and RoPE's frequencies and the
default softmax scale are computed over the head width. The plan carries it: each ``LayerSpec.head_dim`` is
the config's ``head_dim`` where it differs from ``hidden_size // num_attention_heads`` (None where they
agree), and ``MultiHeadAttention.from_spec`` builds heads of that width (its projections map the model width
to ``num_attention_heads * head_dim`` and back), so a layer built from the plan at the config's
``hidden_size`` and ``num_attention_heads`` rotates over the config's head width, never over
``hidden_size / num_attention_heads``.

Windows follow Hugging Face's convention, which is the plan's: with ``sliding_window = w`` a query at
position i sees the keys j with ``0 <= i - j < w``, itself included (``masking_utils.sliding_window_overlay``:
``kv_idx > q_idx - sliding_window``). Mistral's own v0.1 reference code masks with ``diagonal=-window`` and
lets a query see ``w + 1`` tokens; the plan, and the parity tests, match Hugging Face's port, one token
narrower.

It covers position only: a posenc ``MultiHeadAttention`` also assumes as many key-value heads as query heads
and no query/key norms, so the equality tests build their Hugging Face models that way
(``tests/test_hf_families.py``).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from .plan import LayerSpec, Rope, Temperature
from .rope.scaling import ROPE_TYPES, rope_parameters_for

LAYER_TYPES = ("full_attention", "sliding_attention", "chunked_attention")


@dataclass(frozen=True)
class _Family:
    """What a family's Hugging Face attention does with position, beyond the config's own fields.

    rope_layers: which layers rotate: ``"all"``, ``"no_rope_layers"`` (``config.no_rope_layers[i]`` = 1),
        ``"sliding"`` (sliding layers only), ``"sliding_or_all"`` (sliding layers, or all without a window).
    window_layers: which layers get ``config.sliding_window``: ``"sliding"`` or ``"all"`` (model-wide).
    """

    interleaved: bool = False
    rope_layers: str = "all"
    window_layers: str = "sliding"
    sinks: bool = False


# model_type -> family. The comment names where transformers 5.23's modeling file shows the pairing and,
# where it differs from Llama, which layers rotate and which slide.
_FAMILIES = {
    "llama": _Family(),  # modeling_llama.py rotate_half: x[..., :d/2], x[..., d/2:]
    "qwen2": _Family(),  # modeling_qwen2.py rotate_half; window only on layer_types' sliding layers
    "qwen3": _Family(),  # modeling_qwen3.py rotate_half; window only on layer_types' sliding layers
    "mistral": _Family(window_layers="all"),  # modeling_mistral.py: sliding_window=config.sliding_window, every layer
    "phi3": _Family(window_layers="all"),  # modeling_phi3.py rotate_half, partial; sliding_window on every layer
    "starcoder2": _Family(window_layers="all"),  # modeling_starcoder2.py: sliding_window on every layer
    "gemma3_text": _Family(),  # modeling_gemma3.py rotate_half; per-layer-type rope_parameters
    "gpt_oss": _Family(sinks=True),  # modeling_gpt_oss.py _apply_rotary_emb: torch.chunk(x, 2) halves
    "smollm3": _Family(rope_layers="no_rope_layers"),  # modeling_smollm3.py: if self.use_rope
    "exaone4": _Family(rope_layers="sliding_or_all"),  # modeling_exaone4.py: if sliding_window is None or is_sliding
    # Interleaved pairs (2i, 2i+1):
    "llama4_text": _Family(interleaved=True, rope_layers="no_rope_layers"),  # modeling_llama4.py apply_rotary_emb:
    #   view_as_complex(xq.reshape(..., -1, 2))
    "cohere": _Family(interleaved=True),  # modeling_cohere.py rotate_half: x[..., ::2]; cos/sin repeat_interleave
    "cohere2": _Family(interleaved=True, rope_layers="sliding"),  # modeling_cohere2.py rotate_half: x[..., ::2];
    #   Cohere2Attention.forward rotates only if self.sliding_window is not None
    "glm": _Family(interleaved=True),  # modeling_glm.py rotate_half: x[..., 0::2]; apply_rotary_pos_emb
    #   repeat_interleave(2) over the rotary part
    "glm4": _Family(interleaved=True),  # modeling_glm4.py, as modeling_glm.py
    "gptj": _Family(interleaved=True),  # modeling_gptj.py rotate_every_two: x[..., ::2], x[..., 1::2]
}

# Composite (multimodal) model_types whose text config is one of the families above.
_TEXT_CONFIG_OF = {"llama4": "llama4_text", "gemma3": "gemma3_text"}

_MLA = ("multi-head latent attention: RoPE on a decoupled qk_rope_head_dim slice beside a compressed key-value "
        "cache, and YaRN's mscale squared in the softmax scale, which a LayerSpec cannot express; build it with "
        "posenc.mla.MultiHeadLatentAttention")
_NOT_ATTENTION = "layers that are not softmax attention (linear attention, recurrences or state-space models)"
_REFUSED = {
    "deepseek_v2": _MLA,
    "deepseek_v3": _MLA,
    "deepseek_v32": "multi-head latent attention with a sparse-attention indexer that picks the keys each query "
                    "sees (DeepSeek Sparse Attention)",
    "gemma3n": "its last num_kv_shared_layers layers reuse the keys and values of earlier layers, and its "
               "attention normalises values and uses a softmax scale of 1",
    "gemma3n_text": "its last num_kv_shared_layers layers reuse the keys and values of earlier layers, and its "
                    "attention normalises values and uses a softmax scale of 1",
    "gemma2": "attention logit soft-capping (attn_logit_softcapping), which posenc's attention does not apply",
    "modernbert": "a bidirectional encoder: its local window reaches both ways, while a LayerSpec window is causal",
    "qwen3_next": _NOT_ATTENTION,
    "qwen3_5": _NOT_ATTENTION,
    "kimi_linear": _NOT_ATTENTION,
    "minimax": _NOT_ATTENTION,
    "mamba": _NOT_ATTENTION,
    "mamba2": _NOT_ATTENTION,
    "jamba": _NOT_ATTENTION,
    "bamba": _NOT_ATTENTION,
    "zamba": _NOT_ATTENTION,
    "zamba2": _NOT_ATTENTION,
    "falcon_h1": _NOT_ATTENTION,
    "falcon_mamba": _NOT_ATTENTION,
    "nemotron_h": _NOT_ATTENTION,
    "granitemoehybrid": _NOT_ATTENTION,
    "lfm2": _NOT_ATTENTION,
    "recurrent_gemma": _NOT_ATTENTION,
    "rwkv": _NOT_ATTENTION,
    "xlstm": _NOT_ATTENTION,
}


def _require_transformers():
    try:
        import transformers
    except ImportError as error:
        raise ImportError("plan_from_hf_config reads configs through transformers' own config classes: "
                          "pip install 'transformers>=5'") from error
    if int(transformers.__version__.split(".")[0]) < 5:
        raise ImportError(f"plan_from_hf_config needs transformers >= 5 (its config classes translate published "
                          f"4.x config.json files), found {transformers.__version__}")
    return transformers


def _check_model_type(model_type) -> None:
    if model_type in _REFUSED:
        raise ValueError(f"config.model_type={model_type!r} cannot be expressed as a posenc plan: "
                         f"{_REFUSED[model_type]}")
    if model_type not in _FAMILIES and model_type not in _TEXT_CONFIG_OF:
        raise ValueError(f"config.model_type={model_type!r} is not one posenc has checked against transformers' "
                         f"attention; supported: {sorted(_FAMILIES) + sorted(_TEXT_CONFIG_OF)}")


def _config_object(config):
    """transformers' config object for ``config`` (a dict goes through ``AutoConfig.for_model``)."""
    transformers = _require_transformers()
    if isinstance(config, transformers.PreTrainedConfig):
        _check_model_type(config.model_type)
        return config
    if not isinstance(config, dict):
        raise TypeError(f"config must be a transformers config object or a config.json dict, "
                        f"got {type(config).__name__}")
    if "model_type" not in config:
        raise ValueError("config['model_type'] is missing: pass the whole config.json")
    _check_model_type(config["model_type"])
    config_class = transformers.AutoConfig.for_model(config["model_type"]).__class__
    text = config.get("text_config", config)
    layer_keys = ("num_hidden_layers", config_class.attribute_map.get("num_hidden_layers"))  # GPT-J: n_layer
    if not isinstance(text, dict) or not any(key in text for key in layer_keys):
        raise ValueError("config.num_hidden_layers is missing: pass the whole config.json (a partial dict "
                         "would be completed with the class defaults)")
    fields = {key: value for key, value in copy.deepcopy(config).items() if key != "model_type"}
    _legacy_temperature_tuning(fields)
    _legacy_temperature_tuning(fields.get("text_config"))
    return config_class(**fields)


def _legacy_temperature_tuning(fields) -> None:
    """Llama 4 files saved by transformers 4.51 carry ``"attn_temperature_tuning": 4``: 4.51's class default was
    the int 4, and its attention only tested it for truth (``if self.attn_temperature_tuning and not
    self.use_rope``). transformers 5's ``Llama4TextConfig`` declares it ``bool`` and refuses an int
    (``StrictDataclassFieldValidationError``), so an int is read as the truth value 4.51 gave it."""
    if isinstance(fields, dict):
        value = fields.get("attn_temperature_tuning")
        if isinstance(value, int) and not isinstance(value, bool):
            fields["attn_temperature_tuning"] = bool(value)


def _text_config(config):
    if config.model_type not in _TEXT_CONFIG_OF:
        return config
    text = config.get_text_config(decoder=True)
    _check_model_type(text.model_type)
    return text


def _layer_types(config, n_layers: int) -> list[str]:
    layer_types = list(getattr(config, "layer_types", None) or ["full_attention"] * n_layers)
    if len(layer_types) != n_layers:
        raise ValueError(f"config.layer_types has {len(layer_types)} entries for "
                         f"config.num_hidden_layers={n_layers}")
    for i, layer_type in enumerate(layer_types):
        if layer_type not in LAYER_TYPES:
            raise ValueError(f"config.layer_types[{i}]={layer_type!r} is not attention posenc can build; "
                             f"allowed: {list(LAYER_TYPES)}")
    return layer_types


def _uses_rope(config, family: _Family, i: int, layer_type: str) -> bool:
    if family.rope_layers == "no_rope_layers":
        no_rope_layers = config.no_rope_layers  # 1 means the layer USES RoPE
        if len(no_rope_layers) != config.num_hidden_layers:
            raise ValueError(f"config.no_rope_layers has {len(no_rope_layers)} entries for "
                             f"config.num_hidden_layers={config.num_hidden_layers}")
        return bool(no_rope_layers[i])
    if family.rope_layers == "sliding":
        return layer_type == "sliding_attention" and config.sliding_window is not None
    if family.rope_layers == "sliding_or_all":
        return config.sliding_window is None or layer_type == "sliding_attention"
    return True


def _window(config, family: _Family, layer_type: str) -> int | None:
    if config.model_type == "smollm3" and not config.use_sliding_window:
        return None  # modeling_smollm3.py: config.sliding_window if config.use_sliding_window and sliding
    if family.window_layers == "all" or layer_type == "sliding_attention":
        return getattr(config, "sliding_window", None)
    return None


def _head_dim(config) -> int:
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


def _spec_head_dim(config) -> int | None:
    """``LayerSpec.head_dim``: the config's head width where it is not ``hidden_size // num_attention_heads``."""
    head_dim = _head_dim(config)
    even = config.hidden_size % config.num_attention_heads == 0
    return None if even and head_dim == config.hidden_size // config.num_attention_heads else head_dim


def _rope_parameters(config) -> dict:
    """The config's ``rope_parameters`` (flat or nested per layer type); GPT-J's fixed base and rotary_dim."""
    if config.model_type == "gptj":  # modeling_gptj.py create_sinusoidal_positions: base 10000 over rotary_dim
        params = {"rope_type": "default", "rope_theta": 10000.0}
        if config.rotary_dim is not None and config.rotary_dim != _head_dim(config):
            params["partial_rotary_factor"] = config.rotary_dim / _head_dim(config)
        return params
    return config.rope_parameters


def _rope(config, family: _Family, layer_type: str) -> Rope:
    params = dict(rope_parameters_for(_rope_parameters(config), layer_type))
    rope_type = params.get("rope_type", "default")
    if rope_type not in ROPE_TYPES:
        raise ValueError(f"config.rope_parameters['rope_type']={rope_type!r} is not one posenc implements; "
                         f"allowed: {sorted(ROPE_TYPES)}")
    if params.get("partial_rotary_factor") == 1.0:
        del params["partial_rotary_factor"]
    if rope_type == "longrope" and "factor" not in params:
        params["max_position_embeddings"] = config.max_position_embeddings  # HF derives the factor from it
    if rope_type == "dynamic" and "original_max_position_embeddings" not in params:
        params["max_position_embeddings"] = config.max_position_embeddings  # HF grows dynamic NTK from it
    return Rope(scaling=params, interleaved=family.interleaved)


def _refuse_unsupported_options(config) -> None:
    if getattr(config, "attn_logit_softcapping", None) is not None:
        raise ValueError(f"config.attn_logit_softcapping={config.attn_logit_softcapping} is not applied by "
                         f"posenc's attention")
    if getattr(config, "use_bidirectional_attention", False):
        raise ValueError("config.use_bidirectional_attention is set: posenc's plans are for causal decoders")
    if getattr(config, "dual_chunk_attention_config", None):
        raise ValueError("config.dual_chunk_attention_config is set: dual chunk attention remaps positions "
                         "in a way a plan cannot express")


def plan_from_hf_config(config) -> list[LayerSpec]:
    """One ``LayerSpec`` per layer of a Hugging Face config (transformers >= 5 object, or a ``config.json``
    dict as published); see the module docstring for the families read and those refused."""
    config = _text_config(_config_object(config))
    family = _FAMILIES[config.model_type]
    _refuse_unsupported_options(config)
    n_layers = config.num_hidden_layers
    pre_attn = getattr(config, "query_pre_attn_scalar", None)
    softmax_scale = None if pre_attn is None or pre_attn == _head_dim(config) else float(pre_attn) ** -0.5
    head_dim = _spec_head_dim(config)
    plan = []
    for i, layer_type in enumerate(_layer_types(config, n_layers)):
        uses_rope = _uses_rope(config, family, i, layer_type)
        temperature = None
        if not uses_rope and getattr(config, "attn_temperature_tuning", False):
            temperature = Temperature(floor_scale=config.floor_scale, scale=config.attn_scale)
        chunk = config.attention_chunk_size if layer_type == "chunked_attention" else None
        plan.append(LayerSpec("rope" if uses_rope else "none",
                              rope=_rope(config, family, layer_type) if uses_rope else None,
                              window=_window(config, family, layer_type), chunk=chunk, temperature=temperature,
                              sinks=family.sinks, softmax_scale=softmax_scale, head_dim=head_dim))
    return plan
