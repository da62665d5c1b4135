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
values), recurrent and state-space models without attention (``mamba``, ``mamba2``, ``rwkv``, ...), bidirectional
encoders (``modernbert``), attention logit soft-capping (``gemma2``), Qwen's dual chunk attention, and any
``layer_types`` entry other than full, sliding or chunked attention.

Hybrids: ``hybrid_layers(config)`` says what each layer of a 2025-26 hybrid does with position, one dict per
decoder layer, ``{"index", "layer_type", "mixer", "position"}``: the config's own name for the layer, the
mechanism, and its positional scheme with the config's numbers. posenc has no linear-attention, state-space or
convolution layer checked against transformers, so ``plan_from_hf_config`` refuses these families with a
``ValueError`` naming the first layer it cannot build (index, ``layer_type``, mechanism) and how many layers of
each kind the config has. Read from transformers 5.23's configuration and modeling files:

- ``qwen3_next``, ``qwen3_5`` (its ``qwen3_5_text``; ``qwen3_5_moe`` too): ``layer_types`` (every
  ``full_attention_interval``-th layer full): Gated DeltaNet (data-dependent decay + causal conv of
  ``linear_conv_kernel_dim`` on q, k, v), or attention with RoPE on ``partial_rotary_factor`` of each head (Qwen3.5:
  interleaved M-RoPE) and an output gate.
- ``kimi_linear``: ``layer_types`` (from ``linear_attn_config``): KDA (channel-wise decay + short conv), or
  multi-head latent attention with no rotation at all (NoPE).
