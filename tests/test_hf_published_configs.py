"""plan_from_hf_config on published ``config.json`` files, read as published.

Most files on the Hub are still in transformers 4.x form (``rope_scaling`` beside ``rope_theta``, Gemma 3's
``rope_local_base_freq`` and ``sliding_window_pattern``, Llama 4's ``no_rope_layers: []``, keys left out because
they equal the class defaults). Each dict below is a published file (or its ``text_config``) written out as a
literal, with where it was copied from: there is no network here, so the copies come from public repositories
and threads that quote the files. The expected plans are written from the model's published layer pattern,
not from posenc; the files with legacy keys are also checked against Hugging Face's own attention layers,
built from the same dict with small sizes (position keys kept), as ``tests/test_hf_families.py`` does.
"""

from __future__ import annotations

import copy
from collections import Counter

import pytest
import torch
from torch import nn

transformers = pytest.importorskip("transformers")

from posenc import MultiHeadAttention  # noqa: E402
from posenc.hf_config import plan_from_hf_config  # noqa: E402
from posenc.plan import family_plan  # noqa: E402
from hf_layers import check_layer, unit_embeddings  # noqa: E402

# meta-llama/Llama-3.1-8B-Instruct config.json (transformers 4.42.3), as written out in a public test that
# feeds it to a config parser (found in the code index; repository not named there). The keys equal those of
# the printed meta-llama/Llama-3.1-8B config quoted in another public script, but for eos_token_id.
LLAMA_31_8B_INSTRUCT = {
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 128000,
    "eos_token_id": [128001, 128008, 128009], "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
    "intermediate_size": 14336, "max_position_embeddings": 131072, "mlp_bias": False, "model_type": "llama",
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.42.3",
    "use_cache": True, "vocab_size": 128256,
}

# meta-llama/Llama-4-Scout-17B-16E config.json, as quoted (with its Hub URL) in AMD-AGI/Primus pull request 165.
# Saved by transformers 4.51: "no_rope_layers": [] (transformers fills in every 4th layer NoPE). The quote is
# cut off after router_jitter_noise; the keys after it (torch_dtype, use_cache, use_qk_norm, vocab_size,
# vision_config) are left out here, none of them about position. The quote also lacks the three temperature
# keys that other public copies of Scout's text config carry, put back here as they carry them:
# "attn_scale": 0.1, "attn_temperature_tuning": 4 (an int: 4.51's class default) and "floor_scale": 8192 (a
# printed Llama4Config of Llama-4-Scout-17B-16E, transformers 4.51.0, in a public notes file, and the
# config.json of a text-only Scout fine-tune, transformers 4.51.3, quoted in a vLLM bug report; both found in
# the code index). transformers 5's Llama4TextConfig refuses the int 4 (it declares a bool).
LLAMA_4_SCOUT = {
    "architectures": ["Llama4ForConditionalGeneration"], "boi_token_index": 200080, "eoi_token_index": 200081,
    "image_token_index": 200092, "model_type": "llama4",
    "text_config": {
        "attention_bias": False, "attention_chunk_size": 8192, "attention_dropout": 0.0, "attn_scale": 0.1,
        "attn_temperature_tuning": 4, "bos_token_id": 200000, "eos_token_id": [200001, 200007, 200008],
        "floor_scale": 8192, "for_llm_compressor": False, "head_dim": 128, "hidden_act": "silu",
        "hidden_size": 5120, "initializer_range": 0.02, "interleave_moe_layer_step": 1, "intermediate_size": 8192,
        "intermediate_size_mlp": 16384, "max_position_embeddings": 262144, "model_type": "llama4_text",
        "no_rope_layers": [], "num_attention_heads": 40, "num_experts_per_tok": 1, "num_hidden_layers": 48,
        "num_key_value_heads": 8, "num_local_experts": 16, "output_router_logits": False, "pad_token_id": 200018,
        "rms_norm_eps": 1e-05,
        "rope_scaling": {"factor": 16.0, "high_freq_factor": 1.0, "low_freq_factor": 1.0,
                         "original_max_position_embeddings": 8192, "rope_type": "llama3"},
        "rope_theta": 500000.0, "router_aux_loss_coef": 0.001, "router_jitter_noise": 0.0,
    },
}

