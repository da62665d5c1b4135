"""The layers a Llama needs beyond position: RMSNorm, SwiGLU, grouped-query attention, untied embeddings.

Each is checked against its formula written out here (float64), and a model built with them keeps posenc's
contract: cached decoding equals the full pass for every plan. The whole pretrained model is checked against
transformers in tests/test_pretrained.py.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from posenc import (GroupedQueryAttention, LayerCache, LayerSpec, MultiHeadAttention, RMSNorm, SwiGLU, TransformerLM,
                    family_plan)
from posenc.gqa import repeat_kv_heads
from posenc.plan import Rope


def test_rms_norm_is_its_formula():
    x = torch.randn(3, 5, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    norm = RMSNorm(16, eps=1e-5).double()
    with torch.no_grad():
        norm.weight.copy_(torch.linspace(0.5, 2.0, 16))
    expected = norm.weight * x / torch.sqrt((x ** 2).mean(-1, keepdim=True) + 1e-5)
    torch.testing.assert_close(norm(x), expected, rtol=1e-12, atol=0)


def test_rms_norm_of_half_precision_is_computed_in_float32():
    x = torch.randn(4, 64, generator=torch.Generator().manual_seed(1)) * 300  # squares overflow float16
    norm = RMSNorm(64)
    out = norm(x.half())
    assert out.dtype == torch.float32  # the float32 weight times the float16 result, as Hugging Face's
    torch.testing.assert_close(out, norm(x), rtol=2e-3, atol=0)
    assert torch.isfinite(out).all()


def test_swiglu_is_its_formula():
    torch.manual_seed(2)
    layer = SwiGLU(8, 12).double()
    x = torch.randn(2, 3, 8, dtype=torch.float64)
    gate, up, down = layer.gate_proj.weight, layer.up_proj.weight, layer.down_proj.weight
    silu = lambda t: t / (1 + torch.exp(-t))  # noqa: E731
    torch.testing.assert_close(layer(x), (silu(x @ gate.T) * (x @ up.T)) @ down.T, rtol=1e-12, atol=1e-14)
    assert layer.gate_proj.bias is None and SwiGLU(8, 12, bias=True).gate_proj.bias is not None


def test_repeat_kv_heads_gives_each_query_head_its_group():
    k = torch.arange(3.0)[None, :, None, None].expand(1, 3, 2, 4)  # head h holds the value h
    repeated = repeat_kv_heads(k, 3)
    assert repeated.shape == (1, 9, 2, 4)
    assert repeated[0, :, 0, 0].tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]  # query head h reads head h // 3
    assert repeat_kv_heads(k, 1) is k


@pytest.mark.parametrize("position", ["none", "rope", "alibi", "t5"])
def test_grouped_query_attention_is_multi_head_attention_with_shared_keys(position):
    """An ordinary attention layer whose key and value heads are copies of the grouped ones, head h // 3 for query
    head h, must give the same outputs: the grouping is only a sharing of weights."""
    torch.manual_seed(3)
    dim, heads, kv_heads, head_dim = 24, 6, 2, 4
    grouped = GroupedQueryAttention(dim, heads, n_kv_heads=kv_heads, head_dim=head_dim, position=position).double()
    plain = MultiHeadAttention(dim, heads, head_dim=head_dim, position=position).double()
    q_rows, k_rows, v_rows = grouped.qkv.weight.split([heads * head_dim, kv_heads * head_dim, kv_heads * head_dim])
    q_bias, k_bias, v_bias = grouped.qkv.bias.split([heads * head_dim, kv_heads * head_dim, kv_heads * head_dim])

    def per_query_head(rows):  # [kv_heads * head_dim, ...] -> [heads * head_dim, ...], head h // 3 for head h
        return rows.reshape(kv_heads, head_dim, *rows.shape[1:]).repeat_interleave(heads // kv_heads, dim=0).reshape(
            heads * head_dim, *rows.shape[1:])

    with torch.no_grad():
        plain.qkv.weight.copy_(torch.cat([q_rows, per_query_head(k_rows), per_query_head(v_rows)]))
        plain.qkv.bias.copy_(torch.cat([q_bias, per_query_head(k_bias), per_query_head(v_bias)]))
        plain.out.load_state_dict(grouped.out.state_dict())
        if position == "t5":
            plain.t5_bias.load_state_dict(grouped.t5_bias.state_dict())
        x = torch.randn(2, 9, dim, dtype=torch.float64)
        torch.testing.assert_close(grouped(x), plain(x), rtol=0, atol=1e-12)
        (_, grouped_weights), (_, plain_weights) = grouped(x, need_weights=True), plain(x, need_weights=True)
        assert grouped_weights.shape == (2, heads, 9, 9)  # one attention map per query head
        torch.testing.assert_close(grouped_weights, plain_weights, rtol=0, atol=1e-12)


def test_grouped_query_attention_caches_only_its_key_value_heads():
    layer = GroupedQueryAttention(32, 8, n_kv_heads=2, position="rope", bias=False)
    cache = LayerCache()
    with torch.no_grad():
        layer(torch.randn(1, 5, 32), cache=cache)
    assert cache.k.shape == (1, 2, 5, 4) and cache.v.shape == (1, 2, 5, 4)
    assert layer.qkv.weight.shape == (8 * 4 + 2 * 2 * 4, 32) and layer.qkv.bias is None and layer.out.bias is None


def llama_like(plan, **options):
    torch.manual_seed(4)
    return TransformerLM(41, 32, len(plan), 4, position="none", plan=plan, n_kv_heads=2, bias=False, norm="rms",
                         mlp="swiglu", mlp_hidden=48, tie_embeddings=False, **options).eval()


PLANS = {
    "rope": [LayerSpec("rope", rope=Rope(1e5))] * 2,
    "gemma3 (windows, two bases)": family_plan("gemma3", 6, window=5),
    "gpt-oss (yarn, sinks)": family_plan("gpt-oss", 2, window=5, original_context=8),
    "alibi and t5": [LayerSpec("alibi"), LayerSpec("t5")],
    "llama4 (chunks, temperature, interleaved llama3)": family_plan("llama4", 4, window=5, original_context=8),
}  # not dynamic NTK: its cached keys keep the rotation of the length they came at (as Hugging Face's)


@pytest.mark.parametrize("name", PLANS)
def test_llama_architecture_decodes_with_the_cache_as_the_full_pass(name):
    model = llama_like(PLANS[name])
    tokens = torch.randint(0, 41, (2, 20), generator=torch.Generator().manual_seed(5))
    cache = model.new_cache()
    with torch.no_grad():
        full = model(tokens)
        steps = torch.cat([model(tokens[:, :7], cache=cache)] + [model(tokens[:, t:t + 1], cache=cache)
                                                                 for t in range(7, 20)], dim=1)
    torch.testing.assert_close(steps, full, rtol=0, atol=1e-5)


def test_llama_architecture_with_a_rolling_cache_keeps_the_window():
    model = llama_like(PLANS["rope"])
    cache = model.new_cache(sink_tokens=2, window=6)
    with torch.no_grad():
        for t in range(12):
            model(torch.tensor([[t % 41]]), cache=cache)
    assert cache[0].k.shape == (1, 2, 8, 8)  # 2 sinks + 6 kept, 2 key/value heads of 8


def test_untied_head_and_default_architecture():
    model = llama_like(PLANS["rope"])
    assert model.head.weight is not model.token_embedding.weight
    assert isinstance(model.blocks[0].ln_attn, RMSNorm) and isinstance(model.blocks[0].mlp, SwiGLU)
    assert isinstance(model.blocks[0].attn, GroupedQueryAttention)
    # the defaults are the book's GPT-style model, parameter for parameter (committed records load into it)
    default = TransformerLM(41, 32, 2, 4, position="rope")
    assert default.head.weight is default.token_embedding.weight
    assert type(default.blocks[0].attn) is MultiHeadAttention
    assert sorted(name for name in default.state_dict() if name.startswith("blocks.0.")) == [
        "blocks.0.attn.out.bias", "blocks.0.attn.out.weight", "blocks.0.attn.qkv.bias", "blocks.0.attn.qkv.weight",
        "blocks.0.ln_attn.bias", "blocks.0.ln_attn.weight", "blocks.0.ln_mlp.bias", "blocks.0.ln_mlp.weight",
        "blocks.0.mlp.0.bias", "blocks.0.mlp.0.weight", "blocks.0.mlp.2.bias", "blocks.0.mlp.2.weight"]


def test_gelu_mlp_without_biases_and_its_width():
    model = TransformerLM(41, 32, 1, 4, position="rope", bias=False, mlp_hidden=40)
    assert model.blocks[0].mlp[0].weight.shape == (40, 32) and model.blocks[0].mlp[0].bias is None
    assert model.blocks[0].attn.qkv.bias is None
    x = torch.randn(1, 3, 32)
    expected = F.linear(F.gelu(F.linear(x, model.blocks[0].mlp[0].weight)), model.blocks[0].mlp[2].weight)
    torch.testing.assert_close(model.blocks[0].mlp(x), expected)


def test_bad_architecture_options_name_the_argument():
    with pytest.raises(ValueError, match="n_kv_heads must divide n_heads=4"):
        TransformerLM(41, 32, 1, 4, position="rope", n_kv_heads=3)
    with pytest.raises(ValueError, match="norm must be one of"):
        TransformerLM(41, 32, 1, 4, position="rope", norm="batch")
    with pytest.raises(ValueError, match="mlp must be one of"):
        TransformerLM(41, 32, 1, 4, position="rope", mlp="relu")
    with pytest.raises(ValueError, match="norm_eps"):
        TransformerLM(41, 32, 1, 4, position="rope", norm_eps=0.0)
    with pytest.raises(ValueError, match="mixer='decay'"):
        TransformerLM(41, 32, 1, 4, position="none", plan=[LayerSpec(mixer="decay")], n_kv_heads=2)