- ``minimax``: ``layer_types``: lightning attention (a fixed per-head decay, ALiBi-like slopes scaled by depth), or
  softmax attention with RoPE. The model rotates ``rotary_dim`` features of each head (MiniMax-Text-01: 64 of 128,
  as its model card and vLLM's port have it); transformers' port ignores ``rotary_dim`` and rotates the whole head.
  This reader describes the port, and says so when the file's ``rotary_dim`` is smaller than the head.
- ``granitemoehybrid``, ``nemotron_h``, ``jamba``, ``bamba``: ``layers_block_type`` (Granite's ``layer_types``,
  Nemotron-H's ``hybrid_override_pattern``, Jamba's ``attn_layer_period``/``offset``, Bamba's
  ``attn_layer_indices``): Mamba-2 (Jamba: Mamba) with a causal conv, or attention: NoPE (Granite 4.0-H's
  ``position_embedding_type: "nope"``, Nemotron-H, Jamba) or RoPE on half of each head (Bamba). Nemotron-H also
  has MLP and mixture-of-experts layers, which mix no tokens.
- ``falcon_h1``: every layer ``hybrid``: attention with RoPE (Falcon-H1-0.5B's file: base 1e11) beside Mamba-2.
- ``lfm2``: ``layer_types`` (from ``full_attn_idxs``): a gated short convolution over ``conv_L_cache`` tokens, or
  attention with RoPE.
- ``zamba2``: ``layers_block_type``: Mamba-2, or ``hybrid``: a shared attention block (RoPE if ``use_mem_rope``)
  feeding that layer's Mamba-2.

For a family plan_from_hf_config reads, ``hybrid_layers`` gives softmax attention on every layer with its
``LayerSpec.describe()``.

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
(``tests/test_hf_families.py``). Grouped key/value heads, RMSNorm, SwiGLU and untied embeddings are
``TransformerLM`` options (``posenc.gqa``, ``posenc.norms``, ``posenc.feedforward``), which
``posenc.load_pretrained`` sets from a Llama config beside the plan read here.
"""

from __future__ import annotations

import copy
import warnings
from collections import Counter
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

# Composite (multimodal) model_types whose text config is one of the families above (or of the hybrids below).
_TEXT_CONFIG_OF = {"llama4": "llama4_text", "gemma3": "gemma3_text", "qwen3_5": "qwen3_5_text",
                   "qwen3_5_moe": "qwen3_5_moe_text"}

_MLA = ("multi-head latent attention: RoPE on a decoupled qk_rope_head_dim slice beside a compressed key-value "
        "cache, and YaRN's mscale squared in the softmax scale, which a LayerSpec cannot express; build it with "
        "posenc.mla.MultiHeadLatentAttention")
_NOT_ATTENTION = "layers that are not softmax attention (linear attention, recurrences or state-space models)"
# Hybrids (``_HYBRIDS``, at the end of this file) are refused by plan_from_hf_config with the first layer it cannot
# build; pure recurrent and state-space models, with no attention layer at all, keep this one sentence.
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
    "mamba": _NOT_ATTENTION,
    "mamba2": _NOT_ATTENTION,
    "zamba": _NOT_ATTENTION,
    "falcon_mamba": _NOT_ATTENTION,
    "recurrent_gemma": _NOT_ATTENTION,
    "rwkv": _NOT_ATTENTION,
    "xlstm": _NOT_ATTENTION,
}


def _require_transformers():
    try:
        with warnings.catch_warnings():  # its tqdm.auto warns in a Jupyter kernel without ipywidgets
            warnings.filterwarnings("ignore", message="IProgress not found")
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
    if model_type not in _FAMILIES and model_type not in _TEXT_CONFIG_OF and model_type not in _HYBRIDS:
        supported = sorted(_FAMILIES) + sorted(key for key, text in _TEXT_CONFIG_OF.items() if text in _FAMILIES)
        raise ValueError(f"config.model_type={model_type!r} is not one posenc has checked against transformers' "
                         f"attention; supported: {supported}")


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
    if rope_type == "llama3" and "attention_factor" in params:  # review P4-n4
        raise ValueError(f"config.rope_parameters['attention_factor']={params['attention_factor']} with "
                         f"rope_type='llama3': transformers ignores it (its llama3 rule scales cos and sin by "
                         f"1.0) and posenc would apply it; drop the key, or build the Rope yourself")
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
    dict as published); see the module docstring for the families read and those refused. A hybrid (Qwen3-Next,
    Mamba hybrids, ...) raises ``ValueError`` naming its first layer that is not softmax attention; ``hybrid_layers``
    describes its layers."""
    outer = _config_object(config)
    config = _text_config(outer)
    if config.model_type in _HYBRIDS:
        raise _hybrid_refusal(config, outer.model_type)
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


# ---- hybrids: what each layer does with position ------------------------------------------------------------------
# The 2025-26 hybrids mix softmax attention with linear-attention, state-space or convolution layers. posenc has no
# such layer checked against transformers, so plan_from_hf_config refuses them; hybrid_layers says what each layer
# does with position. Each reader names where transformers 5.23's configuration and modeling files decide it.

_ATTENTION_MIXERS = ("softmax attention", "multi-head latent attention")
_KIND = {  # mixer -> what kind of layer it is, for the refusal
    "Gated DeltaNet": "linear attention",
    "KDA": "linear attention",
    "lightning attention": "linear attention",
    "Mamba": "a state-space model",
    "Mamba-2": "a state-space model",
    "short convolution": "a convolution",
    "MLP": "no token mixing",
    "mixture of experts": "no token mixing",
    "softmax attention + Mamba-2 in parallel": "attention beside a state-space model",
    "shared softmax attention, then Mamba-2": "attention feeding a state-space model",
}
_NO_TOKEN_MIXING = "none: the layer mixes no tokens"
_SELECTIVE = "data-dependent decay (selective state space)"


def _num(value) -> str:
    """A base as the position text writes it: 1e7 as ``1e7``, 10000 as ``1e4``, 5e5 as ``5e5``, 8192 as ``8192``."""
    value = float(value)
    if value < 1e4:
        return f"{value:g}"
    mantissa, exponent = f"{value:e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"


def _rope_text(params: dict, partial: bool = True, name: str = "RoPE") -> str:
    """``RoPE on 25% of each head (partial_rotary_factor 0.25), base 1e7`` from a flat ``rope_parameters``;
    ``partial=False`` where the family's rotary embedding turns the whole head whatever the factor says."""
    factor = params.get("partial_rotary_factor", 1.0) if partial else 1.0
    share = "the whole head" if factor == 1.0 else f"{factor * 100:g}% of each head (partial_rotary_factor {factor:g})"
    text = f"{name} on {share}, base {_num(params['rope_theta'])}"
    rope_type = params.get("rope_type", "default")
    return text if rope_type == "default" else f"{text}, {rope_type} scaling"


def _recurrence(decay: str, width: int, inputs: str = "", alone: bool = True) -> str:
    """``<decay> + causal conv of width 4 on q, k, v; no positional encoding`` (that last clause only if ``alone``:
    the layer has no attention beside it)."""
    return f"{decay} + causal conv of width {width}{inputs}" + ("; no positional encoding" if alone else "")


def _layers(config, attribute: str, kinds: dict) -> list[tuple]:
    """``[(layer_type, mixer, position)]``, one per entry of ``config.<attribute>``, each looked up in ``kinds``
    (``{layer_type: (mixer, position)}``; a position may be a function of the layer index)."""
    rows = []
    for i, layer_type in enumerate(getattr(config, attribute)):
        if layer_type not in kinds:
            raise ValueError(f"config.{attribute}[{i}]={layer_type!r} is not a layer {config.model_type} builds; "
                             f"allowed: {sorted(kinds)}")
        mixer, position = kinds[layer_type]
        rows.append((layer_type, mixer, position(i) if callable(position) else position))
    return rows


def _gated_deltanet(config) -> list[tuple]:
    """Qwen3-Next, Qwen3.5 (and Qwen3.5-MoE): ``layer_types`` chooses Gated DeltaNet or full attention
    (modeling_qwen3_next.py Qwen3NextDecoderLayer; configuration_qwen3_next.py turns ``full_attention_interval`` n
    into full attention on every nth layer). Gated DeltaNet convolves q, k, v over ``linear_conv_kernel_dim`` tokens
    (Qwen3NextGatedDeltaNet.conv1d). Full attention rotates ``partial_rotary_factor`` of each head and gates its
    output (Qwen3NextAttention: ``attn_output * torch.sigmoid(gate)``); Qwen3.5 rotates with interleaved M-RoPE
    (modeling_qwen3_5.py Qwen3_5TextRotaryEmbedding: ``mrope_section``)."""
    params = config.rope_parameters
    name = "RoPE" if config.model_type == "qwen3_next" else \
        f"interleaved M-RoPE (mrope_section {params.get('mrope_section', [11, 11, 10])})"
    linear = _recurrence("data-dependent decay (gated delta rule)", config.linear_conv_kernel_dim, " on q, k, v")
    return _layers(config, "layer_types", {"linear_attention": ("Gated DeltaNet", linear),
                                           "full_attention": ("softmax attention",
                                                              _rope_text(params, name=name) + ", output gate")})


def _kimi_linear(config) -> list[tuple]:
    """Kimi Linear: ``layer_types`` (from the file's 1-based ``linear_attn_config`` lists, configuration_kimi_linear.py)
    chooses KDA or MLA (modeling_kimi_linear.py KimiLinearDecoderLayer). KDA convolves q, k, v over
    ``linear_conv_kernel_dim`` (``short_conv_kernel_size``) tokens; KimiLinearAttention rotates nothing: no rotary
    embedding, the ``qk_rope_head_dim`` slice of each key included (the files' ``mla_use_nope``)."""
    kda = _recurrence("channel-wise data-dependent decay (Kimi delta rule)", config.linear_conv_kernel_dim,
                      " on q, k, v")
    nope = f"none (NoPE): no rotary embedding, not even on the qk_rope_head_dim {config.qk_rope_head_dim} slice"
    return _layers(config, "layer_types", {"linear_attention": ("KDA", kda),
                                           "full_attention": ("multi-head latent attention", nope)})


def _minimax(config) -> list[tuple]:
    """MiniMax-01: ``layer_types`` chooses lightning or softmax attention (modeling_minimax.py MiniMaxDecoderLayer).
    Lightning attention decays by a fixed ``exp(-s (i - j))``, per head s = 2^(-8h/H), times 1 - layer/(L - 1)
    (MiniMaxLightningAttention.get_slope_rate). Softmax attention, as transformers ports it, rotates the whole head:
    MiniMaxRotaryEmbedding reads neither ``partial_rotary_factor`` nor a file's ``rotary_dim``, although the model
    itself rotates only ``rotary_dim`` features (MiniMax-Text-01: 64 of 128); the row reports the port's scheme and
    flags the difference. ``sliding_window`` applies to every one."""
    heads, n_layers = config.num_attention_heads, config.num_hidden_layers
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    full = _rope_text(config.rope_parameters, partial=False)
    rotary_dim = getattr(config, "rotary_dim", None)
    if rotary_dim and rotary_dim != head_dim:
        full += f" ({head_dim} features: transformers ignores the file's rotary_dim {rotary_dim})"
    if config.sliding_window:
        full += f", window {config.sliding_window}"

    def lightning(i):
        depth = 1 - i / (n_layers - 1 + 1e-5) + 1e-5
        return (f"fixed decay exp(-s (i - j)), per head s = 2^(-8h/{heads}) x {depth:.3g} (h = 1..{heads}); "
                f"no positional encoding")

    return _layers(config, "layer_types", {"linear_attention": ("lightning attention", lightning),
                                           "full_attention": ("softmax attention", full)})


def _granite_hybrid(config) -> list[tuple]:
    """Granite 4.0-H: ``layers_block_type`` (the file's ``layer_types``; transformers renames ``mamba`` and
    ``attention``) chooses a Mamba-2 mixer or attention (modeling_granitemoehybrid.py GraniteMoeHybridDecoderLayer).
    Attention rotates only if ``position_embedding_type == "rope"`` (GraniteMoeHybridModel.rotary_emb)."""
    if config.position_embedding_type == "rope":
        attention = _rope_text(config.rope_parameters, partial=False)
    else:
        attention = f"none (NoPE, position_embedding_type {config.position_embedding_type!r})"
    return _layers(config, "layers_block_type",
                   {"linear_attention": ("Mamba-2", _recurrence(_SELECTIVE, config.mamba_d_conv)),
                    "full_attention": ("softmax attention", attention)})


def _nemotron_h(config) -> list[tuple]:
    """Nemotron-H: ``layers_block_type`` (from ``hybrid_override_pattern``, M * - E) chooses each block's one mixer
    (modeling_nemotron_h.py MIXER_TYPES): Mamba-2 convolving over ``conv_kernel`` tokens, attention without
    rotation (NemotronHAttention), an MLP or a mixture of experts."""
    return _layers(config, "layers_block_type",
                   {"linear_attention": ("Mamba-2", _recurrence(_SELECTIVE, config.conv_kernel)),
                    "full_attention": ("softmax attention", "none (NoPE)"),
                    "mlp": ("MLP", _NO_TOKEN_MIXING), "moe": ("mixture of experts", _NO_TOKEN_MIXING)})


def _falcon_h1(config) -> list[tuple]:
    """Falcon-H1: every layer is ``hybrid`` (configuration_falcon_h1.py ``layers_block_type``): attention with RoPE
    on the whole head beside a Mamba-2 mixer, outputs summed (modeling_falcon_h1.py FalconH1DecoderLayer)."""
    rope = _rope_text(config.rope_parameters, partial=False)
    mamba = _recurrence(_SELECTIVE, config.mamba_d_conv, alone=False)
    return _layers(config, "layers_block_type", {"hybrid": ("softmax attention + Mamba-2 in parallel",
                                                            f"attention: {rope}; Mamba-2: {mamba}")})


def _jamba(config) -> list[tuple]:
    """Jamba: ``layers_block_type`` (attention where i % ``attn_layer_period`` == ``attn_layer_offset``) chooses a
    Mamba mixer or attention without rotation (modeling_jamba.py ALL_DECODER_LAYER_TYPES, JambaAttention)."""
    return _layers(config, "layers_block_type",
                   {"mamba": ("Mamba", _recurrence(_SELECTIVE, config.mamba_d_conv)),
                    "attention": ("softmax attention", "none (NoPE)")})


def _bamba(config) -> list[tuple]:
    """Bamba: ``layers_block_type`` (attention on ``attn_layer_indices``) chooses a Mamba-2 mixer or attention with
    RoPE on ``partial_rotary_factor`` of each head, 0.5 by default (modeling_bamba.py BambaDecoderLayer)."""
    return _layers(config, "layers_block_type",
                   {"linear_attention": ("Mamba-2", _recurrence(_SELECTIVE, config.mamba_d_conv)),
                    "full_attention": ("softmax attention", _rope_text(config.rope_parameters))})


def _lfm2(config) -> list[tuple]:
    """LFM2: ``layer_types`` (attention on ``full_attn_idxs``) chooses a gated short convolution over
    ``conv_L_cache`` tokens or attention with RoPE on the whole head (modeling_lfm2.py Lfm2DecoderLayer,
    Lfm2ShortConv)."""
    conv = (f"gated causal conv over the last {config.conv_L_cache} tokens (conv_L_cache {config.conv_L_cache}); "
            f"no positional encoding")
    return _layers(config, "layer_types", {"conv": ("short convolution", conv),
                                           "full_attention": ("softmax attention",
                                                              _rope_text(config.rope_parameters, partial=False))})


def _zamba2(config) -> list[tuple]:
    """Zamba2: ``layers_block_type`` chooses a Mamba-2 layer or a ``hybrid`` one: one of ``num_mem_blocks`` shared
    attention blocks, whose output feeds that layer's Mamba-2 (modeling_zamba2.py Zamba2HybridLayer). The shared
    attention rotates the whole head only if ``use_mem_rope`` (Zamba2Attention)."""
    attention = _rope_text(config.rope_parameters, partial=False) if config.use_mem_rope else \
        "none (NoPE, use_mem_rope false)"
    mamba = _recurrence(_SELECTIVE, config.mamba_d_conv, alone=False)
    return _layers(config, "layers_block_type",
                   {"linear_attention": ("Mamba-2", _recurrence(_SELECTIVE, config.mamba_d_conv)),
                    "hybrid": ("shared softmax attention, then Mamba-2",
                               f"attention: {attention}; Mamba-2: {mamba}")})


_HYBRIDS = {  # text model_type -> reader
    "qwen3_next": _gated_deltanet,
    "qwen3_5_text": _gated_deltanet,
    "qwen3_5_moe_text": _gated_deltanet,
    "kimi_linear": _kimi_linear,
    "minimax": _minimax,
    "granitemoehybrid": _granite_hybrid,
    "nemotron_h": _nemotron_h,
    "falcon_h1": _falcon_h1,
    "jamba": _jamba,
    "bamba": _bamba,
    "lfm2": _lfm2,
    "zamba2": _zamba2,
}


def _hybrid_refusal(config, model_type: str) -> ValueError:
    """The ``ValueError`` plan_from_hf_config raises for a hybrid: its first layer that is not softmax attention,
    with what that layer is, and how many layers of each kind the config has."""
    rows = _HYBRIDS[config.model_type](config)
    name = repr(model_type) + ("" if model_type == config.model_type else f" (text config {config.model_type!r})")
    tally = ", ".join(f"{n} {layer_type} ({mixer})" for (layer_type, mixer), n in
                      Counter((layer_type, mixer) for layer_type, mixer, _ in rows).items())
    first = next((i for i, row in enumerate(rows) if row[1] not in _ATTENTION_MIXERS), None)
    if first is None:
        problem = "its attention has not been checked against transformers'"
    else:
        layer_type, mixer, _ = rows[first]
        problem = (f"layer {first} (layer_type {layer_type!r}) is {mixer} ({_KIND[mixer]}), which posenc has no "
                   f"layer for")
    return ValueError(f"config.model_type={name} cannot be expressed as a posenc plan: {problem}; its {len(rows)} "
                      f"layers are {tally}. posenc.hybrid_layers(config) describes what each layer does with position")


def hybrid_layers(config) -> list[dict]:
    """What each decoder layer of a Hugging Face config does with position (a transformers >= 5 config object, or a
    ``config.json`` dict as published, read as plan_from_hf_config reads it).

    Returns one dict per layer: ``{"index": i, "layer_type": ..., "mixer": ..., "position": ...}``. ``layer_type``
    is the config's own name for the layer (after transformers' renaming of legacy names: Granite's ``mamba`` is
    ``linear_attention``), ``mixer`` the mechanism (``"Gated DeltaNet"``, ``"Mamba-2"``, ``"softmax attention"``,
    ...), ``position`` what it does with position, with the config's numbers (``"RoPE on 25% of each head
    (partial_rotary_factor 0.25), base 1e7, output gate"``, ``"none (NoPE)"``, ``"data-dependent decay (gated delta
    rule) + causal conv of width 4 on q, k, v; no positional encoding"``). A family plan_from_hf_config reads comes
    back as softmax attention on every layer, ``position`` its ``LayerSpec.describe()``; the families it refuses
    for other reasons (multi-head latent attention, ...) raise its ``ValueError``."""
    config = _text_config(_config_object(config))
    if config.model_type in _HYBRIDS:
        rows = _HYBRIDS[config.model_type](config)
    else:
        plan = plan_from_hf_config(config)
        rows = [(layer_type, "softmax attention", spec.describe())
                for layer_type, spec in zip(_layer_types(config, len(plan)), plan)]
    return [{"index": i, "layer_type": layer_type, "mixer": mixer, "position": position}
            for i, (layer_type, mixer, position) in enumerate(rows)]