# google/gemma-3-4b-it config.json (transformers 4.50.0.dev0), vision tower left out. Two independent public
# copies agree (both found in the code index). The text_config names only what differs from the class
# defaults: rope_theta 1e6, rope_local_base_freq 1e4, sliding_window_pattern 6 and query_pre_attn_scalar 256
# come from Gemma3TextConfig.
GEMMA_3_4B = {
    "architectures": ["Gemma3ForConditionalGeneration"], "boi_token_index": 255999, "eoi_token_index": 256000,
    "eos_token_id": [1, 106], "image_token_index": 262144, "initializer_range": 0.02, "mm_tokens_per_image": 256,
    "model_type": "gemma3",
    "text_config": {"hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text",
                    "num_hidden_layers": 34, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
                    "sliding_window": 1024},
    "torch_dtype": "bfloat16", "transformers_version": "4.50.0.dev0",
}

# openai/gpt-oss-20b config.json (transformers 4.55.0.dev0), committed as fms/models/hf/gpt_oss/config.json in
# foundation-model-stack/foundation-model-stack (commit d4a6ded3).
GPT_OSS_20B = {
    "architectures": ["GptOssForCausalLM"], "attention_bias": True, "attention_dropout": 0.0, "eos_token_id": 200002,
    "experts_per_token": 4, "head_dim": 64, "hidden_act": "silu", "hidden_size": 2880, "initial_context_length": 4096,
    "initializer_range": 0.02, "intermediate_size": 2880,
    "layer_types": ["sliding_attention", "full_attention"] * 12,
    "max_position_embeddings": 131072, "model_type": "gpt_oss", "num_attention_heads": 64, "num_experts_per_tok": 4,
    "num_hidden_layers": 24, "num_key_value_heads": 8, "num_local_experts": 32, "output_router_logits": False,
    "pad_token_id": 199999,
    "quantization_config": {"modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                                       "model.embed_tokens", "lm_head"], "quant_method": "mxfp4"},
    "rms_norm_eps": 1e-05,
    "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0, "original_max_position_embeddings": 4096,
                     "rope_type": "yarn", "truncate": False},
    "rope_theta": 150000, "router_aux_loss_coef": 0.9, "sliding_window": 128, "swiglu_limit": 7.0,
    "tie_word_embeddings": False, "transformers_version": "4.55.0.dev0", "use_cache": True, "vocab_size": 201088,
}

