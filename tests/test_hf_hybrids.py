"""hybrid_layers and plan_from_hf_config on the 2025-26 hybrids (linear-attention, state-space and convolution
layers beside softmax attention).

Each config below is a published ``config.json`` (or the part of it about layers and position), written out as a
literal with where it was copied from; there is no network here, so the copies come from public repositories that
quote the files. Three independent readings check ``hybrid_layers``:

- the layer kinds by index against the model transformers builds from the same dict (on the meta device: no
  weights, no memory), read off the class of each layer's modules, and against the published layer pattern
  written out here by hand;
- the numbers in the position text (RoPE base, rotated share, convolution width) against the published values,
  and the rotated share and the convolution width against the rotary embedding and the ``Conv1d`` transformers
  builds;
- ``plan_from_hf_config``'s refusal against the first layer and the layer counts of the published pattern.
"""

from __future__ import annotations

import copy
import re

import pytest
import torch

transformers = pytest.importorskip("transformers")

from posenc import hybrid_layers  # noqa: E402
from posenc.hf_config import plan_from_hf_config  # noqa: E402

# Qwen/Qwen3-Next-80B-A3B-Instruct. The layer and linear-attention keys as a public trimmed copy of its config.json
# has them (a test in the code index); partial_rotary_factor 0.25 and rope_theta 1e7 as the issue quotes the file.
# The keys left out (head_dim 256, num_key_value_heads 2, ...) are Qwen3NextConfig's defaults: not verified here.
QWEN3_NEXT_80B = {
    "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "num_hidden_layers": 48,
    "num_attention_heads": 16, "hidden_size": 2048, "num_experts": 512, "full_attention_interval": 4,
    "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_conv_kernel_dim": 4,
    "partial_rotary_factor": 0.25, "rope_theta": 10000000,
}

# A published qwen3_5 config.json: the text_config of mlx-community/Qwen3.8-27B-4bit (revision 3e6447f0) as a public
# test writes it out (its 64-entry layer_types left out there, as here: full_attention_interval gives it). Its shape
# is Qwen/Qwen3.5-27B's as another public port describes that model (64 layers, 24 heads, 4 KV heads, head_dim 256,
# rope_theta 1e7, partial_rotary_factor 0.25, every 4th layer full). vision_config is left out (class defaults).
QWEN3_5_27B = {
    "architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5", "image_token_id": 248056,
    "tie_word_embeddings": False, "video_token_id": 248057, "vision_end_token_id": 248054,
    "vision_start_token_id": 248053,
    "text_config": {
        "attention_bias": False, "attention_dropout": 0.0, "attn_output_gate": True, "bos_token_id": 248044,
        "dtype": "bfloat16", "eos_token_id": 248044, "full_attention_interval": 4, "head_dim": 256,
        "hidden_act": "silu", "hidden_size": 5120, "initializer_range": 0.02, "intermediate_size": 17408,
        "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_num_key_heads": 16,
        "linear_num_value_heads": 48, "linear_value_head_dim": 128, "mamba_ssm_dtype": "float32",
        "max_position_embeddings": 262144, "model_type": "qwen3_5_text", "mtp_num_hidden_layers": 1,
        "mtp_use_dedicated_embeddings": False, "num_attention_heads": 24, "num_hidden_layers": 64,
        "num_key_value_heads": 4, "output_gate_type": "swish", "pad_token_id": None, "partial_rotary_factor": 0.25,
        "rms_norm_eps": 1e-06,
        "rope_parameters": {"mrope_interleaved": True, "mrope_section": [11, 11, 10], "partial_rotary_factor": 0.25,
                            "rope_theta": 10000000, "rope_type": "default"},
        "tie_word_embeddings": False, "use_cache": True, "vocab_size": 248320,
    },
}

