"""The sigmoid output gate of gated attention (Qiu et al. 2025, G1; Qwen3-Next's attention layers).

Checked against a float64 formula written out here, and against transformers' Qwen3-Next attention, which
computes the same gate from the second half of a doubled query projection."""

import math

import pytest
import torch

import posenc
from posenc.attention import MultiHeadAttention
from posenc.plan import LayerSpec, plan_from_dict, plan_to_dict


def _heads_by_formula(layer, x):
    """softmax(q k^T / sqrt(d) + causal mask) v, head by head and query by query, concatenated: [b, t, h*d]."""
    b, t, _ = x.shape
    h, d = layer.n_heads, layer.head_dim
    q, k, v = (x @ layer.qkv.weight.T + layer.qkv.bias).view(b, t, 3, h, d).unbind(2)
    out = torch.zeros(b, t, h, d, dtype=x.dtype)
    for i in range(t):
        scores = torch.einsum("bhd,bjhd->bhj", q[:, i], k[:, :i + 1]) / math.sqrt(d)
        out[:, i] = torch.einsum("bhj,bjhd->bhd", scores.softmax(-1), v[:, :i + 1])
    return out.reshape(b, t, h * d)


def test_gate_multiplies_each_head_output_by_a_sigmoid_of_the_input():
    torch.manual_seed(0)
    layer = MultiHeadAttention.from_spec(16, 2, LayerSpec("none", gate=True)).double()
    x = torch.randn(3, 9, 16, dtype=torch.float64)
    gate = torch.sigmoid(x @ layer.gate.weight.T + layer.gate.bias)
    expected = (_heads_by_formula(layer, x) * gate) @ layer.out.weight.T + layer.out.bias
    torch.testing.assert_close(layer(x), expected, rtol=1e-10, atol=1e-12)
    assert layer.spec == LayerSpec("none", gate=True)
    plain = MultiHeadAttention.from_spec(16, 2, LayerSpec("none")).double()
    plain.load_state_dict({k: v for k, v in layer.state_dict().items() if not k.startswith("gate.")})
    assert (plain(x) - layer(x)).abs().max() > 1e-3  # the gate changes the output


def test_gated_layer_decodes_with_a_cache_and_round_trips_through_a_plan():
    torch.manual_seed(1)
    plan = [LayerSpec("rope", gate=True), LayerSpec("rope", sinks=True, gate=True)]
    assert plan_from_dict(plan_to_dict(plan)) == plan
    assert plan[1].describe() == "rope sinks gate"
    model = posenc.TransformerLM(64, 32, 2, 4, position="none", plan=plan).eval()
    tokens = torch.randint(0, 64, (2, 12))
    full = model(tokens)
    cache = model.new_cache()
    steps = torch.cat([model(tokens[:, t:t + 1], cache=cache) for t in range(12)], dim=1)
    torch.testing.assert_close(steps, full, rtol=1e-4, atol=1e-5)
    gates = sum(block.attn.gate.weight.numel() + block.attn.gate.bias.numel() for block in model.blocks)
    assert gates == 2 * (32 * 32 + 32)  # one [dim, heads * head_dim] projection and bias per layer


def test_gate_matches_qwen3_next_attention():
    transformers = pytest.importorskip("transformers")
    from transformers.models.qwen3_next import modeling_qwen3_next as qn
    config = transformers.Qwen3NextConfig(hidden_size=32, num_attention_heads=2, num_key_value_heads=2, head_dim=16,
                                          partial_rotary_factor=1.0, attention_bias=False)
    config._attn_implementation = "eager"
    torch.manual_seed(2)
    theirs = qn.Qwen3NextAttention(config, layer_idx=3).double().eval()
    theirs.q_norm = theirs.k_norm = torch.nn.Identity()  # posenc's layer has no QK-norm
    ours = MultiHeadAttention.from_spec(32, 2, LayerSpec("rope", gate=True)).double().eval()
    h, d = 2, 16
    q_and_gate = theirs.q_proj.weight.view(h, 2 * d, 32)
    with torch.no_grad():
        ours.qkv.weight.copy_(torch.cat([q_and_gate[:, :d].reshape(h * d, 32), theirs.k_proj.weight,
                                         theirs.v_proj.weight]))
        ours.qkv.bias.zero_()
        ours.gate.weight.copy_(q_and_gate[:, d:].reshape(h * d, 32))
        ours.gate.bias.zero_()
        ours.out.weight.copy_(theirs.o_proj.weight)
        ours.out.bias.zero_()
    x = torch.randn(2, 10, 32, dtype=torch.float64)
    rotary = qn.Qwen3NextRotaryEmbedding(config)
    cos, sin = rotary(x, torch.arange(10)[None])
    mask = torch.full((10, 10), float("-inf"), dtype=torch.float64).triu(1)[None, None]
    expected, _ = theirs(x, (cos.double(), sin.double()), mask)
    # transformers builds its cos / sin tables from float32 frequencies: agreement to ~1e-7, not 1e-12
    torch.testing.assert_close(ours(x), expected, rtol=1e-5, atol=1e-6)
