"""posenc's attention layers equal Hugging Face transformers 5.23's, family by family (tiny random models).

For each 2025-26 family the Hugging Face model is built from a small config (random weights, no download)
and run as shipped: its own masks, rotary tables, temperature and cache. Hooks record one attention
layer's input and output; ``posenc.MultiHeadAttention.from_spec(plan_from_hf_config(config)[i])`` with the
same weights must give the same output, on a full pass and when decoding token by token with a cache
(past the window, the chunk boundary and the temperature step). Query/key norms (Gemma 3's RMSNorm,
Llama 4's L2 norm) are not position methods and posenc has none: they are switched off or replaced by
the identity on the Hugging Face side, which the tests say where they do it.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

transformers = pytest.importorskip("transformers")

from posenc.hf_config import plan_from_hf_config  # noqa: E402
from posenc.plan import LayerSpec, Rope, Temperature  # noqa: E402
from hf_layers import check_layer, unit_embeddings  # noqa: E402

SIZES = dict(vocab_size=100, hidden_size=64, intermediate_size=64, num_attention_heads=4, num_key_value_heads=4,
             head_dim=16, max_position_embeddings=512)


def build(config_class, model_class, **overrides):
    torch.manual_seed(0)
    config = config_class(**{**SIZES, **overrides})
    config._attn_implementation = "eager"
    return config, model_class(config).eval()


def test_llama4_rope_layer_with_chunks_and_nope_layer_with_temperature():
    from transformers import Llama4ForCausalLM, Llama4TextConfig
    scaling = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 16.0, "low_freq_factor": 1.0,
               "high_freq_factor": 1.0, "original_max_position_embeddings": 16}  # Scout's empty blend band
    config, model = build(Llama4TextConfig, Llama4ForCausalLM, num_hidden_layers=4, intermediate_size_mlp=64,
                          num_local_experts=1, moe_layers=[], attention_chunk_size=16, use_qk_norm=False,
                          attn_temperature_tuning=True, floor_scale=8, attn_scale=0.1, rope_parameters=scaling)
    rope = LayerSpec("rope", rope=Rope(scaling=scaling, interleaved=True), chunk=16)
    check_layer("Llama 4 RoPE layer (chunked)", config, model, 0, rope)
    nope = LayerSpec("none", temperature=Temperature(floor_scale=8, scale=0.1))
    check_layer("Llama 4 NoPE layer (temperature)", config, model, 3, nope)


def _gemma3_without_qk_norm(attention):
    attention.q_norm, attention.k_norm = nn.Identity(), nn.Identity()


def test_gemma3_local_and_global_layers():
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig
    local = {"rope_type": "default", "rope_theta": 10000.0}
    global_ = {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0}
    config, model = build(Gemma3TextConfig, Gemma3ForCausalLM, num_hidden_layers=6, sliding_window=12,
                          query_pre_attn_scalar=16,
                          rope_parameters={"sliding_attention": local, "full_attention": global_})
    check_layer("Gemma 3 local layer", config, model, 0, LayerSpec("rope", rope=Rope(scaling=local), window=12),
                prepare=_gemma3_without_qk_norm)
    check_layer("Gemma 3 global layer", config, model, 5, LayerSpec("rope", rope=Rope(scaling=global_)),
                prepare=_gemma3_without_qk_norm)


def test_gemma3_query_pre_attn_scalar_is_a_softmax_scale():
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig
    config, model = build(Gemma3TextConfig, Gemma3ForCausalLM, num_hidden_layers=2, sliding_window=12,
                          query_pre_attn_scalar=24, layer_types=["sliding_attention", "full_attention"])
    spec = plan_from_hf_config(config)[1]
    assert spec.softmax_scale == pytest.approx(24 ** -0.5)
    check_layer("Gemma 3 query_pre_attn_scalar", config, model, 1, spec, prepare=_gemma3_without_qk_norm)


def test_cohere2_sliding_rope_and_global_nope():
    from transformers import Cohere2Config, Cohere2ForCausalLM
    config, model = build(Cohere2Config, Cohere2ForCausalLM, num_hidden_layers=4, sliding_window=12,
                          rope_parameters={"rope_type": "default", "rope_theta": 50000.0})
    rope = LayerSpec("rope", rope=Rope(scaling={"rope_type": "default", "rope_theta": 50000.0}, interleaved=True),
                     window=12)
    check_layer("Cohere 2 sliding RoPE layer", config, model, 0, rope)
    check_layer("Cohere 2 global NoPE layer", config, model, 3, LayerSpec("none"))


def test_gpt_oss_sinks_window_and_yarn():
    from transformers import GptOssConfig, GptOssForCausalLM
    yarn = {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
            "original_max_position_embeddings": 16, "rope_theta": 150000.0}
    config, model = build(GptOssConfig, GptOssForCausalLM, num_hidden_layers=2, sliding_window=12,
                          num_local_experts=2, num_experts_per_tok=1, rope_parameters=yarn)
    for layer in model.model.layers:  # sinks are zeros at init; make them matter
        nn.init.normal_(layer.self_attn.sinks, std=1.0)
    rope = Rope(scaling=yarn)
    check_layer("gpt-oss sliding layer", config, model, 0, LayerSpec("rope", rope=rope, window=12, sinks=True))
    check_layer("gpt-oss full layer", config, model, 1, LayerSpec("rope", rope=rope, sinks=True))


def test_smollm3_rope_and_nope_layers():
    from transformers import SmolLM3Config, SmolLM3ForCausalLM
    theta = {"rope_type": "default", "rope_theta": 2000000.0}
    config, model = build(SmolLM3Config, SmolLM3ForCausalLM, num_hidden_layers=4, rope_parameters=theta,
                          pad_token_id=0)
    check_layer("SmolLM3 RoPE layer", config, model, 0, LayerSpec("rope", rope=Rope(scaling=theta)))
    check_layer("SmolLM3 NoPE layer", config, model, 3, LayerSpec("none"))


def test_phi3_longrope_with_partial_rotary():
    from transformers import Phi3Config, Phi3ForCausalLM
    generator = torch.Generator().manual_seed(2)
    pairs = 4  # rotary_dim 8 of head_dim 16
    longrope = {"rope_type": "longrope", "rope_theta": 10000.0, "partial_rotary_factor": 0.5,
                "short_factor": (1 + 3 * torch.rand(pairs, generator=generator)).tolist(),
                "long_factor": (4 + 30 * torch.rand(pairs, generator=generator)).tolist(),
                "original_max_position_embeddings": 16}
    config, model = build(Phi3Config, Phi3ForCausalLM, num_hidden_layers=2, rope_parameters=longrope,
                          original_max_position_embeddings=16, pad_token_id=0)
    spec = plan_from_hf_config(config)[0]
    assert spec.rope.scaling["rope_type"] == "longrope"
    check_layer("Phi-3 longrope, partial 0.5", config, model, 0, spec)


DEFAULT_ROPE = {"rope_type": "default", "rope_theta": 10000.0}


@pytest.mark.parametrize("family", ["mistral", "starcoder2"])
def test_model_wide_sliding_window_is_on_every_layer(family):
    # Mistral 7B v0.1 and StarCoder2 have no layer_types: modeling_mistral.py / modeling_starcoder2.py pass
    # sliding_window=config.sliding_window to every layer's attention
    from transformers import MistralConfig, MistralForCausalLM, Starcoder2Config, Starcoder2ForCausalLM
    classes = {"mistral": (MistralConfig, MistralForCausalLM), "starcoder2": (Starcoder2Config, Starcoder2ForCausalLM)}
    config, model = build(*classes[family], num_hidden_layers=2, sliding_window=12)
    for layer_index in (0, 1):
        check_layer(f"{family} layer {layer_index} (window 12)", config, model, layer_index,
                    LayerSpec("rope", rope=Rope(scaling=DEFAULT_ROPE), window=12))


@pytest.mark.parametrize("family", ["glm", "glm4"])
def test_glm_rotates_interleaved_pairs_of_half_the_head(family):
    # modeling_glm4.py rotate_half takes x[..., 0::2] and x[..., 1::2], with cos/sin repeat_interleave'd: pairs
    # (2i, 2i+1) within the first partial_rotary_factor (0.5) of each head
    from transformers import GlmConfig, GlmForCausalLM, Glm4Config, Glm4ForCausalLM
    classes = {"glm": (GlmConfig, GlmForCausalLM), "glm4": (Glm4Config, Glm4ForCausalLM)}
    config, model = build(*classes[family], num_hidden_layers=1, pad_token_id=0)
    rope = Rope(scaling={**DEFAULT_ROPE, "partial_rotary_factor": 0.5}, interleaved=True)
    check_layer(f"{family} (interleaved, partial 0.5)", config, model, 0, LayerSpec("rope", rope=rope))


def test_gptj_rotates_interleaved_pairs_of_its_rotary_dim():
    # modeling_gptj.py rotate_every_two over the first rotary_dim features, base 10000 (create_sinusoidal_positions)
    from transformers import GPTJConfig, GPTJForCausalLM
    torch.manual_seed(0)
    config = GPTJConfig(vocab_size=100, n_embd=64, n_head=4, n_layer=1, n_positions=512, rotary_dim=8)
    config._attn_implementation = "eager"
    model = GPTJForCausalLM(config).eval()
    rope = Rope(scaling={**DEFAULT_ROPE, "partial_rotary_factor": 0.5}, interleaved=True)
    check_layer("GPT-J (interleaved, rotary_dim 8 of 16)", config, model, 0, LayerSpec("rope", rope=rope))


def test_cohere_rotates_interleaved_pairs():
    # modeling_cohere.py rotate_half takes x[..., ::2]; CohereRotaryEmbedding repeat_interleaves the angles
    from transformers import CohereConfig, CohereForCausalLM
    config, model = build(CohereConfig, CohereForCausalLM, num_hidden_layers=1, pad_token_id=0,
                          rope_parameters=DEFAULT_ROPE)
    check_layer("Cohere (interleaved)", config, model, 0,
                LayerSpec("rope", rope=Rope(scaling=DEFAULT_ROPE, interleaved=True)))


def _without_qk_norm(attention):
    attention.q_norm, attention.k_norm = nn.Identity(), nn.Identity()


def test_exaone4_sliding_rope_and_global_nope():
    # modeling_exaone4.py: RoPE only "if self.sliding_window is None or self.is_sliding" (global NoPE)
    from transformers import Exaone4Config, Exaone4ForCausalLM
    config, model = build(Exaone4Config, Exaone4ForCausalLM, num_hidden_layers=4, sliding_window=12,
                          sliding_window_pattern=4, rope_parameters=DEFAULT_ROPE)
    unit_embeddings(model)
    check_layer("EXAONE 4 sliding RoPE layer", config, model, 0,
                LayerSpec("rope", rope=Rope(scaling=DEFAULT_ROPE), window=12), prepare=_without_qk_norm)
    check_layer("EXAONE 4 global NoPE layer", config, model, 3, LayerSpec("none"), prepare=_without_qk_norm)


@pytest.mark.parametrize("family", ["llama", "qwen2", "qwen3"])
def test_half_split_families_with_and_without_a_window(family):
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM
    classes = {"llama": (LlamaConfig, LlamaForCausalLM), "qwen2": (Qwen2Config, Qwen2ForCausalLM),
               "qwen3": (Qwen3Config, Qwen3ForCausalLM)}
    window = {} if family == "llama" else dict(use_sliding_window=True, sliding_window=12, max_window_layers=1)
    config, model = build(*classes[family], num_hidden_layers=2, rope_parameters=DEFAULT_ROPE, **window)
    prepare = _without_qk_norm if family == "qwen3" else None
    rope = Rope(scaling=DEFAULT_ROPE)
    check_layer(f"{family} full layer", config, model, 0, LayerSpec("rope", rope=rope), prepare=prepare)
    if family != "llama":  # Qwen's layer_types: sliding from max_window_layers on
        check_layer(f"{family} sliding layer", config, model, 1, LayerSpec("rope", rope=rope, window=12),
                    prepare=prepare)


def test_ministral3_temperature_steps_one_position_after_llama4s():
    # posenc.temperature's docstring (review P5-n4): Mistral's llama_4_scaling_beta is Llama 4's form with
    # floor(p / L0) in place of floor((p + 1) / f): one position later (at f = L0 = 16384, p = 16383 is 1.0
    # for Ministral 3 and 1 + 0.1 ln 2 for Llama 4)
    from transformers.models.ministral3.modeling_ministral3 import get_llama_4_attn_scale
    from posenc.temperature import attention_temperature
    positions = torch.tensor([[0, 1, 16382, 16383, 16384, 32767, 32768, 50000]])
    ministral = get_llama_4_attn_scale(positions, 0.1, 16384)[:, 0, :, 0]  # [batch, seq]
    torch.testing.assert_close(ministral[:, 1:], attention_temperature(positions[:, 1:] - 1, floor_scale=16384))
    by_hand = [1 + 0.1 * math.log(1 + p // 16384) for p in positions[0].tolist()]
    assert ministral[0].tolist() == pytest.approx(by_hand, abs=1e-6)
    assert ministral[0, 3] == 1.0 and attention_temperature(positions)[0, 3] > 1.06
