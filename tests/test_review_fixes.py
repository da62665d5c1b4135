"""Regression tests for the expert review's code findings (issue 12). Each fails on the code before the fix.

References are independent: float64 formulas, Hugging Face transformers (pinned), counts of calls.
"""

import math

import pytest
import torch
import torch.nn.functional as F

import posenc
from posenc import MultiHeadAttention, RotaryEmbedding, SinusoidalEncoding, TransformerLM, alibi_slopes
from posenc.rope import rope_frequencies


def rotate_float64(x, positions, head_dim, base=10000.0):
    """Half-split RoPE from the definition, in float64: the reference."""
    inv_freq = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = positions.double()[:, None] * inv_freq
    cos, sin = angles.cos(), angles.sin()
    x1, x2 = x.double().chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


# --- E1 / C1 / C6: frequencies and tables keep float32 through half-precision casts ----------------------

@pytest.mark.parametrize("cast", [lambda m: m.to(torch.bfloat16), lambda m: m.half(), lambda m: m.bfloat16()])
def test_rotary_inv_freq_stays_float32(cast):
    rotary = cast(RotaryEmbedding(128))
    assert rotary.inv_freq.dtype == torch.float32
    torch.testing.assert_close(rotary.inv_freq, rope_frequencies(128)[0], rtol=0, atol=0)


def test_bf16_rotation_at_position_8000_matches_float64_to_bf16_rounding():
    rotary = RotaryEmbedding(128).to(torch.bfloat16)
    torch.manual_seed(0)
    q = torch.randn(1, 2, 16, 128).to(torch.bfloat16)
    positions = torch.arange(8000, 8016)
    rotated, _ = rotary(q, q, positions=positions)
    expected = rotate_float64(q[0], positions, 128)
    # bf16 keeps 8 significant bits: the only error left is rounding the result (|x| <~ 4, so <~ 2**-6)
    # plus float32 angles (|angle| * 6e-8 ~ 5e-4 at p = 8000). A bf16 inv_freq gives errors of order 1.
    error = (rotated[0].double() - expected).abs().max().item()
    assert error < 0.03, error


def test_bf16_model_logits_match_float32_model_at_long_positions():
    torch.manual_seed(0)
    model = TransformerLM(19, 64, 2, 4, position="rope").eval()
    tokens = torch.randint(0, 19, (1, 8))
    reference = model(tokens, cache=_cache_at(model, 4096)).double()
    half = TransformerLM(19, 64, 2, 4, position="rope").eval()
    half.load_state_dict(model.state_dict())
    half = half.to(torch.bfloat16)
    assert half.blocks[0].attn.rotary.inv_freq.dtype == torch.float32
    logits = half(tokens, cache=_cache_at(half, 4096)).double()
    assert (logits - reference).abs().max().item() < 0.05


def _cache_at(model, length):
    # A cache holding `length` positions of zero keys/values, so the new tokens sit at positions >= length.
    cache = model.new_cache()
    dtype = model.token_embedding.weight.dtype
    for layer in cache.layers:
        layer.k = torch.zeros(1, 4, length, 16, dtype=dtype)
        layer.v = torch.zeros(1, 4, length, 16, dtype=dtype)
    return cache


def test_sinusoidal_table_stays_float32_before_and_after_growth():
    module = SinusoidalEncoding(16)
    module.table(10)
    module = module.half()
    assert module._table.dtype == torch.float32
    module.table(100)  # grows the cache
    assert module._table.dtype == torch.float32
    x = torch.zeros(1, 5, 16, dtype=torch.float16)
    assert module(x).dtype == torch.float16


def test_alibi_slopes_buffer_stays_float32():
    attention = MultiHeadAttention(48, 6, position="alibi").to(torch.bfloat16)  # 6 heads: slopes not powers of 2
    assert attention.slopes.dtype == torch.float32
    torch.testing.assert_close(attention.slopes, alibi_slopes(6), rtol=0, atol=0)


# --- llama3 with equal factors (Llama 4 Scout) equals Hugging Face -------------------------------------

def test_llama3_with_equal_factors_equals_hugging_face():
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    scaling = {"rope_type": "llama3", "factor": 16.0, "low_freq_factor": 1.0, "high_freq_factor": 1.0,
               "original_max_position_embeddings": 8192}
    config = LlamaConfig(hidden_size=512, num_attention_heads=4, head_dim=128, max_position_embeddings=8192 * 16,
                         rope_parameters={**scaling, "rope_theta": 500000.0})
    expected, _ = ROPE_INIT_FUNCTIONS["llama3"](config, "cpu")
    got, scale = rope_frequencies(128, base=500000.0, scaling=scaling)
    assert not torch.isnan(got).any() and scale == 1.0
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=0)
    # and by hand: pairs with wavelength above 8192 are divided by 16, the others kept
    inv_freq = rope_frequencies(128, base=500000.0)[0]
    by_hand = torch.where(2 * math.pi / inv_freq > 8192, inv_freq / 16, inv_freq)
    torch.testing.assert_close(got, by_hand, rtol=0, atol=0)


def test_a_llama3_config_with_an_attention_factor_is_refused_since_transformers_ignores_it():
    """Review P4-n4: transformers' llama3 rule scales cos and sin by 1.0 whatever attention_factor says;
    posenc would apply it, so reading such a config gives a plan that differs from the model."""
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    from posenc import plan_from_hf_config

    scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192, "attention_factor": 1.2, "rope_theta": 500000.0}
    config = LlamaConfig(hidden_size=256, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2,
                         intermediate_size=512, max_position_embeddings=8192 * 8, rope_parameters=scaling)
    assert ROPE_INIT_FUNCTIONS["llama3"](config, "cpu")[1] == 1.0  # transformers: no cos/sin scale
    assert rope_frequencies(64, base=500000.0, scaling=scaling)[1] == pytest.approx(1.2)  # posenc: applied
    with pytest.raises(ValueError, match="attention_factor"):
        plan_from_hf_config(config)
    config.rope_parameters = {k: v for k, v in scaling.items() if k != "attention_factor"}
    assert plan_from_hf_config(config)[0].rope.scaling["rope_type"] == "llama3"