# moonshotai/Kimi-Linear-48B-A3B-Instruct config.json, the keys several public copies agree on (code index: a Rust
# loader test and two Python packages pinning the file's fields). linear_attn_config's layer lists are 1-based.
KIMI_LINEAR_48B = {
    "architectures": ["KimiLinearForCausalLM"], "model_type": "kimi_linear", "hidden_size": 2304,
    "intermediate_size": 9216, "num_hidden_layers": 27, "num_attention_heads": 32, "num_key_value_heads": 32,
    "hidden_act": "silu", "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "vocab_size": 163840,
    "tie_word_embeddings": False, "kv_lora_rank": 512, "q_lora_rank": None, "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64, "v_head_dim": 128, "mla_use_nope": True,
    "linear_attn_config": {"full_attn_layers": [4, 8, 12, 16, 20, 24, 27], "head_dim": 128,
                           "kda_layers": [1, 2, 3, 5, 6, 7, 9, 10, 11, 13, 14, 15, 17, 18, 19, 21, 22, 23, 25, 26],
                           "num_heads": 32, "short_conv_kernel_size": 4},
    "num_experts": 256, "num_experts_per_token": 8, "num_shared_experts": 1, "moe_intermediate_size": 1024,
    "moe_renormalize": True, "routed_scaling_factor": 2.446, "num_expert_group": 1, "topk_group": 1,
    "first_k_dense_replace": 1, "moe_layer_freq": 1, "num_nextn_predict_layers": 0,
}

# MiniMaxAI/MiniMax-Text-01-hf, as a public mlx-lm development file quotes its config (code index); it agrees with
# transformers' model doc (80 layers, a softmax layer after every 7 lightning ones, 64 heads of 128, RoPE base 1e7).
# The doc and rotary_dim say RoPE turns half of each head; transformers' MiniMaxRotaryEmbedding turns all of it.
MINIMAX_TEXT_01 = {
    "model_type": "minimax",
    "layer_types": (["linear_attention"] * 7 + ["full_attention"]) * 10,
    "head_dim": 128, "hidden_size": 6144, "intermediate_size": 9216,
    "full_attn_alpha_factor": 3.5565588200778455, "full_attn_beta_factor": 1.0,
    "linear_attn_alpha_factor": 3.5565588200778455, "linear_attn_beta_factor": 1.0,
    "mlp_alpha_factor": 3.5565588200778455, "mlp_beta_factor": 1.0, "max_position_embeddings": 10240000,
    "num_attention_heads": 64, "num_experts_per_tok": 2, "num_hidden_layers": 80, "num_key_value_heads": 8,
    "num_local_experts": 32, "postnorm": True, "rms_norm_eps": 1e-05, "rope_theta": 10000000, "rotary_dim": 64,
    "shared_intermediate_size": 0, "shared_moe_mode": "sigmoid", "sliding_window": None,
    "tie_word_embeddings": False, "vocab_size": 200064,
}

# ibm-granite/granite-4.0-h-350m config.json as a public Rust test quotes it (code index), less its MLX
# "quantization" key. Attention on layers 10, 13, 17 and 27; position_embedding_type "nope".
GRANITE_4_H_350M = {
    "model_type": "granitemoehybrid", "attention_bias": False, "attention_multiplier": 0.015625,
    "embedding_multiplier": 12, "eos_token_id": 100257, "hidden_size": 768, "intermediate_size": 2048,
    "logits_scaling": 3,
    "layer_types": ["mamba"] * 10 + ["attention"] + ["mamba"] * 2 + ["attention"] + ["mamba"] * 3 + ["attention"]
                   + ["mamba"] * 9 + ["attention"] + ["mamba"] * 4,
    "mamba_conv_bias": True, "mamba_d_conv": 4, "mamba_d_head": 32, "mamba_d_state": 128, "mamba_n_groups": 1,
    "mamba_n_heads": 48, "mamba_proj_bias": False, "max_position_embeddings": 32768, "num_attention_heads": 12,
    "num_experts_per_tok": 0, "num_hidden_layers": 32, "num_key_value_heads": 4, "num_local_experts": 0,
    "position_embedding_type": "nope", "residual_multiplier": 0.246, "rms_norm_eps": 1e-05, "rope_theta": 10000,
    "shared_intermediate_size": 2048, "tie_word_embeddings": True, "vocab_size": 100352,
}