# microsoft/Phi-3.5-mini-instruct config.json (transformers 4.46.3), as embedded in a public RoPE benchmark script
# (found in the code index; it adds "_name_or_path" and "auto_map", kept here). The 48 short and 48 long LongRoPE
# factors are the shipped ones; several other public copies carry the same numbers.
PHI_35_MINI_INSTRUCT = {
    "_name_or_path": "microsoft/Phi-3.5-mini-instruct", "architectures": ["Phi3ForCausalLM"],
    "attention_bias": False, "attention_dropout": 0.0,
    "auto_map": {"AutoConfig": "microsoft/Phi-3.5-mini-instruct--configuration_phi3.Phi3Config",
                 "AutoModelForCausalLM": "microsoft/Phi-3.5-mini-instruct--modeling_phi3.Phi3ForCausalLM"},
    "bos_token_id": 1, "embd_pdrop": 0.0, "eos_token_id": 32000, "hidden_act": "silu", "hidden_size": 3072,
    "initializer_range": 0.02, "intermediate_size": 8192, "max_position_embeddings": 131072, "model_type": "phi3",
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
    "original_max_position_embeddings": 4096, "pad_token_id": 32000, "resid_pdrop": 0.0, "rms_norm_eps": 1e-05,
    "rope_scaling": {
        "long_factor": [
            1.0800000429153442, 1.1100000143051147, 1.1399999856948853, 1.340000033378601, 1.5899999141693115,
            1.600000023841858, 1.6200000047683716, 2.620000123977661, 3.2300000190734863, 3.2300000190734863,
            4.789999961853027, 7.400000095367432, 7.700000286102295, 9.09000015258789, 12.199999809265137,
            17.670000076293945, 24.46000099182129, 28.57000160217285, 30.420001983642578, 30.840002059936523,
            32.590003967285156, 32.93000411987305, 42.320003509521484, 44.96000289916992, 50.340003967285156,
            50.45000457763672, 57.55000305175781, 57.93000411987305, 58.21000289916992, 60.1400032043457,
            62.61000442504883, 62.62000274658203, 62.71000289916992, 63.1400032043457, 63.1400032043457,
            63.77000427246094, 63.93000411987305, 63.96000289916992, 63.970001220703125, 64.02999877929688,
            64.06999969482422, 64.08000183105469, 64.12000274658203, 64.41000366210938, 64.4800033569336,
            64.51000213623047, 64.52999877929688, 64.83999633789062],
        "short_factor": [
            1.0, 1.0199999809265137, 1.0299999713897705, 1.0299999713897705, 1.0499999523162842, 1.0499999523162842,
            1.0499999523162842, 1.0499999523162842, 1.0499999523162842, 1.0699999332427979, 1.0999999046325684,
            1.1099998950958252, 1.1599998474121094, 1.1599998474121094, 1.1699998378753662, 1.2899998426437378,
            1.339999794960022, 1.679999828338623, 1.7899998426437378, 1.8199998140335083, 1.8499997854232788,
            1.8799997568130493, 1.9099997282028198, 1.9399996995925903, 1.9899996519088745, 2.0199997425079346,
            2.0199997425079346, 2.0199997425079346, 2.0199997425079346, 2.0199997425079346, 2.0199997425079346,
            2.0299997329711914, 2.0299997329711914, 2.0299997329711914, 2.0299997329711914, 2.0299997329711914,
            2.0299997329711914, 2.0299997329711914, 2.0299997329711914, 2.0299997329711914, 2.0799996852874756,
            2.0899996757507324, 2.189999580383301, 2.2199995517730713, 2.5899994373321533, 2.729999542236328,
            2.749999523162842, 2.8399994373321533],
        "type": "longrope"},
    "rope_theta": 10000.0, "sliding_window": 262144, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.46.3", "use_cache": True, "vocab_size": 32064,
}