# --- M8: materialised biases reach SDPA as 4-D masks ---------------------------------------------------

@pytest.fixture
def mask_ranks(monkeypatch):
    ranks = []
    original = F.scaled_dot_product_attention

    def recording(q, k, v, attn_mask=None, **options):
        if attn_mask is not None:
            ranks.append(attn_mask.dim())
        return original(q, k, v, attn_mask=attn_mask, **options)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", recording)
    return ranks


@pytest.mark.parametrize("position", ["t5", "alibi", "rope", "none"])
def test_materialised_masks_are_four_dimensional(position, mask_ranks):
    torch.manual_seed(0)
    model = TransformerLM(23, 32, 2, 4, position=position).eval()
    tokens = torch.randint(0, 23, (1, 10))
    with torch.no_grad():
        model(tokens)  # full pass
        cache = model.new_cache()
        model(tokens[:, :6], cache=cache)
        model(tokens[:, 6:], cache=cache)  # chunk with a cache: a materialised causal mask for every method
    assert mask_ranks and set(mask_ranks) == {4}, mask_ranks


def test_alibi_attention_materialised_path_is_four_dimensional(mask_ranks):
    q = torch.randn(1, 4, 5, 8, dtype=torch.bfloat16)
    k = v = torch.randn(1, 4, 9, 8, dtype=torch.bfloat16)
    posenc.alibi_attention(q, k, v)
    assert mask_ranks == [4]


# --- C5: the T5 bias is computed once per forward pass ------------------------------------------------

def test_t5_bias_computed_once_per_forward(monkeypatch):
    calls = []
    original = posenc.T5RelativeBias.forward
    monkeypatch.setattr(posenc.T5RelativeBias, "forward", lambda self, *a: calls.append(a) or original(self, *a))
    model = TransformerLM(23, 32, 4, 4, position="t5").eval()
    with torch.no_grad():
        model(torch.randint(0, 23, (2, 12)))
    assert len(calls) == 1


@pytest.mark.parametrize("bidirectional", [True, False])
def test_t5_bias_grid_equals_hugging_face_buckets(bidirectional):
    from transformers.models.t5 import modeling_t5 as t5

    torch.manual_seed(0)
    module = posenc.T5RelativeBias(3, bidirectional=bidirectional, num_buckets=32, max_distance=128)
    q_len, k_len = 7, 300
    query = torch.arange(k_len - q_len, k_len)[:, None]
    key = torch.arange(k_len)[None, :]
    buckets = t5.T5Attention._relative_position_bucket(key - query, bidirectional, 32, 128)
    expected = module.table.weight.detach()[buckets].permute(2, 0, 1)
    bias = module(q_len, k_len)
    assert torch.equal(bias.detach(), expected)
    assert bias.is_contiguous()  # a strided view as mask costs SDPA about 2.5x (measured in chapter 5)


# --- C4: absolute methods are not accepted inside attention -------------------------------------------

@pytest.mark.parametrize("position", ["sinusoidal", "learned"])
def test_attention_refuses_absolute_methods(position):
    with pytest.raises(ValueError, match="absolute encoding"):
        MultiHeadAttention(16, 4, position=position)


def test_model_with_absolute_methods_uses_position_free_attention():
    model = TransformerLM(11, 16, 1, 2, position="sinusoidal")
    assert model.blocks[0].attn.position == "none" and model.absolute is not None


# --- C2 / m30: no host synchronisation inside RotaryEmbedding ----------------------------------------

def test_rotary_embedding_does_not_inspect_table_values(monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("RotaryEmbedding built the tables; it must not compare them (a GPU sync)")

    monkeypatch.setattr(posenc.rope.kernels, "_angles_repeat_per_pair", forbidden)
    rotary = RotaryEmbedding(16)
    q = torch.randn(2, 3, 5, 16)
    rotated, _ = rotary(q, q, offset=4)
    expected = rotate_float64(q, torch.arange(4, 9), 16)
    torch.testing.assert_close(rotated.double(), expected, rtol=0, atol=1e-5)


def test_token_range_check_can_be_switched_off():
    model = TransformerLM(11, 16, 1, 2, position="none")
    with pytest.raises(ValueError, match="token ids"):
        model(torch.tensor([[11]]))
    model.check_token_range = False
    with pytest.raises(IndexError):  # no friendly message then: the embedding lookup fails
        model(torch.tensor([[11]]))


def test_holding_factor_reaches_the_entropy_it_is_asked_for():
    # P5-m1: the factor that holds the entropy is found numerically; checked on scores whose entropy has
    # a closed form: one key scoring 1 above n - 1 keys scoring 0
    from posenc.temperature import holding_factor, softmax_entropy
    n = 1000
    scores = torch.zeros(1, n, dtype=torch.float64)
    scores[0, 0] = 1.0

    def closed_form(tau):
        p = math.exp(tau) / (math.exp(tau) + n - 1)
        return -p * math.log(p) - (1 - p) * math.log((1 - p) / (n - 1))

    assert abs(float(softmax_entropy(torch.zeros(3, n, dtype=torch.float64))[0]) - math.log(n)) < 1e-12
    for target in (1.0, 3.0, 6.0):
        tau = holding_factor(scores, target)
        assert abs(closed_form(tau) - target) < 1e-9
    with pytest.raises(ValueError, match="not reached"):
        holding_factor(scores, math.log(n) + 0.1)
