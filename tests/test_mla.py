"""MLA with decoupled RoPE: equal to DeepSeek-V3 in transformers 5.23, and why the rotary key is decoupled.

The Hugging Face references are tiny random-weight models built from a config (no download). Largest
differences seen (float32, CPU, outputs of size ~9): layer output vs HF 0 (bit for bit), cache contents vs HF's
DynamicCache 0, cached decoding vs the full pass and vs HF 5e-6 (other matmul shapes); absorbed vs naive
logits (float64, size ~8) 2e-15.
"""

import math

import pytest
import torch

from posenc import rope_frequencies
from posenc.mla import (LatentCache, MultiHeadLatentAttention, absorbed_scores, deinterleave, yarn_mscale,
                        yarn_softmax_scale)

TINY = dict(dim=64, n_heads=4, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=8)
YARN = dict(rope_type="yarn", rope_theta=10000.0, factor=4.0, original_max_position_embeddings=16,
            beta_fast=32, beta_slow=1, mscale=1.0, mscale_all_dim=1.0)
SEQ = 40  # beyond original_max_position_embeddings = 16, where YaRN's ramp matters


def hf_model(q_lora_rank, rope_interleave, rope_parameters):
    """A 2-layer dense DeepSeek-V3 with random weights large enough that attention is far from uniform."""
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    config = DeepseekV3Config(
        vocab_size=50, hidden_size=TINY["dim"], intermediate_size=96, moe_intermediate_size=16,
        num_hidden_layers=2, first_k_dense_replace=2, n_routed_experts=4, n_shared_experts=1, n_group=1,
        topk_group=1, num_experts_per_tok=2, num_attention_heads=TINY["n_heads"], num_key_value_heads=TINY["n_heads"],
        kv_lora_rank=TINY["kv_lora_rank"], q_lora_rank=q_lora_rank, qk_nope_head_dim=TINY["qk_nope_head_dim"],
        qk_rope_head_dim=TINY["qk_rope_head_dim"], v_head_dim=TINY["v_head_dim"], max_position_embeddings=64,
        rope_parameters=dict(rope_parameters), rope_interleave=rope_interleave, attn_implementation="eager")
    torch.manual_seed(0)
    model = DeepseekV3ForCausalLM(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.copy_(1 + 0.3 * torch.randn_like(param))
            elif param.dim() == 2:
                param.normal_(0.0, 1.5 / math.sqrt(param.shape[1]))
    return model


def capture_layer(model, tokens, layer=1):
    """Run the model; return (input hidden states, output, HF cache) of one attention layer."""
    seen = {}

    def hook(module, args, kwargs, output):
        seen["x"], seen["out"] = kwargs["hidden_states"].detach(), output[0].detach()

    handle = model.model.layers[layer].self_attn.register_forward_hook(hook, with_kwargs=True)
    with torch.no_grad():
        result = model(tokens, use_cache=True)
    handle.remove()
    return seen["x"], seen["out"], result.past_key_values


def posenc_copy(hf_attention, q_lora_rank, rope_interleave, rope_parameters):
    mla = MultiHeadLatentAttention(**TINY, q_lora_rank=q_lora_rank, rope_scaling=dict(rope_parameters),
                                   rope_interleaved=rope_interleave)
    mla.load_state_dict(hf_attention.state_dict())  # strict: the same submodule names and shapes
    return mla.eval()


CASES = [(24, True, YARN), (None, True, YARN), (24, False, YARN), (None, False, YARN),
         (24, True, {**YARN, "mscale_all_dim": 0.707})]  # mscale != mscale_all_dim: cos/sin scaled too


@pytest.mark.parametrize("q_lora_rank, rope_interleave, rope_parameters", CASES)
def test_equals_deepseek_v3_attention_full_and_cached(q_lora_rank, rope_interleave, rope_parameters):
    model = hf_model(q_lora_rank, rope_interleave, rope_parameters)
    tokens = torch.randint(0, 50, (2, SEQ), generator=torch.Generator().manual_seed(1))
    x, hf_out, hf_cache = capture_layer(model, tokens)
    mla = posenc_copy(model.model.layers[1].self_attn, q_lora_rank, rope_interleave, rope_parameters)
    assert mla.softmax_scale == model.model.layers[1].self_attn.scaling

    with torch.no_grad():
        full = mla(x)
        cache = LatentCache()
        stepped = torch.cat([mla(x[:, i:i + 1], cache=cache) for i in range(SEQ)], dim=1)
    print("max |posenc - HF|", (full - hf_out).abs().max().item(), "cached - HF", (stepped - hf_out).abs().max().item(),
          "cached - full", (stepped - full).abs().max().item(), "output scale", hf_out.abs().max().item())
    assert hf_out.abs().max() > 1  # a test that can fail: the output is not ~0
    torch.testing.assert_close(full, hf_out, rtol=1e-6, atol=1e-6)  # 0 seen: the same float operations
    torch.testing.assert_close(stepped, full, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(stepped, hf_out, rtol=1e-5, atol=1e-5)

    # The cache holds what MLA caches, and the same numbers as HF's: latent and the shared rotated key.
    assert cache.latent.shape == (2, SEQ, TINY["kv_lora_rank"])
    assert cache.rope_key.shape == (2, SEQ, TINY["qk_rope_head_dim"])
    torch.testing.assert_close(cache.latent, hf_cache.layers[1].keys.squeeze(1), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(cache.rope_key, hf_cache.layers[1].values.squeeze(1), rtol=1e-6, atol=1e-6)


# ---- the softmax scale: DeepSeek's YaRN temperature --------------------------------------------------------

SCALE_CASES = [
    (192, dict(rope_type="yarn", rope_theta=10000.0, factor=40.0, original_max_position_embeddings=4096,
               beta_fast=32, beta_slow=1, mscale=1.0, mscale_all_dim=1.0)),  # DeepSeek-V3's published settings
    (16, dict(YARN)),
    (16, {**YARN, "mscale_all_dim": 0.707}),
    (16, {**YARN, "factor": 1.0}),
    (16, {k: v for k, v in YARN.items() if k not in ("mscale", "mscale_all_dim")}),  # no mscale_all_dim
    (16, dict(rope_type="linear", rope_theta=10000.0, factor=4.0)),
    (16, dict(rope_type="default", rope_theta=10000.0)),
    # review P4-n5: Hugging Face applies mscale_all_dim for every type but "default", not only YaRN
    (16, dict(rope_type="linear", rope_theta=10000.0, factor=4.0, mscale_all_dim=1.0)),
    (16, dict(rope_type="dynamic", rope_theta=10000.0, factor=8.0, mscale_all_dim=0.5)),
    (16, dict(rope_type="default", rope_theta=10000.0, factor=4.0, mscale_all_dim=1.0)),
]


@pytest.mark.parametrize("head_dim, scaling", SCALE_CASES)
def test_yarn_softmax_scale_equals_hugging_face(head_dim, scaling):
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import yarn_apply_mscale

    assert yarn_softmax_scale(head_dim, scaling) == yarn_apply_mscale(scaling, head_dim ** -0.5)


def test_yarn_softmax_scale_formula_and_attention_layer():
    from transformers import DeepseekV3Config
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3Attention

    head_dim, scaling = SCALE_CASES[0]
    expected = head_dim ** -0.5 * (0.1 * math.log(40.0) + 1.0) ** 2  # ~1.87 / sqrt(192)
    assert yarn_softmax_scale(head_dim, scaling) == pytest.approx(expected, rel=1e-15)
    assert yarn_softmax_scale(head_dim, None) == head_dim ** -0.5
    assert yarn_mscale(0.5, 3.0) == 1.0
    config = DeepseekV3Config(hidden_size=64, num_attention_heads=1, num_key_value_heads=1, kv_lora_rank=16,
                              q_lora_rank=None, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=8,
                              rope_parameters=dict(scaling))
    assert DeepseekV3Attention(config, layer_idx=0).scaling == yarn_softmax_scale(head_dim, scaling)
    # any non-default type with mscale_all_dim takes the squared factor; "default" never does
    linear = dict(rope_type="linear", factor=4.0, mscale_all_dim=1.0)
    assert yarn_softmax_scale(16, linear) == pytest.approx(0.25 * (0.1 * math.log(4.0) + 1.0) ** 2, rel=1e-15)
    assert yarn_softmax_scale(16, {**linear, "rope_type": "default"}) == 0.25


def test_rope_base_defaults_to_the_dicts_rope_theta():
    # review P4-n4: a rope_parameters dict that carries its own rope_theta, and no rope_base
    exponents = torch.arange(0, TINY["qk_rope_head_dim"], 2, dtype=torch.float64) / TINY["qk_rope_head_dim"]
    plain = MultiHeadLatentAttention(**TINY, rope_scaling={"rope_type": "default", "rope_theta": 50000.0})
    torch.testing.assert_close(plain.inv_freq.double(), 50000.0 ** -exponents, rtol=1e-7, atol=0)
    kimi = {**YARN, "rope_theta": 50000.0}  # Kimi K2's base with YaRN
    mla = MultiHeadLatentAttention(**TINY, rope_scaling=kimi)
    assert torch.equal(mla.inv_freq, rope_frequencies(TINY["qk_rope_head_dim"], scaling=kimi)[0])
    no_dict = MultiHeadLatentAttention(**TINY)  # no dict: base 10000, as before
    torch.testing.assert_close(no_dict.inv_freq.double(), 10000.0 ** -exponents, rtol=1e-7, atol=0)
    with pytest.raises(ValueError, match="base"):  # an explicit base that disagrees still raises
        MultiHeadLatentAttention(**TINY, rope_base=10000.0, rope_scaling=kimi)


# ---- the lesson: RoPE does not commute with the low-rank key cache; decoupling restores absorption --------

def rotate_half_split(x, positions, base=10000.0):
    """RoPE by hand in float64, pairs (i, i + d/2): x [..., seq, d], positions [seq]."""
    half = x.shape[-1] // 2
    inv_freq = base ** (-torch.arange(half, dtype=torch.float64) * 2 / x.shape[-1])
    angles = positions.to(torch.float64)[:, None] * inv_freq
    cos, sin = angles.cos(), angles.sin()
    first, second = x[..., :half], x[..., half:]
    return torch.cat((first * cos - second * sin, second * cos + first * sin), dim=-1)


def latent_fit_residual(latent, scores):
    """Relative residual of the best fit scores[h, i, :] ~= u[h, i] . latent[j] over all vectors u: zero exactly
    when some query-side vector in latent space (an absorbed query) reproduces every score."""
    solution = torch.linalg.lstsq(latent, scores.reshape(-1, scores.shape[-1]).T).solution
    fitted = (latent @ solution).T.reshape(scores.shape)
    return ((fitted - scores).norm() / scores.norm()).item()


def test_absorption_works_without_rope_and_fails_with_rope_on_full_keys():
    gen = torch.Generator().manual_seed(3)
    heads, nope, rank, k_len = 4, 8, 6, 40
    key_up = torch.randn(heads, nope, rank, generator=gen, dtype=torch.float64)      # W_uk
    latent = torch.randn(k_len, rank, generator=gen, dtype=torch.float64)           # cached c_j
    queries = torch.randn(heads, k_len, nope, generator=gen, dtype=torch.float64)
    positions = torch.arange(k_len)
    keys = torch.einsum("hnr,jr->hjn", key_up, latent)                               # k_j = W_uk c_j

    # No position in the keys: q . (W_uk c) = (W_uk^T q) . c, so scores come from the latent alone.
    full = queries @ keys.transpose(-1, -2)
    absorbed = torch.einsum("hin,hnr->hir", queries, key_up) @ latent.T
    torch.testing.assert_close(absorbed, full, rtol=1e-12, atol=1e-12)
    assert latent_fit_residual(latent, full) < 1e-12

    # RoPE on the full keys: k_j = R_j W_uk c_j. The rotation sits between W_uk and c_j and depends on j,
    # so absorbing W_uk into the (rotated) query gives other numbers, and no vector in latent space can:
    rotated_full = rotate_half_split(queries, positions) @ rotate_half_split(keys, positions).transpose(-1, -2)
    naive = torch.einsum("hin,hnr->hir", rotate_half_split(queries, positions), key_up) @ latent.T
    relative_error = ((naive - rotated_full).norm() / rotated_full.norm()).item()
    residual = latent_fit_residual(latent, rotated_full)
    print("rope on full keys: naive absorption relative error", relative_error, "best latent fit residual", residual)
    assert relative_error > 0.5
    assert residual > 0.3


def test_decoupled_rope_restores_absorption():
    # The module's logits (per-head keys rebuilt from the cache) equal absorbed_scores from the cache alone.
    mla = MultiHeadLatentAttention(**TINY, q_lora_rank=24, rope_scaling=dict(YARN)).double()
    with torch.no_grad():
        for param in mla.parameters():
            param.normal_(0.0, 0.3)
    x = torch.randn(2, SEQ, TINY["dim"], generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    positions = torch.arange(SEQ)
    with torch.no_grad():
        cache = LatentCache()
        naive, _ = mla.logits_and_values(x, cache=cache)
        q_nope, q_rope = mla.queries(x, positions)
        absorbed = absorbed_scores(q_nope, q_rope, cache.latent, cache.rope_key, mla.key_up_weight(),
                                   softmax_scale=mla.softmax_scale)
    print("absorbed - naive", (absorbed - naive).abs().max().item(), "logit scale", naive.abs().max().item())
    assert naive.abs().max() > 1
    torch.testing.assert_close(absorbed, naive, rtol=1e-12, atol=1e-10)
    # The cache is the latent plus ONE rotary key head: kv_lora_rank + qk_rope_head_dim numbers per token.
    assert cache.latent.shape[-1] + cache.rope_key.shape[-1] == 24


def test_rope_key_is_one_head_shared_by_all_heads():
    mla = MultiHeadLatentAttention(**TINY)
    latent, rope_key = torch.randn(1, 5, TINY["kv_lora_rank"]), torch.randn(1, 5, TINY["qk_rope_head_dim"])
    keys, values = mla.keys_values(latent, rope_key)
    assert keys.shape == (1, TINY["n_heads"], 5, 16) and values.shape == (1, TINY["n_heads"], 5, 8)
    for head in range(TINY["n_heads"]):
        torch.testing.assert_close(keys[0, head, :, 8:], rope_key[0], rtol=0, atol=0)


def test_deinterleave_then_half_split_equals_interleaved_rotation():
    # HF's rope_interleave path: the same rotation as pairs (2i, 2i+1), with the output de-interleaved.
    x = torch.randn(3, 7, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    positions = torch.arange(7)
    inv_freq = 10000.0 ** (-torch.arange(4, dtype=torch.float64) * 2 / 8)
    angles = positions.to(torch.float64)[:, None] * inv_freq
    pairs = torch.complex(x[..., 0::2], x[..., 1::2]) * torch.polar(torch.ones_like(angles), angles)
    interleaved = torch.stack((pairs.real, pairs.imag), dim=-1).flatten(-2)
    torch.testing.assert_close(rotate_half_split(deinterleave(x), positions), deinterleave(interleaved),
                               rtol=1e-12, atol=1e-12)


def test_bfloat16_keeps_float32_frequencies():
    mla = MultiHeadLatentAttention(**TINY, rope_scaling=dict(YARN)).to(torch.bfloat16)
    assert mla.inv_freq.dtype == torch.float32
    out = mla(torch.randn(1, 3, TINY["dim"], dtype=torch.bfloat16))
    assert out.dtype == torch.bfloat16 and out.shape == (1, 3, TINY["dim"])


# ---- errors name the argument --------------------------------------------------------------------------

@pytest.mark.parametrize("override, error, name", [
    (dict(qk_rope_head_dim=7), ValueError, "qk_rope_head_dim"),
    (dict(qk_rope_head_dim=0), ValueError, "qk_rope_head_dim"),
    (dict(kv_lora_rank=0), ValueError, "kv_lora_rank"),
    (dict(q_lora_rank=0), ValueError, "q_lora_rank"),
    (dict(qk_nope_head_dim=-1), ValueError, "qk_nope_head_dim"),
    (dict(v_head_dim=0), ValueError, "v_head_dim"),
    (dict(n_heads=0), ValueError, "n_heads"),
    (dict(kv_lora_rank=16.0), TypeError, "kv_lora_rank"),
    (dict(rope_interleaved="yes"), ValueError, "rope_interleaved"),
])
def test_bad_dims_name_the_argument(override, error, name):
    with pytest.raises(error, match=name):
        MultiHeadLatentAttention(**{**TINY, **override})


def test_bad_input_names_the_argument():
    mla = MultiHeadLatentAttention(**TINY)
    with pytest.raises(ValueError, match="x must be"):
        mla(torch.randn(1, 3, TINY["dim"] + 1))
    with pytest.raises(ValueError, match="x must be"):
        mla(torch.randn(3, TINY["dim"]))
    with pytest.raises(TypeError, match="cache"):
        mla(torch.randn(1, 3, TINY["dim"]), cache={})
    cache = LatentCache()
    mla(torch.randn(1, 3, TINY["dim"]), cache=cache)
    with pytest.raises(ValueError, match="cache"):
        mla(torch.randn(2, 1, TINY["dim"]), cache=cache)
    with pytest.raises(ValueError, match="head_dim"):
        yarn_softmax_scale(0, None)
    with pytest.raises(TypeError, match="scaling"):
        yarn_softmax_scale(16, "yarn")
    with pytest.raises(ValueError, match="factor"):
        yarn_softmax_scale(16, dict(rope_type="yarn", mscale_all_dim=1.0))


def test_absorbed_scores_checks_shapes():
    q_nope, q_rope = torch.randn(1, 4, 3, 8), torch.randn(1, 4, 3, 8)
    latent, rope_key, key_up = torch.randn(1, 5, 16), torch.randn(1, 5, 8), torch.randn(4, 8, 16)
    assert absorbed_scores(q_nope, q_rope, latent, rope_key, key_up, softmax_scale=1.0).shape == (1, 4, 3, 5)
    with pytest.raises(ValueError, match="q_nope"):
        absorbed_scores(q_nope[:, :2], q_rope, latent, rope_key, key_up, softmax_scale=1.0)
    with pytest.raises(ValueError, match="latent"):
        absorbed_scores(q_nope, q_rope, latent[..., :15], rope_key, key_up, softmax_scale=1.0)
    with pytest.raises(ValueError, match="q_rope"):
        absorbed_scores(q_nope, q_rope[:, :, :2], latent, rope_key, key_up, softmax_scale=1.0)
    with pytest.raises(ValueError, match="rope_key"):
        absorbed_scores(q_nope, q_rope, latent, rope_key[:, :4], key_up, softmax_scale=1.0)