# nvidia/Nemotron-H-8B-Base-8K config.json as NVIDIA's Megatron-Bridge tests write it out (code index), less auto_map.
# hybrid_override_pattern: M = Mamba-2, * = attention, - = MLP.
NEMOTRON_H_8B = {
    "architectures": ["NemotronHForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "attention_head_dim": 128, "bos_token_id": 1, "chunk_size": 128, "conv_kernel": 4, "eos_token_id": 2,
    "expand": 2, "hidden_act": "relu2", "hidden_dropout": 0.0, "hidden_size": 4096,
    "hybrid_override_pattern": "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-", "initializer_range": 0.02,
    "intermediate_size": 21504, "layer_norm_epsilon": 1e-05, "mamba_head_dim": 64, "mamba_hidden_act": "silu",
    "mamba_num_heads": 128, "mamba_proj_bias": False, "max_position_embeddings": 8192, "mlp_bias": False,
    "mlp_hidden_act": "relu2", "model_type": "nemotron_h", "n_groups": 8, "num_attention_heads": 32,
    "num_hidden_layers": 52, "num_key_value_heads": 8, "num_logits_to_keep": 1, "pad_token_id": 0,
    "rescale_prenorm_residual": True, "residual_in_fp32": False, "rms_norm_eps": 1e-05, "ssm_state_size": 128,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.48.0.dev0",
    "use_bias": False, "use_cache": True, "use_conv_bias": True, "use_mamba_kernels": True, "vocab_size": 131072,
}

# tiiuae/Falcon-H1-0.5B config.json as NVIDIA's Megatron-Bridge tests write it out (FALCON_H1_500M_CONFIG, code
# index). rope_theta 1e11; every layer runs attention and Mamba-2 side by side. The quote has no mamba_d_ssm: 1536 is
# mamba_n_heads x mamba_d_head, what the same bridge writes back (megatron_to_hf_config) and the one value
# FalconH1Config accepts with these heads (its default, 1024, is not a multiple of 24).
FALCON_H1_05B = {
    "architectures": ["FalconH1ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "attention_in_multiplier": 1.0, "attention_out_multiplier": 0.9375, "attn_layer_indices": None,
    "embedding_multiplier": 5.656854249492381, "head_dim": 64, "hidden_act": "silu", "hidden_size": 1024,
    "initializer_range": 0.02, "intermediate_size": 2048, "key_multiplier": 0.39062499999999994,
    "lm_head_multiplier": 0.0390625, "mamba_chunk_size": 128, "mamba_conv_bias": True, "mamba_d_conv": 4,
    "mamba_d_head": 64, "mamba_d_ssm": 1536, "mamba_d_state": 128, "mamba_expand": 2, "mamba_n_groups": 1,
    "mamba_n_heads": 24,
    "mamba_norm_before_gate": False, "mamba_proj_bias": False, "mamba_rms_norm": False, "mamba_use_mlp": True,
    "max_position_embeddings": 16384, "mlp_bias": False, "mlp_multipliers": [0.8838834764831844, 0.5859375],
    "model_type": "falcon_h1", "num_attention_heads": 8, "num_hidden_layers": 36, "num_key_value_heads": 2,
    "projectors_bias": False, "rms_norm_eps": 1e-5, "rope_scaling": None, "rope_theta": 100000000000.0,
    "ssm_in_multiplier": 1.25,
    "ssm_multipliers": [0.3535533905932738, 0.25, 0.3535533905932738, 0.5, 0.3535533905932738],
    "ssm_out_multiplier": 0.23570226039551587, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "vocab_size": 32784,
}

# ai21labs/Jamba-v0.1 config.json, trimmed as a public test quotes it (code index): attention every 8 layers from
# layer 4. The keys left out are JambaConfig's defaults.
JAMBA_V01 = {
    "architectures": ["JambaForCausalLM"], "model_type": "jamba", "hidden_size": 4096, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 8, "attn_layer_offset": 4, "attn_layer_period": 8,
    "expert_layer_offset": 1, "expert_layer_period": 2, "mamba_d_conv": 4, "mamba_d_state": 16, "mamba_expand": 2,
    "num_experts": 16,
}

# ibm-ai-platform/Bamba-9B, trimmed as a public test quotes it (code index): attention on layers 9, 18 and 27. The
# file's rope_theta and mamba_d_conv are not in the quote: BambaConfig's defaults (1e4 and 4) stand in, unverified.
BAMBA_9B = {
    "model_type": "bamba", "num_hidden_layers": 32, "num_attention_heads": 32, "hidden_size": 4096,
    "mamba_d_state": 128, "attn_layer_indices": [9, 18, 27],
}

# LiquidAI/LFM2-350M config.json, trimmed as a public Rust test quotes it (code index), less its MLX
# "quantization" key: attention on layers 2, 5, 8, 10, 12 and 14, short convolutions of 3 tokens elsewhere.
LFM2_350M = {
    "model_type": "lfm2", "vocab_size": 65536, "hidden_size": 1024, "num_hidden_layers": 16,
    "num_attention_heads": 16, "num_key_value_heads": 8, "max_position_embeddings": 128000, "norm_eps": 1e-05,
    "conv_bias": False, "conv_L_cache": 3, "rope_theta": 1000000.0, "full_attn_idxs": [2, 5, 8, 10, 12, 14],
    "eos_token_id": 7, "block_dim": 1024, "block_ff_dim": 6656,
}

# Zyphra/Zamba2-7B config.json (transformers 4.43.0.dev0, Zyphra's fork), as a public benchmark file writes it out
# (code index). Its Mamba keys use the fork's names (conv_dimension, state_size, ...), which transformers 5's
# Zamba2Config does not read: mamba_d_conv stays the class default, 4, which is also the file's conv_dimension.
_ZAMBA2_7B_BLOCKS = (["mamba"] * 6 + ["hybrid"] + ["mamba"] * 4 + ["hybrid"] + (["mamba"] * 5 + ["hybrid"]) * 11
                     + ["mamba"] * 3)
ZAMBA2_7B = {
    "add_bias_linear": False, "architectures": ["Zamba2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1,
    "conv_dimension": 4, "eos_token_id": 2, "expansion_factor": 2, "ffn_hidden_size": 14336, "ft_lora": False,
    "gated_linear_unit": True, "hidden_size": 3584, "initializer_range": 0.02, "kv_channels": 112,
    "layers_block_type": _ZAMBA2_7B_BLOCKS, "lora_rank": 128, "mamba_headdim": 64, "mamba_ngroups": 2,
    "max_position_embeddings": 4096, "model_type": "zamba2", "num_attention_heads": 32, "num_hidden_layers": 81,
    "num_key_value_heads": 32, "num_logits_to_keep": 1, "num_mem_blocks": 2, "num_query_groups": 32,
    "pad_token_id": 0, "rms_norm_eps": 1e-05, "rope_theta": 10000, "sliding_window": None, "state_size": 64,
    "torch_dtype": "bfloat16", "transformers_version": "4.43.0.dev0", "use_cache": True, "use_mamba_kernels": True,
    "use_mem_rope": True, "use_shared_attention_lora": False, "use_shared_block_lora": True, "vocab_size": 32000,
}


def _pattern(n_layers, special, special_kind, other_kind):
    """The published layer pattern: ``special_kind`` on the indices in ``special``, ``other_kind`` elsewhere."""
    return [special_kind if i in special else other_kind for i in range(n_layers)]


# The published pattern of each, written from the model's own description (not from posenc or transformers):
# (config, [mixer of layer i], first layer that is not softmax attention, {(layer_type, mixer): count}).
GDN, ATT = "Gated DeltaNet", "softmax attention"
CASES = {
    "qwen3_next": (QWEN3_NEXT_80B, _pattern(48, range(3, 48, 4), ATT, GDN), 0,
                   {("linear_attention", GDN): 36, ("full_attention", ATT): 12}),
    "qwen3_5": (QWEN3_5_27B, _pattern(64, range(3, 64, 4), ATT, GDN), 0,
                {("linear_attention", GDN): 48, ("full_attention", ATT): 16}),
    "kimi_linear": (KIMI_LINEAR_48B, _pattern(27, [3, 7, 11, 15, 19, 23, 26], "multi-head latent attention", "KDA"),
                    0, {("linear_attention", "KDA"): 20, ("full_attention", "multi-head latent attention"): 7}),
    "minimax": (MINIMAX_TEXT_01, _pattern(80, range(7, 80, 8), ATT, "lightning attention"), 0,
                {("linear_attention", "lightning attention"): 70, ("full_attention", ATT): 10}),
    "granitemoehybrid": (GRANITE_4_H_350M, _pattern(32, [10, 13, 17, 27], ATT, "Mamba-2"), 0,
                         {("linear_attention", "Mamba-2"): 28, ("full_attention", ATT): 4}),
    "nemotron_h": (NEMOTRON_H_8B, [{"M": "Mamba-2", "*": ATT, "-": "MLP"}[c]
                                   for c in "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-"], 0,
                   {("linear_attention", "Mamba-2"): 24, ("mlp", "MLP"): 24, ("full_attention", ATT): 4}),
    "falcon_h1": (FALCON_H1_05B, ["softmax attention + Mamba-2 in parallel"] * 36, 0,
                  {("hybrid", "softmax attention + Mamba-2 in parallel"): 36}),
    "jamba": (JAMBA_V01, _pattern(32, [4, 12, 20, 28], ATT, "Mamba"), 0,
              {("mamba", "Mamba"): 28, ("attention", ATT): 4}),
    "bamba": (BAMBA_9B, _pattern(32, [9, 18, 27], ATT, "Mamba-2"), 0,
              {("linear_attention", "Mamba-2"): 29, ("full_attention", ATT): 3}),
    "lfm2": (LFM2_350M, _pattern(16, [2, 5, 8, 10, 12, 14], ATT, "short convolution"), 0,
             {("conv", "short convolution"): 10, ("full_attention", ATT): 6}),
    "zamba2": (ZAMBA2_7B, _pattern(81, [6, 11, *range(17, 81, 6)], "shared softmax attention, then Mamba-2", "Mamba-2"),
               0,
               {("linear_attention", "Mamba-2"): 68, ("hybrid", "shared softmax attention, then Mamba-2"): 13}),
}

# transformers' module classes, named by reading each modeling file (the class docstrings say which are Mamba-2).
MIXER_CLASSES = {
    "Qwen3NextGatedDeltaNet": GDN, "Qwen3NextAttention": ATT, "Qwen3_5GatedDeltaNet": GDN, "Qwen3_5Attention": ATT,
    "KimiLinearDeltaAttention": "KDA", "KimiLinearAttention": "multi-head latent attention",
    "MiniMaxLightningAttention": "lightning attention", "MiniMaxAttention": ATT,
    "GraniteMoeHybridMambaLayer": "Mamba-2", "GraniteMoeHybridAttention": ATT,
    "NemotronHMamba2Mixer": "Mamba-2", "NemotronHAttention": ATT, "NemotronHMLP": "MLP",
    "NemotronHMoE": "mixture of experts",
    "FalconH1Mixer": "Mamba-2", "FalconH1Attention": ATT,
    "JambaMambaMixer": "Mamba", "JambaAttention": ATT,
    "BambaMixer": "Mamba-2", "BambaAttention": ATT,
    "Lfm2ShortConv": "short convolution", "Lfm2Attention": ATT,
    "Zamba2MambaMixer": "Mamba-2", "Zamba2Attention": ATT,
}
# Layers holding attention and Mamba-2 both: Falcon-H1 runs them side by side, Zamba2 feeds one into the other.
BOTH = {"falcon_h1": "softmax attention + Mamba-2 in parallel", "zamba2": "shared softmax attention, then Mamba-2"}


def _config(published):
    """transformers' own reading of a published dict (its text config for a composite one)."""
    fields = {key: value for key, value in copy.deepcopy(published).items() if key != "model_type"}
    config = transformers.AutoConfig.for_model(published["model_type"], **fields)
    return config.get_text_config(decoder=True)


_BUILT = {}


def _built(family):
    """transformers' base model for the family's published config, built on the meta device (no weights)."""
    if family not in _BUILT:
        with torch.device("meta"):
            _BUILT[family] = transformers.AutoModel.from_config(_config(CASES[family][0]))
    return _BUILT[family]


def _built_mixers(family) -> list[str]:
    """The mixer of each layer of transformers' model, read off its modules' classes."""
    mixers = []
    for layer in _built(family).layers:
        found = {MIXER_CLASSES[type(module).__name__] for module in layer.modules()
                 if type(module).__name__ in MIXER_CLASSES}
        if "mixture of experts" in found:
            found = {"mixture of experts"}  # its shared expert is a NemotronHMLP
        if found == {ATT, "Mamba-2"}:
            found = {BOTH[family]}
        assert len(found) == 1, f"{family}: a layer with modules of several kinds: {found}"
        mixers.append(found.pop())
    return mixers


def _number(pattern, text):
    match = re.search(pattern, text)
    assert match, f"{pattern!r} not in {text!r}"
    return float(match.group(1))


@pytest.mark.parametrize("family", sorted(CASES))
def test_layer_kinds_follow_the_published_pattern_and_transformers_model(family):
    published, mixers, _, _ = CASES[family]
    layers = hybrid_layers(published)
    assert [layer["index"] for layer in layers] == list(range(len(mixers)))
    assert [layer["mixer"] for layer in layers] == mixers
    assert _built_mixers(family) == mixers


@pytest.mark.parametrize("family", sorted(CASES))
def test_a_config_object_reads_as_its_dict(family):
    published = CASES[family][0]
    outer = transformers.AutoConfig.for_model(published["model_type"],
                                              **{k: v for k, v in published.items() if k != "model_type"})
    assert hybrid_layers(outer) == hybrid_layers(published)


@pytest.mark.parametrize("family", sorted(CASES))
def test_layer_types_are_the_config_names_transformers_builds_from(family):
    config = _config(CASES[family][0])
    # each modeling file picks a layer's class from one list; Jamba's (layers_block_type) keeps 'mamba'/'attention'
    attribute = "layers_block_type" if family == "jamba" else "layer_types"
    assert [layer["layer_type"] for layer in hybrid_layers(CASES[family][0])] == list(getattr(config, attribute))


def _rotated_share(family) -> float | None:
    """The share of each head transformers' rotary embedding turns (None: the model has none)."""
    model = _built(family)
    rotary = getattr(model, "rotary_emb", None)
    if rotary is None:
        return None
    config = _config(CASES[family][0])
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return 2 * rotary.inv_freq.numel() / head_dim


def _conv_width(family, index) -> int:
    widths = {module.kernel_size[0] for module in _built(family).layers[index].modules()
              if isinstance(module, torch.nn.Conv1d)}
    assert len(widths) == 1
    return widths.pop()


# (family, the published RoPE base or None for NoPE, the published rotated share, the published conv width)
POSITIONS = [
    ("qwen3_next", QWEN3_NEXT_80B["rope_theta"], QWEN3_NEXT_80B["partial_rotary_factor"],
     QWEN3_NEXT_80B["linear_conv_kernel_dim"]),
    ("qwen3_5", QWEN3_5_27B["text_config"]["rope_parameters"]["rope_theta"],
     QWEN3_5_27B["text_config"]["partial_rotary_factor"], QWEN3_5_27B["text_config"]["linear_conv_kernel_dim"]),
    ("kimi_linear", None, None, KIMI_LINEAR_48B["linear_attn_config"]["short_conv_kernel_size"]),
    ("minimax", MINIMAX_TEXT_01["rope_theta"], 1.0, None),
    ("granitemoehybrid", None, None, GRANITE_4_H_350M["mamba_d_conv"]),
    ("nemotron_h", None, None, NEMOTRON_H_8B["conv_kernel"]),
    ("falcon_h1", FALCON_H1_05B["rope_theta"], 1.0, FALCON_H1_05B["mamba_d_conv"]),
    ("jamba", None, None, JAMBA_V01["mamba_d_conv"]),
    ("bamba", "config", 0.5, "config"),  # 0.5: configuration_bamba.py hard-codes it; the rest from class defaults
    ("lfm2", LFM2_350M["rope_theta"], 1.0, LFM2_350M["conv_L_cache"]),
    ("zamba2", ZAMBA2_7B["rope_theta"], 1.0, ZAMBA2_7B["conv_dimension"]),
]


@pytest.mark.parametrize("family, base, share, width", POSITIONS)
def test_position_numbers_are_the_published_values(family, base, share, width):
    published, mixers, _, _ = CASES[family]
    config = _config(published)
    if base == "config":
        base, width = config.rope_parameters["rope_theta"], config.mamba_d_conv
    layers = hybrid_layers(published)
    attention = [layer["position"] for layer in layers
                 if "softmax attention" in layer["mixer"] or layer["mixer"] == "multi-head latent attention"]
    recurrent = [layer for layer in layers if layer["mixer"] not in (ATT, "multi-head latent attention", "MLP")]
    assert attention
    for text in attention:
        if base is None:
            assert text.startswith("none (NoPE")
            continue
        assert _number(r"base ([0-9.e]+)", text) == base
        if share == 1.0:
            assert "RoPE on the whole head" in text
        else:
            assert _number(r"on ([0-9.]+)% of each head", text) == share * 100
            assert _number(r"partial_rotary_factor ([0-9.]+)", text) == share
    assert _rotated_share(family) == share
    for layer in recurrent:
        if width is not None:
            pattern = r"last (\d+) tokens" if family == "lfm2" else r"conv of width (\d+)"
            assert _number(pattern, layer["position"]) == width
            assert _conv_width(family, layer["index"]) == width


def test_qwen3_5_rotates_with_the_published_mrope_sections():
    layer = hybrid_layers(QWEN3_5_27B)[3]
    assert "interleaved M-RoPE (mrope_section [11, 11, 10])" in layer["position"]
    assert layer["position"].endswith("output gate")
    assert hybrid_layers(QWEN3_NEXT_80B)[3]["position"].endswith("output gate")


def test_minimax_lightning_decay_slopes_scale_with_depth():
    # modeling_minimax.py get_slope_rate: 2^(-8h/H) * (1 - layer / (L - 1 + 1e-5) + 1e-5), H = 64, L = 80
    layers = hybrid_layers(MINIMAX_TEXT_01)
    for i in (0, 1, 40, 78):
        text = layers[i]["position"]
        assert "2^(-8h/64)" in text and "no positional encoding" in text
        assert _number(r"x ([0-9.e-]+) \(h", text) == pytest.approx(1 - i / (80 - 1 + 1e-5) + 1e-5, rel=5e-3)
    assert "rotary_dim 64" in layers[7]["position"]  # the file's 64 is not what transformers turns


@pytest.mark.parametrize("family", sorted(CASES))
def test_plan_from_hf_config_names_the_first_layer_it_cannot_build(family):
    published, mixers, first, counts = CASES[family]
    config = _config(published)
    attribute = "layers_block_type" if family == "jamba" else "layer_types"
    layer_type = getattr(config, attribute)[first]
    with pytest.raises(ValueError) as error:
        plan_from_hf_config(published)
    message = str(error.value)
    assert f"config.model_type='{published['model_type']}'" in message
    assert f"layer {first} (layer_type '{layer_type}') is {mixers[first]}" in message
    for (kind, mixer), n in counts.items():
        assert f"{n} {kind} ({mixer})" in message
    assert sum(counts.values()) == len(mixers)
    assert "hybrid_layers(config)" in message


def test_the_refusal_names_a_later_first_layer():
    qwen = dict(QWEN3_NEXT_80B, num_hidden_layers=6,
                layer_types=["full_attention", "full_attention", "linear_attention", "full_attention",
                             "linear_attention", "full_attention"])
    with pytest.raises(ValueError, match=r"layer 2 \(layer_type 'linear_attention'\) is Gated DeltaNet "
                                         r"\(linear attention\).*4 full_attention \(softmax attention\), "
                                         r"2 linear_attention \(Gated DeltaNet\)"):
        plan_from_hf_config(qwen)
    bamba = dict(BAMBA_9B, num_hidden_layers=4, attn_layer_indices=[0, 1])
    with pytest.raises(ValueError, match=r"layer 2 \(layer_type 'linear_attention'\) is Mamba-2 "
                                         r"\(a state-space model\)"):
        plan_from_hf_config(bamba)
    lfm2 = dict(LFM2_350M, num_hidden_layers=2, full_attn_idxs=[0, 1])  # all attention: still not checked
    with pytest.raises(ValueError, match=r"its attention has not been checked.*2 full_attention"):
        plan_from_hf_config(lfm2)


def test_a_layer_type_the_family_does_not_build_is_refused():
    config = _config(QWEN3_NEXT_80B)
    config.layer_types[1] = "sliding_attention"
    with pytest.raises(ValueError, match=r"config.layer_types\[1\]='sliding_attention' is not a layer qwen3_next"):
        hybrid_layers(config)


def test_families_posenc_reads_come_back_as_softmax_attention():
    config = transformers.AutoConfig.for_model("gemma3_text", num_hidden_layers=6)
    layers = hybrid_layers(config)
    plan = plan_from_hf_config(config)
    assert [layer["mixer"] for layer in layers] == ["softmax attention"] * 6
    assert [layer["layer_type"] for layer in layers] == list(config.layer_types)
    assert [layer["position"] for layer in layers] == [spec.describe() for spec in plan]
    assert "window" in layers[0]["position"] and "window" not in layers[5]["position"]  # 5 local : 1 global


@pytest.mark.parametrize("model_type, reason", [("deepseek_v3", "posenc.mla"), ("mamba", "state-space"),
                                                ("rwkv", "recurrences")])
def test_families_refused_for_other_reasons_keep_their_reason(model_type, reason):
    with pytest.raises(ValueError, match=model_type) as error:
        hybrid_layers(transformers.AutoConfig.for_model(model_type))
    assert reason in str(error.value)