# LGAI-EXAONE/EXAONE-4.0-32B config.json (transformers 4.54.0.dev0), as written out in NVIDIA/TensorRT-LLM
# tests/unittest/_torch/modeling/test_modeling_exaone4.py (commit 0acdecb2), with the two values its comments say
# it shrank put back: num_hidden_layers 64 ("instead of 64(all layers)") and sliding_window 4096 ("instead of
# 4096"); its extra "attn_implementation" key is left out.
EXAONE_4_32B = {
    "architectures": ["Exaone4ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 361,
    "head_dim": 128, "hidden_act": "silu", "hidden_size": 5120, "initializer_range": 0.02, "intermediate_size": 27392,
    "max_position_embeddings": 131072, "model_type": "exaone4", "num_attention_heads": 40, "num_hidden_layers": 64,
    "num_key_value_heads": 8, "pad_token_id": 0, "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 16.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 1000000, "sliding_window": 4096, "sliding_window_pattern": 4, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "transformers_version": "4.54.0.dev0", "use_cache": True, "vocab_size": 102400,
}


# mistralai/Mistral-7B-v0.1 config.json (transformers 4.37.2), as printed by MistralConfig in a public notebook
# (found in the code index; the printout adds "_name_or_path"). A model-wide sliding_window, no layer_types.
MISTRAL_7B_V01 = {
    "_name_or_path": "mistralai/Mistral-7B-v0.1", "architectures": ["MistralForCausalLM"], "attention_dropout": 0.0,
    "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
    "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mistral", "num_attention_heads": 32,
    "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
    "sliding_window": 4096, "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.37.2",
    "use_cache": True, "vocab_size": 32000,
}

# bigcode/starcoder2-3b, as NVIDIA/TensorRT-LLM's StarCoder2 tests write it ("based on HuggingFace configs": the
# shared base dict plus the 3B entry), with num_hidden_layers put back to 30 ("Reduced from 30/32/40 for testing").
STARCODER2_3B = {
    "architectures": ["Starcoder2ForCausalLM"], "attention_dropout": 0.1, "residual_dropout": 0.1,
    "embedding_dropout": 0.1, "bos_token_id": 0, "eos_token_id": 0, "hidden_act": "gelu_pytorch_tanh",
    "max_position_embeddings": 16384, "mlp_type": "default", "model_type": "starcoder2", "norm_epsilon": 1e-5,
    "num_hidden_layers": 30, "sliding_window": 4096, "transformers_version": "4.37.0.dev0", "use_bias": True,
    "use_cache": True, "vocab_size": 49152, "torch_dtype": "bfloat16", "hidden_size": 3072,
    "initializer_range": 0.018042, "intermediate_size": 12288, "num_attention_heads": 24, "num_key_value_heads": 2,
    "rope_theta": 999999.4420358813,
}

# Qwen/Qwen2.5-7B-Instruct config.json (transformers 4.43.3), as embedded in public benchmark scripts (found in the
# code index; they add "_name_or_path"). use_sliding_window is false: transformers drops the window.
QWEN_25_7B_INSTRUCT = {
    "_name_or_path": "Qwen/Qwen2.5-7B-Instruct", "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0,
    "bos_token_id": 151643, "eos_token_id": 151645, "hidden_act": "silu", "hidden_size": 3584,
    "initializer_range": 0.02, "intermediate_size": 18944, "max_position_embeddings": 32768, "max_window_layers": 28,
    "model_type": "qwen2", "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4,
    "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": None, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "transformers_version": "4.43.3", "use_cache": True, "use_sliding_window": False,
    "vocab_size": 152064,
}

# EleutherAI/gpt-j-6b config.json (transformers 4.18.0.dev0), as written out in a public architecture table (found
# in the code index). rotary_dim 64 of a 256-wide head.
GPT_J_6B = {
    "activation_function": "gelu_new", "architectures": ["GPTJForCausalLM"], "attn_pdrop": 0.0, "bos_token_id": 50256,
    "embd_pdrop": 0.0, "eos_token_id": 50256, "gradient_checkpointing": False, "initializer_range": 0.02,
    "layer_norm_epsilon": 1e-05, "model_type": "gptj", "n_embd": 4096, "n_head": 16, "n_inner": None, "n_layer": 28,
    "n_positions": 2048, "resid_pdrop": 0.0, "rotary": True, "rotary_dim": 64, "scale_attn_weights": True,
    "summary_activation": None, "summary_first_dropout": 0.1, "summary_proj_to_labels": True,
    "summary_type": "cls_index", "summary_use_proj": True,
    "task_specific_params": {"text-generation": {"do_sample": True, "max_length": 50, "temperature": 1.0}},
    "tie_word_embeddings": False, "tokenizer_class": "GPT2Tokenizer", "transformers_version": "4.18.0.dev0",
    "use_cache": True, "vocab_size": 50400,
}

# SmolLM3-3B: the dict a public project pins as "the official 3B" (HuggingFaceTB/SmolLM3-3B-Base's architecture;
# found in the code index). It names no_rope_layer_interval 4 rather than the per-layer no_rope_layers list.
SMOLLM3_3B = {
    "architectures": ["SmolLM3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": None,
    "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
    "intermediate_size": 11008, "max_position_embeddings": 65536, "model_type": "smollm3",
    "no_rope_layer_interval": 4, "num_attention_heads": 16, "num_hidden_layers": 36, "num_key_value_heads": 4,
    "pad_token_id": 128004, "pretraining_tp": 2, "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 5000000.0,
    "sliding_window": None, "tie_word_embeddings": True, "torch_dtype": "bfloat16", "use_cache": True,
    "use_sliding_window": False, "vocab_size": 128256,
}


def layers_described(plan) -> Counter:
    return Counter(spec.describe() for spec in plan)


def every_nth_layer(n: int, n_layers: int) -> list[int]:
    return [i for i in range(n_layers) if (i + 1) % n == 0]


def test_llama_31_8b_rotates_every_layer_with_llama3_scaling():
    assert layers_described(plan_from_hf_config(LLAMA_31_8B_INSTRUCT)) == {"rope(base=500000, llama3 x8)": 32}


def test_llama_4_scout_published_with_empty_no_rope_layers():
    plan = plan_from_hf_config(LLAMA_4_SCOUT)  # transformers 4.51's "no_rope_layers": [] means the default
    assert layers_described(plan) == {"rope(base=500000, llama3 x16, interleaved) chunk=8192": 36,
                                      "none temperature(floor_scale=8192, scale=0.1)": 12}
    assert [i for i, spec in enumerate(plan) if spec.position == "none"] == every_nth_layer(4, 48)


def test_llama_4_scouts_int_attn_temperature_tuning_is_read_as_its_truth_value():
    # transformers 4.51 saved "attn_temperature_tuning": 4 and tested it for truth; transformers 5 declares a
    # bool and raised StrictDataclassFieldValidationError ("expected bool, got int") before the dict was fixed
    for value, temperature in ((4, True), (0, False)):
        published = copy.deepcopy(LLAMA_4_SCOUT)
        published["text_config"]["attn_temperature_tuning"] = value
        nope = [spec for spec in plan_from_hf_config(published) if spec.position == "none"]
        assert len(nope) == 12 and all((spec.temperature is not None) == temperature for spec in nope)
    text = {**LLAMA_4_SCOUT["text_config"], "attn_temperature_tuning": 4}  # a llama4_text file, as in the bug report
    assert plan_from_hf_config(text) == plan_from_hf_config(LLAMA_4_SCOUT)


def test_gemma_3_4b_local_layers_at_base_1e4_with_a_window():
    plan = plan_from_hf_config(GEMMA_3_4B)  # head_dim 256 (the class default), not 2560 / 8 = 320
    assert layers_described(plan) == {"rope(base=10000) window=1024 head_dim=256": 29,
                                      "rope(base=1e+06, linear x8) head_dim=256": 5}
    assert [i for i, spec in enumerate(plan) if spec.window is None] == every_nth_layer(6, 34)


def test_gpt_oss_20b_alternates_windowed_and_full_layers_with_sinks():
    assert layers_described(plan_from_hf_config(GPT_OSS_20B)) == {  # head_dim 64, not 2880 / 64 = 45
        "rope(base=150000, yarn x32) window=128 sinks head_dim=64": 12,
        "rope(base=150000, yarn x32) sinks head_dim=64": 12}


def test_phi_35_mini_keeps_its_longrope_factors_and_window():
    plan = plan_from_hf_config(PHI_35_MINI_INSTRUCT)
    assert layers_described(plan) == {"rope(base=10000, longrope) window=262144": 32}
    scaling = plan[0].rope.scaling
    assert scaling["short_factor"] == PHI_35_MINI_INSTRUCT["rope_scaling"]["short_factor"]
    assert scaling["long_factor"] == PHI_35_MINI_INSTRUCT["rope_scaling"]["long_factor"]
    assert scaling["original_max_position_embeddings"] == 4096  # a top-level key in the file
    MultiHeadAttention.from_spec(3072, 32, plan[0])  # builds: every LongRoPE key is there


def test_exaone_4_32b_global_layers_are_nope():
    plan = plan_from_hf_config(EXAONE_4_32B)
    assert layers_described(plan) == {"rope(base=1e+06, llama3 x16) window=4096": 48, "none": 16}
    assert [i for i, spec in enumerate(plan) if spec.position == "none"] == every_nth_layer(4, 64)



def test_mistral_7b_v01_slides_on_every_layer():
    assert layers_described(plan_from_hf_config(MISTRAL_7B_V01)) == {"rope(base=10000) window=4096": 32}


def test_starcoder2_3b_slides_on_every_layer():
    plan = plan_from_hf_config(STARCODER2_3B)
    assert len(plan) == 30 and all(spec.window == 4096 and spec.rope.scaling["rope_theta"] == 999999.4420358813
                                   for spec in plan)


def test_qwen_25_7b_has_no_window_when_use_sliding_window_is_false():
    assert layers_described(plan_from_hf_config(QWEN_25_7B_INSTRUCT)) == {"rope(base=1e+06)": 28}


def test_gpt_j_6b_rotates_interleaved_pairs_of_a_quarter_of_each_head():
    assert layers_described(plan_from_hf_config(GPT_J_6B)) == {"rope(base=10000, partial 0.25, interleaved)": 28}


def test_smollm3_3b_every_4th_layer_is_nope():
    plan = plan_from_hf_config(SMOLLM3_3B)
    assert layers_described(plan) == {"rope(base=5e+06)": 27, "none": 9}
    assert [i for i, spec in enumerate(plan) if spec.position == "none"] == every_nth_layer(4, 36)
    # posenc's SmolLM3 family preset is this checkpoint's layout and base (review P5-n1: it had the class
    # default 2e6), layer by layer: the same positions and the same rotary frequencies
    family = family_plan("smollm3", 36)
    assert [spec.position for spec in family] == [spec.position for spec in plan]
    for ours, published in zip(family, plan):
        if ours.position == "rope":
            layers = [MultiHeadAttention.from_spec(2048, 16, spec) for spec in (ours, published)]
            assert layers[0].rotary.base == layers[1].rotary.base == SMOLLM3_3B["rope_theta"]


def test_mistral_7b_v01_layers_equal_hugging_face():
    text = {**MISTRAL_7B_V01, **SMALL, "num_hidden_layers": 1, "sliding_window": 12}
    check_published_layers("Mistral 7B v0.1", text, [0])


def test_gpt_j_6b_layers_equal_hugging_face():
    text = {**GPT_J_6B, "vocab_size": 100, "n_embd": 64, "n_head": 4, "n_layer": 1, "rotary_dim": 8,
            "bos_token_id": 0, "eos_token_id": 0}
    check_published_layers("GPT-J 6B", text, [0])

@pytest.mark.parametrize("published", [LLAMA_31_8B_INSTRUCT, LLAMA_4_SCOUT, PHI_35_MINI_INSTRUCT, EXAONE_4_32B])
def test_a_published_dict_is_left_as_it_was(published):
    # transformers' config classes write into the dicts they are given (rope_theta into rope_scaling, ...)
    copied = copy.deepcopy(published)
    plan_from_hf_config(copied)
    assert copied == published


# The files with legacy keys, against Hugging Face's attention layers: the published dict with small sizes.
SMALL = dict(vocab_size=100, hidden_size=64, intermediate_size=64, num_attention_heads=4, num_key_value_heads=4,
             head_dim=16, bos_token_id=0, eos_token_id=0, pad_token_id=0)


def hugging_face_model(text_config: dict):
    """transformers' config object and causal LM for a (text) config.json dict."""
    torch.manual_seed(0)
    fields = {key: value for key, value in text_config.items() if key != "model_type"}
    config = transformers.AutoConfig.for_model(text_config["model_type"], **fields)
    config._attn_implementation = "eager"
    return config, transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()


def check_published_layers(name, text_config: dict, layer_indices, *, prepare=None, post_norm=False):
    config, model = hugging_face_model(text_config)
    if post_norm:
        unit_embeddings(model)
    plan = plan_from_hf_config(text_config)  # from the dict; check_layer compares it with the object's plan
    for i in layer_indices:
        check_layer(f"{name} layer {i}", config, model, i, plan[i], prepare=prepare)


def _without_qk_norm(attention):
    attention.q_norm, attention.k_norm = nn.Identity(), nn.Identity()


def test_gemma_3_4b_layers_equal_hugging_face():
    text = {**GEMMA_3_4B["text_config"], **SMALL, "num_hidden_layers": 6, "sliding_window": 12}
    check_published_layers("Gemma 3 4B", text, [0, 5], prepare=_without_qk_norm)


def test_a_head_dim_apart_from_hidden_over_heads_is_carried_by_the_plan():
    # Gemma 3 4B's head_dim is 256 where hidden_size / heads is 320; here 32 where it is 64 / 4 = 16. A layer built
    # at 16 would rotate over the wrong width (and scale by the wrong head_dim): the plan carries 32 and the layer
    # built from it equals Hugging Face's.
    text = {**GEMMA_3_4B["text_config"], **SMALL, "head_dim": 32, "query_pre_attn_scalar": 32,
            "num_hidden_layers": 6, "sliding_window": 12}
    plan = plan_from_hf_config(text)
    assert {spec.head_dim for spec in plan} == {32}
    check_published_layers("Gemma 3 4B, head_dim 32 of width 64 / 4 heads", text, [0, 5], prepare=_without_qk_norm)
    assert {spec.head_dim for spec in plan_from_hf_config({**text, "head_dim": 16})} == {None}  # = 64 / 4


def test_llama_4_scout_layers_equal_hugging_face():
    # attn_temperature_tuning True: transformers 5's own Llama4TextConfig refuses the file's int 4
    text = {**LLAMA_4_SCOUT["text_config"], **SMALL, "intermediate_size_mlp": 64, "num_local_experts": 1,
            "num_hidden_layers": 4, "attention_chunk_size": 16, "floor_scale": 8, "use_qk_norm": False,
            "attn_temperature_tuning": True}
    check_published_layers("Llama 4 Scout", text, [0, 3])


def test_phi_35_mini_layers_equal_hugging_face():
    # head_dim 96 as published (48 factor pairs); the window shrunk to 12 to matter at 40 tokens
    text = {**PHI_35_MINI_INSTRUCT, **SMALL, "hidden_size": 192, "num_attention_heads": 2, "num_key_value_heads": 2,
            "head_dim": 96, "num_hidden_layers": 1, "sliding_window": 12}
    check_published_layers("Phi-3.5-mini", text, [0])


def test_exaone_4_32b_layers_equal_hugging_face():
    text = {**EXAONE_4_32B, **SMALL, "num_hidden_layers": 4, "sliding_window": 12}
    check_published_layers("EXAONE 4.0 32B", text, [0, 3], prepare=_without_qk_norm, post_norm=True)


# Families posenc cannot express are refused with the reason, never read as a plausible plan.

# DeepSeek-V3: not a full published file (none was found without the network). The position fields of
# deepseek-ai/DeepSeek-V3's config.json as a public reference implementation lists them (its DEEPSEEK_V3_*
# constants; the review checked the same values): MLA with a 64-dim decoupled rotary slice and YaRN x40.
DEEPSEEK_V3_POSITION_FIELDS = {
    "model_type": "deepseek_v3", "hidden_size": 7168, "num_hidden_layers": 61, "num_attention_heads": 128,
    "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
    "max_position_embeddings": 163840, "rope_theta": 10000.0,
    "rope_scaling": {"factor": 40.0, "mscale": 1.0, "mscale_all_dim": 1.0, "beta_fast": 32.0, "beta_slow": 1.0,
                     "type": "yarn", "original_max_position_embeddings": 4096},
}

# Gemma 3n E4B: not the full published file; the text_config fields a public config parser's test writes out
# for google/gemma-3n-E4B (layer_types there come from Gemma3nTextConfig's defaults, left out here).
GEMMA_3N_E4B_TEXT_FIELDS = {
    "model_type": "gemma3n",
    "text_config": {
        "model_type": "gemma3n_text", "vocab_size": 262400, "vocab_size_per_layer_input": 262144,
        "hidden_size": 2048, "hidden_size_per_layer_input": 256, "intermediate_size": 16384, "num_hidden_layers": 35,
        "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 256, "max_position_embeddings": 32768,
        "sliding_window": 512, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
        "final_logit_softcapping": 30.0, "altup_active_idx": 0, "altup_coef_clip": 120.0, "altup_correct_scale": True,
        "altup_num_inputs": 4, "laurel_rank": 64, "num_kv_shared_layers": 15, "query_pre_attn_scalar": 256,
    },
}


@pytest.mark.parametrize("published, names", [
    (DEEPSEEK_V3_POSITION_FIELDS, ["deepseek_v3", "latent attention", "posenc.mla"]),
    (GEMMA_3N_E4B_TEXT_FIELDS, ["gemma3n", "num_kv_shared_layers"]),
])
def test_published_families_posenc_cannot_express_are_refused(published, names):
    with pytest.raises(ValueError) as error:
        plan_from_hf_config(published)
    for name in names:
        assert name in str(error.value)


@pytest.mark.parametrize("model_type, reason", [
    ("qwen3_next", "linear attention"), ("mamba", "state-space"), ("jamba", "state-space"),
    ("modernbert", "bidirectional"), ("gemma2", "attn_logit_softcapping"), ("deepseek_v32", "indexer"),
    ("deepseek_v2", "posenc.mla"),
])
def test_config_objects_of_refused_families_name_the_reason(model_type, reason):
    config = transformers.AutoConfig.for_model(model_type)
    with pytest.raises(ValueError, match=model_type) as error:
        plan_from_hf_config(config)
    assert reason in str(error.value)


def test_a_model_type_not_checked_against_hugging_face_is_refused():
    for config in (transformers.AutoConfig.for_model("bert"), {"model_type": "falcon", "num_hidden_layers": 2}):
        with pytest.raises(ValueError, match="is not one posenc has checked"):
            plan_from_hf_config(config)


def test_a_layer_type_that_is_not_attention_is_refused():
    config = transformers.AutoConfig.for_model("qwen3", num_hidden_layers=4)
    config.layer_types[2] = "linear_attention"
    with pytest.raises(ValueError, match=r"config.layer_types\[2\]='linear_attention'"):
        plan_from_hf_config(config)


@pytest.mark.parametrize("model_type, option, value", [
    ("gemma3_text", "attn_logit_softcapping", 50.0),
    ("gemma3_text", "use_bidirectional_attention", True),
    ("qwen2", "dual_chunk_attention_config", {"chunk_size": 262144, "local_size": 8192,
                                              "original_max_position_embeddings": 262144}),
])
def test_options_a_plan_cannot_express_are_refused(model_type, option, value):
    config = transformers.AutoConfig.for_model(model_type, num_hidden_layers=2, **{option: value})
    with pytest.raises(ValueError, match=f"config.{option}"):
        plan_from_hf_config(config)


def test_what_is_not_a_config_is_refused():
    with pytest.raises(TypeError, match="config must be a transformers config object or a config.json dict"):
        plan_from_hf_config(["llama"])
    with pytest.raises(ValueError, match=r"config\['model_type'\] is missing"):
        plan_from_hf_config({"num_hidden_layers": 2})


def test_a_dynamic_ntk_config_reads_its_original_length_from_max_position_embeddings():
    # review P4-n6: a transformers config with dynamic NTK names only the factor; HF grows the base from
    # config.max_position_embeddings, and so must the plan (it raised before)
    from transformers import AutoConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    from posenc import rope_frequencies

    published = {"model_type": "llama", "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 4,
                 "num_hidden_layers": 2, "intermediate_size": 512, "vocab_size": 100,
                 "max_position_embeddings": 2048, "rope_theta": 10000.0,
                 "rope_scaling": {"type": "dynamic", "factor": 2.0}}
    plan = plan_from_hf_config(published)
    config = AutoConfig.for_model(**published)
    for seq_len in (1000, 4096):
        expected, _ = ROPE_INIT_FUNCTIONS["dynamic"](config, "cpu", seq_len=seq_len)
        ours, _ = rope_frequencies(64, scaling=plan[0].rope.scaling, seq_len=seq_len)
        torch.testing.assert_close(ours, expected.float(), rtol=1e-6, atol=0)
