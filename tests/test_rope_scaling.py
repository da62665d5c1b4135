"""RoPE frequency schemes of 2026's models, each equal to Hugging Face transformers 5.23.

Partial rotary with every rope_type, ``longrope`` (Phi-3), ``proportional`` (Gemma 4), ``llama3`` with an
empty blend band (Llama 4 Scout), HF v5 ``rope_parameters`` (rope_theta inside, nested per layer type), and
``RotaryEmbedding`` against the rotary classes of Phi-3, GLM-4, Gemma 3 and Gemma 4 built from tiny configs.
The references are Hugging Face's own functions and float64 formulas written out here; the largest
differences seen are noted beside each tolerance.
"""

import math

import pytest
import torch

from posenc.rope import RotaryEmbedding, apply_rope, rope_cos_sin, rope_frequencies
from posenc.rope.scaling import rope_parameters_for


def llama_config(head_dim, rope_parameters, max_position_embeddings):
    from transformers import LlamaConfig

    return LlamaConfig(hidden_size=4 * head_dim, num_attention_heads=4, head_dim=head_dim, num_hidden_layers=1,
                       max_position_embeddings=max_position_embeddings, rope_parameters=dict(rope_parameters))


def phi3_config(head_dim, rope_parameters, max_position_embeddings, original_max_position_embeddings=None):
    from transformers import Phi3Config

    return Phi3Config(hidden_size=4 * head_dim, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=1,
                      max_position_embeddings=max_position_embeddings,
                      original_max_position_embeddings=original_max_position_embeddings or max_position_embeddings,
                      rope_parameters=dict(rope_parameters))


def hugging_face(head_dim, rope_parameters, *, max_position_embeddings=1 << 17, seq_len=None):
    """(inv_freq, attention_factor) from transformers 5.23 for a v5 ``rope_parameters`` dict."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    if rope_parameters["rope_type"] == "default":  # not in the registry: a model's own function (Phi-3 reads p)
        from transformers.models.phi3.modeling_phi3 import Phi3RotaryEmbedding

        config = phi3_config(head_dim, rope_parameters, max_position_embeddings)
        return Phi3RotaryEmbedding.compute_default_rope_parameters(config)
    config = llama_config(head_dim, rope_parameters, max_position_embeddings)
    return ROPE_INIT_FUNCTIONS[rope_parameters["rope_type"]](config, "cpu", seq_len=seq_len)


def random_factors(n, seed):
    return (1 + 39 * torch.rand(n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)).tolist()


# ---- partial rotary with every rope_type ----------------------------------------------------------------

PARTIAL_CASES = [
    (64, {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5}),
    (80, {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.4}),  # 32 of 80 features
    (96, {"rope_type": "default", "rope_theta": 500000.0, "partial_rotary_factor": 0.25}),
    (64, {"rope_type": "linear", "factor": 4.0, "rope_theta": 10000.0, "partial_rotary_factor": 0.5}),
    (128, {"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 4096, "rope_theta": 10000.0,
           "partial_rotary_factor": 0.5}),
    (64, {"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096, "rope_theta": 150000.0,
          "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False, "partial_rotary_factor": 0.25}),
    (128, {"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096, "rope_theta": 10000.0,
           "mscale": 1.0, "mscale_all_dim": 0.707, "partial_rotary_factor": 0.75}),
    (128, {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
           "original_max_position_embeddings": 8192, "rope_theta": 500000.0, "partial_rotary_factor": 0.5}),
    (128, {"rope_type": "llama3", "factor": 16.0, "low_freq_factor": 1.0, "high_freq_factor": 1.0,
           "original_max_position_embeddings": 8192, "rope_theta": 500000.0, "partial_rotary_factor": 0.75}),
    (64, {"rope_type": "longrope", "short_factor": random_factors(16, 0), "long_factor": random_factors(16, 1),
          "original_max_position_embeddings": 1024, "factor": 8.0, "rope_theta": 10000.0,
          "partial_rotary_factor": 0.5}),
]


@pytest.mark.parametrize("head_dim,rope_parameters", PARTIAL_CASES)
def test_partial_rotary_equals_hugging_face(head_dim, rope_parameters):
    expected, expected_scale = hugging_face(head_dim, rope_parameters)
    inv_freq, scale = rope_frequencies(head_dim, scaling=rope_parameters)  # base from rope_theta
    rotary_dim = int(head_dim * rope_parameters["partial_rotary_factor"])
    assert inv_freq.shape == (rotary_dim // 2,) and inv_freq.dtype == torch.float32
    torch.testing.assert_close(inv_freq, expected, rtol=1e-6, atol=0)  # largest seen: 8.8e-8 relative
    assert scale == pytest.approx(expected_scale, rel=1e-12)


def test_partial_rotary_by_hand():
    # exponents over the rotary dim r, not head_dim: inv_freq[i] = base ** (-2i / r), in float64
    inv_freq, _ = rope_frequencies(80, scaling={"rope_type": "default", "partial_rotary_factor": 0.4})
    expected = torch.tensor([10000.0 ** (-2 * i / 32) for i in range(16)], dtype=torch.float64)
    torch.testing.assert_close(inv_freq.double(), expected, rtol=1e-6, atol=0)
    # ntk (posenc's own) changes the base with the rotary dim's exponent r / (r - 2)
    inv_freq, _ = rope_frequencies(16, scaling={"rope_type": "ntk", "factor": 4.0, "partial_rotary_factor": 0.5})
    ntk_base = 10000.0 * 4.0 ** (8 / 6)
    torch.testing.assert_close(inv_freq.double(), torch.tensor([ntk_base ** (-2 * i / 8) for i in range(4)],
                                                               dtype=torch.float64), rtol=1e-6, atol=0)


@pytest.mark.parametrize("seq_len", [None, 1000, 2048, 3000, 9000])
def test_partial_dynamic_equals_hugging_face(seq_len):
    # Hugging Face grows dynamic NTK from config.max_position_embeddings (our original_max_position_embeddings)
    hf = {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0, "partial_rotary_factor": 0.25}
    expected, _ = hugging_face(128, hf, max_position_embeddings=2048, seq_len=seq_len)
    ours = {**hf, "original_max_position_embeddings": 2048}
    inv_freq, _ = rope_frequencies(128, scaling=ours, seq_len=seq_len)
    assert inv_freq.shape == (16,)
    torch.testing.assert_close(inv_freq, expected, rtol=1e-6, atol=0)  # largest seen: 0 (bit-equal)


@pytest.mark.parametrize("seq_len", [None, 1000, 3000, 9000])
def test_dynamic_takes_hugging_faces_dict(seq_len):
    # review P4-n6: Hugging Face's dynamic dict names only factor (and rope_theta); the original length is
    # config.max_position_embeddings, which posenc accepts under that name
    hf = {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}
    expected, _ = hugging_face(64, hf, max_position_embeddings=2048, seq_len=seq_len)
    inv_freq, _ = rope_frequencies(64, scaling={**hf, "max_position_embeddings": 2048}, seq_len=seq_len)
    torch.testing.assert_close(inv_freq, expected, rtol=1e-6, atol=0)
    # by hand: base * (s * L / L0 - (s - 1)) ** (d / (d - 2)), with L = max(seq_len, L0)
    length = max(seq_len or 2048, 2048)
    base = 10000.0 * (2.0 * length / 2048 - 1.0) ** (64 / 62)
    torch.testing.assert_close(inv_freq.double(), base ** -(torch.arange(0, 64, 2, dtype=torch.float64) / 64),
                               rtol=1e-6, atol=0)
    rotary = RotaryEmbedding(64, scaling={**hf, "max_position_embeddings": 2048})  # the module reads it too
    torch.testing.assert_close(rotary.frequencies_for(torch.arange(seq_len or 1)), expected if seq_len else
                               rope_frequencies(64, scaling={**hf, "max_position_embeddings": 2048})[0])


def test_dynamic_original_length_errors_name_the_keys():
    with pytest.raises(ValueError, match="original_max_position_embeddings.*max_position_embeddings"):
        rope_frequencies(64, scaling={"rope_type": "dynamic", "factor": 2.0})
    with pytest.raises(ValueError, match="disagree"):
        rope_frequencies(64, scaling={"rope_type": "dynamic", "factor": 2.0, "max_position_embeddings": 2048,
                                      "original_max_position_embeddings": 4096})


# ---- longrope --------------------------------------------------------------------------------------------

LONGROPE = {"rope_type": "longrope", "short_factor": random_factors(32, 2), "long_factor": random_factors(32, 3),
            "original_max_position_embeddings": 4096, "rope_theta": 10000.0}


@pytest.mark.parametrize("seq_len", [None, 100, 4096, 4097, 131072])
@pytest.mark.parametrize("extra", [{"factor": 32.0}, {"attention_factor": 1.2}, {"factor": 1.0}])
def test_longrope_equals_hugging_face(seq_len, extra):
    params = {**LONGROPE, **extra}
    expected, expected_scale = hugging_face(64, params, seq_len=seq_len)
    inv_freq, scale = rope_frequencies(64, scaling=params, seq_len=seq_len)
    torch.testing.assert_close(inv_freq, expected, rtol=0, atol=0)  # bit-equal
    assert scale == pytest.approx(expected_scale, rel=1e-12)


def test_longrope_with_a_cache_is_not_the_full_pass():
    # review P4-m6 (chapter 13): like Hugging Face's longrope_frequency_update, the table follows
    # max(position) + 1, so keys cached one by one below the original length keep the short table while a
    # full pass over a longer input rotates every key with the long one
    scaling = {"rope_type": "longrope", "short_factor": random_factors(8, 4), "long_factor": random_factors(8, 5),
               "original_max_position_embeddings": 32, "factor": 4.0, "rope_theta": 10000.0}
    rotary = RotaryEmbedding(16, scaling=scaling)
    short, scale = rope_frequencies(16, scaling=scaling)  # seq_len None: the short table
    long, _ = rope_frequencies(16, scaling=scaling, seq_len=33)
    assert not torch.allclose(short, long)
    k = torch.randn(1, 1, 48, 16, generator=torch.Generator().manual_seed(6))

    def by_hand(inv_freq, positions):
        return apply_rope(k[:, :, positions], *rope_cos_sin(positions, inv_freq, attention_scale=scale))

    _, cached = zip(*(rotary(k[:, :, t:t + 1], k[:, :, t:t + 1], positions=torch.tensor([t]))
                      for t in range(48)))  # decoding: each key rotated when it arrives
    cached = torch.cat(cached, dim=2)
    _, full = rotary(k, k, positions=torch.arange(48))  # one pass over all 48
    torch.testing.assert_close(cached[:, :, :32], by_hand(short, torch.arange(32)))
    torch.testing.assert_close(cached[:, :, 32:], by_hand(long, torch.arange(32, 48)))
    torch.testing.assert_close(full, by_hand(long, torch.arange(48)))
    assert (cached[:, :, :32] - full[:, :, :32]).abs().max() > 1e-2  # the early keys: not the full pass's


@pytest.mark.parametrize("seq_len", [None, 4096, 4097])
def test_longrope_by_hand(seq_len):
    # inv_freq[i] = 1 / (ext_i * base ** (2i / d)), ext = long factors only past the original length;
    # cos/sin scale sqrt(1 + ln s / ln L0)
    inv_freq, scale = rope_frequencies(64, scaling={**LONGROPE, "factor": 32.0}, seq_len=seq_len)
    ext = LONGROPE["long_factor"] if seq_len == 4097 else LONGROPE["short_factor"]
    expected = torch.tensor([1 / (ext[i] * 10000.0 ** (2 * i / 64)) for i in range(32)], dtype=torch.float64)
    torch.testing.assert_close(inv_freq.double(), expected, rtol=1e-6, atol=0)
    assert scale == pytest.approx(math.sqrt(1 + math.log(32) / math.log(4096)), rel=1e-14)


def test_longrope_factor_from_max_position_embeddings_as_hugging_face_derives_it():
    # Phi-3's configs carry no factor: Hugging Face takes max_position_embeddings / original (131072 / 4096 = 32)
    expected, expected_scale = hugging_face(64, LONGROPE, max_position_embeddings=131072)
    inv_freq, scale = rope_frequencies(64, scaling={**LONGROPE, "max_position_embeddings": 131072})
    torch.testing.assert_close(inv_freq, expected, rtol=0, atol=0)
    assert scale == pytest.approx(expected_scale, rel=1e-12)
    assert scale == pytest.approx(math.sqrt(1 + math.log(32) / math.log(4096)), rel=1e-14)
    # max_position_embeddings equal to the original (Phi-3-mini-4k): no scale
    assert rope_frequencies(64, scaling={**LONGROPE, "max_position_embeddings": 4096})[1] == 1.0


# ---- proportional ----------------------------------------------------------------------------------------

PROPORTIONAL_CASES = [
    (32, {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1e6}),
    (32, {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1e6, "factor": 8.0}),
    (20, {"rope_type": "proportional", "partial_rotary_factor": 0.3, "rope_theta": 1e4}),  # 3 of 10 pairs
    (512, {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1e6}),  # Gemma 4 global
    (16, {"rope_type": "proportional", "partial_rotary_factor": 1.0, "rope_theta": 1e4, "factor": 2.0}),
]


@pytest.mark.parametrize("head_dim,rope_parameters", PROPORTIONAL_CASES)
def test_proportional_equals_hugging_face(head_dim, rope_parameters):
    expected, expected_scale = hugging_face(head_dim, rope_parameters)
    inv_freq, scale = rope_frequencies(head_dim, scaling=rope_parameters)
    assert inv_freq.shape == (head_dim // 2,) and scale == expected_scale == 1.0
    torch.testing.assert_close(inv_freq, expected, rtol=0, atol=0)  # bit-equal
    # by hand: the first int(p * d // 2) pairs turn at base ** (-2i / d) / factor (the FULL head_dim), the rest 0
    share, base = rope_parameters["partial_rotary_factor"], rope_parameters["rope_theta"]
    turning = int(share * head_dim // 2)
    by_hand = [base ** (-2 * i / head_dim) / rope_parameters.get("factor", 1.0) if i < turning else 0.0
               for i in range(head_dim // 2)]
    torch.testing.assert_close(inv_freq.double(), torch.tensor(by_hand, dtype=torch.float64), rtol=1e-6, atol=0)


def test_partial_rotary_equals_proportional_with_a_larger_base_after_a_permutation():
    """Partial rotary (r of d features, base b) is proportional RoPE (p = r/d) with base b ** (d / r).

    Partial: pairs (i, i + r/2) for i < r/2 turn at b ** (-2i / r). Proportional: pairs (i, i + d/2) turn at
    b' ** (-2i / d) for i < r/2, so b' ** (1/d) = b ** (1/r), i.e. b' = b ** (d/r). The half-split layouts
    pair different features, so the equality holds after moving features r/2 .. r-1 to d/2 .. d/2 + r/2 - 1.
    Interleaved, both rotate the first r features pairwise: equal with no permutation.
    """
    torch.manual_seed(0)
    head_dim, rotary_dim, base = 32, 12, 500000.0
    partial = {"rope_type": "default", "partial_rotary_factor": rotary_dim / head_dim}
    proportional = {"rope_type": "proportional", "partial_rotary_factor": rotary_dim / head_dim}
    x = torch.randn(2, 3, 64, head_dim, dtype=torch.float64)
    positions = torch.arange(0, 640, 10)
    # the frequencies: proportional's turning pairs are partial's, to float32 rounding; the other pairs are 0
    partial_inv_freq = rope_frequencies(head_dim, base=base, scaling=partial)[0]
    proportional_inv_freq = rope_frequencies(head_dim, base=base ** (head_dim / rotary_dim), scaling=proportional)[0]
    torch.testing.assert_close(proportional_inv_freq[:rotary_dim // 2], partial_inv_freq, rtol=5e-7, atol=0)
    assert (proportional_inv_freq[rotary_dim // 2:] == 0).all()
    # proportional's index of each of partial's features: x_partial = x_proportional[..., partial_features]
    half, turning = head_dim // 2, rotary_dim // 2
    rest = [i for i in range(head_dim) if not (i < turning or half <= i < half + turning)]
    partial_features = torch.tensor(list(range(turning)) + list(range(half, half + turning)) + rest)

    def rotate(scaling, x, interleaved, rope_base):
        return RotaryEmbedding(head_dim, base=rope_base, scaling=scaling, interleaved=interleaved)(
            x, x, positions=positions)[0]

    got_proportional = rotate(proportional, x, False, base ** (head_dim / rotary_dim))
    got_partial = rotate(partial, x[..., partial_features], False, base)
    # float32 angles from inv_freq that differ in the last bit: largest seen 3.1e-5 at positions up to 630
    torch.testing.assert_close(got_partial, got_proportional[..., partial_features], rtol=0, atol=1e-4)
    # the same layout without the permutation, or the same base b, are different rotations
    assert (rotate(partial, x, False, base) - got_proportional).abs().max() > 0.5
    assert (rotate(proportional, x, False, base)[..., partial_features] - got_partial).abs().max() > 0.5
    # interleaved pairs (2i, 2i+1): both rotate features 0 .. r-1, no permutation needed
    torch.testing.assert_close(rotate(proportional, x, True, base ** (head_dim / rotary_dim)),
                               rotate(partial, x, True, base), rtol=0, atol=1e-4)  # seen 3.8e-5


# ---- llama3 with an empty blend band (Llama 4 Scout) -----------------------------------------------------

def test_llama3_empty_band_equals_hugging_face():
    scout = {"rope_type": "llama3", "factor": 16.0, "low_freq_factor": 1.0, "high_freq_factor": 1.0,
             "original_max_position_embeddings": 8192, "rope_theta": 500000.0}
    expected, _ = hugging_face(128, scout)
    inv_freq, scale = rope_frequencies(128, scaling=scout)
    assert not torch.isnan(inv_freq).any() and scale == 1.0
    torch.testing.assert_close(inv_freq, expected, rtol=0, atol=0)  # bit-equal
    plain = rope_frequencies(128, base=500000.0)[0]
    torch.testing.assert_close(inv_freq, torch.where(2 * math.pi / plain > 8192, plain / 16, plain), rtol=0, atol=0)


# ---- HF v5 rope_parameters: rope_theta inside, nested per layer type -----------------------------------------

def test_rope_theta_inside_the_dict_supplies_the_base():
    expected, _ = hugging_face(64, {"rope_type": "default", "rope_theta": 500000.0})
    torch.testing.assert_close(rope_frequencies(64, scaling={"rope_type": "default", "rope_theta": 500000.0})[0],
                               expected, rtol=0, atol=0)
    torch.testing.assert_close(rope_frequencies(64, base=500000.0, scaling={"rope_type": "default",
                                                                            "rope_theta": 500000.0})[0],
                               expected, rtol=0, atol=0)  # an explicit base that agrees is fine
    assert rope_frequencies(4)[0].tolist() == pytest.approx([1.0, 0.01], rel=1e-7)  # base None: 10000
    legacy = {"type": "linear", "factor": 2.0, "rope_theta": 500000.0}  # v4's "type" key
    torch.testing.assert_close(rope_frequencies(64, scaling=legacy)[0], expected / 2, rtol=0, atol=0)
    # keys written as null in a config count as absent
    with_nulls = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 256, "rope_theta": 1e4,
                  "attention_factor": None, "beta_fast": None, "mscale": None, "partial_rotary_factor": None}
    torch.testing.assert_close(rope_frequencies(64, scaling=with_nulls)[0],
                               hugging_face(64, {k: v for k, v in with_nulls.items() if v is not None})[0],
                               rtol=0, atol=0)


def test_rotary_embedding_takes_the_base_from_rope_theta():
    rotary = RotaryEmbedding(64, scaling={"rope_type": "default", "rope_theta": 1e6})
    assert rotary.base == 1e6 and rotary.rotary_dim == 64
    torch.testing.assert_close(rotary.inv_freq, rope_frequencies(64, base=1e6)[0], rtol=0, atol=0)
    assert RotaryEmbedding(8).base == 10000.0
    with pytest.raises(ValueError, match=r"base=.*rope_theta"):
        RotaryEmbedding(64, base=1e4, scaling={"rope_type": "default", "rope_theta": 1e6})


def test_rope_parameters_for_picks_a_layer_type():
    nested = {"sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
              "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6}}
    assert rope_parameters_for(nested, "full_attention") is nested["full_attention"]
    assert rope_parameters_for(nested, "sliding_attention") is nested["sliding_attention"]
    flat = {"rope_type": "default", "rope_theta": 1e4}
    assert rope_parameters_for(flat) is flat and rope_parameters_for(flat, "full_attention") is flat
    longrope = {**LONGROPE, "factor": 32.0}  # lists are values of a flat dict, not layer types
    assert rope_parameters_for(longrope, "full_attention") is longrope


@pytest.mark.parametrize("full", [
    {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},  # Gemma 3's published global layers
    {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 512, "rope_theta": 1e6,
     "partial_rotary_factor": 0.5},
])
def test_nested_rope_parameters_equal_gemma3_rotary_embedding(full):
    from transformers import Gemma3TextConfig
    from transformers.models.gemma3.modeling_gemma3 import Gemma3RotaryEmbedding

    nested = {"sliding_attention": {"rope_type": "default", "rope_theta": 1e4}, "full_attention": dict(full)}
    config = Gemma3TextConfig(hidden_size=64, num_attention_heads=4, head_dim=16, num_key_value_heads=1,
                              num_hidden_layers=6, intermediate_size=32, vocab_size=100, max_position_embeddings=4096,
                              rope_parameters={key: dict(value) for key, value in nested.items()})
    hf = Gemma3RotaryEmbedding(config)
    positions = torch.arange(0, 4096, 13)[None]
    for layer_type in ("sliding_attention", "full_attention"):
        ours = RotaryEmbedding(16, scaling=rope_parameters_for(nested, layer_type))
        torch.testing.assert_close(ours.inv_freq, getattr(hf, f"{layer_type}_inv_freq"), rtol=0, atol=0)
        assert ours.attention_scale == getattr(hf, f"{layer_type}_attention_scaling")
        hf_cos, hf_sin = hf(torch.zeros(1), positions, layer_type=layer_type)
        cos, sin = ours.cos_sin(positions)
        torch.testing.assert_close(cos, hf_cos, rtol=0, atol=0)  # bit-equal
        torch.testing.assert_close(sin, hf_sin, rtol=0, atol=0)


def test_proportional_equals_gemma4_rotary_embedding():
    from transformers.models.gemma4.configuration_gemma4 import Gemma4TextConfig
    from transformers.models.gemma4.modeling_gemma4 import Gemma4TextRotaryEmbedding, apply_rotary_pos_emb

    config = Gemma4TextConfig(hidden_size=64, num_attention_heads=4, head_dim=16, global_head_dim=32,
                              num_key_value_heads=1, num_hidden_layers=6, intermediate_size=32, vocab_size=100)
    assert config.rope_parameters["full_attention"]["rope_type"] == "proportional"  # Gemma 4's own defaults
    hf = Gemma4TextRotaryEmbedding(config)
    positions = torch.arange(0, 3000, 7)[None]
    q = torch.randn(1, 4, positions.shape[1], 32, generator=torch.Generator().manual_seed(0))
    ours = RotaryEmbedding(32, scaling=rope_parameters_for(config.rope_parameters, "full_attention"))
    assert ours.rotary_dim == 32  # full-width tables ...
    hf_cos, hf_sin = hf(q, positions, layer_type="full_attention")
    cos, sin = ours.cos_sin(positions)
    torch.testing.assert_close(cos, hf_cos, rtol=0, atol=0)
    torch.testing.assert_close(sin, hf_sin, rtol=0, atol=0)
    assert (cos[..., 4:16] == 1).all() and (sin[..., 4:16] == 0).all()  # ... with 12 of 16 pairs still
    rotated, _ = ours(q, q, positions=positions)
    torch.testing.assert_close(rotated, apply_rotary_pos_emb(q, hf_cos, hf_sin), rtol=0, atol=1e-6)  # seen 2.4e-7
    still = [*range(4, 16), *range(20, 32)]
    assert torch.equal(rotated[..., still], q[..., still])
    sliding = RotaryEmbedding(16, scaling=rope_parameters_for(config.rope_parameters, "sliding_attention"))
    torch.testing.assert_close(sliding.inv_freq, hf.sliding_attention_inv_freq, rtol=0, atol=0)


# ---- RotaryEmbedding on partial and longrope tables, against the models' own code ----------------------------

@pytest.fixture(scope="module")
def phi3():
    """A tiny Phi-3 config with longrope (random factors) and partial_rotary_factor 0.5: head_dim 32, r = 16."""
    from transformers.models.phi3.modeling_phi3 import Phi3RotaryEmbedding

    rope_parameters = {"rope_type": "longrope", "short_factor": random_factors(8, 4),
                       "long_factor": random_factors(8, 5), "rope_theta": 10000.0, "partial_rotary_factor": 0.5}
    config = phi3_config(32, rope_parameters, max_position_embeddings=256, original_max_position_embeddings=64)
    assert config.rope_parameters["original_max_position_embeddings"] == 64
    # HF v5's dict, plus the max_position_embeddings Hugging Face reads from the config to derive the factor
    scaling = {**config.rope_parameters, "max_position_embeddings": config.max_position_embeddings}
    return Phi3RotaryEmbedding(config), RotaryEmbedding(32, scaling=scaling), rope_parameters


def rotate_by_hand(x, positions, factors, rotary_dim, scale):
    """Partial half-split RoPE, base 1e4, pair i slowed by factors[i] (LongRoPE), in float64, pair by pair."""
    x, out, half = x.double(), x.double().clone(), rotary_dim // 2
    for i in range(half):
        angle = positions.double() / (factors[i] * 10000.0 ** (2 * i / rotary_dim))
        a, b = x[..., i], x[..., i + half]
        out[..., i] = scale * (a * angle.cos() - b * angle.sin())
        out[..., i + half] = scale * (b * angle.cos() + a * angle.sin())
    return out


# Lengths on both sides of the original 64, in an order that switches HF's buffer back and forth.
@pytest.mark.parametrize("start,length", [(0, 40), (0, 64), (0, 65), (0, 256), (10, 30), (63, 1), (64, 1),
                                          (200, 3), (0, 64)])
def test_rotary_embedding_equals_phi3_longrope_partial(phi3, start, length):
    from transformers.models.phi3.modeling_phi3 import apply_rotary_pos_emb

    hf, ours, rope_parameters = phi3
    assert ours.rotary_dim == 16
    g = torch.Generator().manual_seed(start * 1000 + length)
    q, k = torch.randn(2, 4, length, 32, generator=g), torch.randn(2, 2, length, 32, generator=g)
    positions = torch.arange(start, start + length)
    hf_cos, hf_sin = hf(q, positions[None])
    cos, sin = ours.cos_sin(positions)
    assert cos.shape == (length, 16)  # narrower than head_dim
    torch.testing.assert_close(cos, hf_cos[0], rtol=0, atol=0)  # bit-equal
    torch.testing.assert_close(sin, hf_sin[0], rtol=0, atol=0)
    hf_q, hf_k = apply_rotary_pos_emb(q, k, hf_cos, hf_sin)
    our_q, our_k = ours(q, k, offset=start)
    # largest seen: 4.8e-7 (q), 4.8e-7 (k)
    torch.testing.assert_close(our_q, hf_q, rtol=0, atol=1e-6)
    torch.testing.assert_close(our_k, hf_k, rtol=0, atol=1e-6)
    assert torch.equal(our_q[..., 16:], q[..., 16:])  # the unrotated half passes unchanged
    # and both used the right factor set: long once max(position) + 1 > 64, scale sqrt(1 + ln 4 / ln 64)
    long = start + length > 64
    factors = rope_parameters["long_factor" if long else "short_factor"]
    scale = math.sqrt(1 + math.log(256 / 64) / math.log(64))
    by_hand = rotate_by_hand(q, positions, factors, 16, scale)
    torch.testing.assert_close(our_q.double(), by_hand, rtol=0, atol=1e-5)  # seen 2.5e-6 (float32 angles)


def test_interleaved_partial_equals_glm4():
    """GLM-4 pairs (2i, 2i+1) inside the rotating half of each head."""
    from transformers import Glm4Config
    from transformers.models.glm4.modeling_glm4 import Glm4RotaryEmbedding, apply_rotary_pos_emb

    config = Glm4Config(hidden_size=128, num_attention_heads=4, head_dim=32, num_key_value_heads=2,
                        num_hidden_layers=1, max_position_embeddings=512)
    assert config.rope_parameters["partial_rotary_factor"] == 0.5
    hf = Glm4RotaryEmbedding(config)
    ours = RotaryEmbedding(32, scaling=config.rope_parameters, interleaved=True)
    g = torch.Generator().manual_seed(7)
    q, k = torch.randn(1, 4, 50, 32, generator=g), torch.randn(1, 2, 50, 32, generator=g)
    positions = torch.arange(100, 150)
    hf_q, hf_k = apply_rotary_pos_emb(q, k, *hf(q, positions[None]))
    our_q, our_k = ours(q, k, positions=positions)
    torch.testing.assert_close(our_q, hf_q, rtol=0, atol=1e-6)  # largest seen: 0 (bit-equal)
    torch.testing.assert_close(our_k, hf_k, rtol=0, atol=1e-6)


def test_rotary_embedding_keeps_both_longrope_tables_float32():
    rotary = RotaryEmbedding(64, scaling={**LONGROPE, "factor": 32.0})
    short, long = rotary.inv_freq.clone(), rotary.long_inv_freq.clone()
    assert not torch.equal(short, long)
    rotary = rotary.to(torch.bfloat16)
    assert rotary.inv_freq.dtype == rotary.long_inv_freq.dtype == torch.float32
    assert torch.equal(rotary.inv_freq, short) and torch.equal(rotary.long_inv_freq, long)
    torch.testing.assert_close(long, rope_frequencies(64, scaling={**LONGROPE, "factor": 32.0}, seq_len=5000)[0],
                               rtol=0, atol=0)
    q = torch.randn(1, 2, 3, 64).bfloat16()
    assert rotary(q, q, offset=5000)[0].dtype == torch.bfloat16
    assert RotaryEmbedding(8).long_inv_freq is None


def test_partial_tables_rotate_only_the_first_features():
    scaling = {"rope_type": "linear", "factor": 2.0, "partial_rotary_factor": 0.25}
    rotary = RotaryEmbedding(64, base=1e4, scaling=scaling)
    assert rotary.rotary_dim == 16 and rotary.inv_freq.shape == (8,)
    q = torch.randn(1, 2, 9, 64, generator=torch.Generator().manual_seed(1))
    rotated, _ = rotary(q, q, offset=3)
    assert rotary.cos_sin(torch.arange(3, 12))[0].shape == (9, 16)
    # by hand, float64: pairs (i, i + 8) of the first 16 features turn at 1e4 ** (-2i / 16) / 2
    by_hand = rotate_by_hand(q, torch.arange(3, 12), [2.0] * 8, 16, 1.0)
    torch.testing.assert_close(rotated.double(), by_hand, rtol=0, atol=1e-6)  # seen 2.6e-7
    assert torch.equal(rotated[..., 16:], q[..., 16:])


# ---- bad settings fail naming the key --------------------------------------------------------------------

@pytest.mark.parametrize("call,error,message", [
    (lambda: rope_frequencies(8, scaling={"rope_type": "default", "partial_rotary_factor": 0.0}), ValueError,
     "partial_rotary_factor"),
    (lambda: rope_frequencies(8, scaling={"rope_type": "linear", "factor": 2.0, "partial_rotary_factor": 1.5}),
     ValueError, r"partial_rotary_factor'\] must be in \(0, 1\]"),
    (lambda: rope_frequencies(8, scaling={"rope_type": "default", "partial_rotary_factor": "0.5"}), TypeError,
     "partial_rotary_factor"),
    (lambda: rope_frequencies(10, scaling={"rope_type": "default", "partial_rotary_factor": 0.5}), ValueError,
     r"partial_rotary_factor.*rotary dim.*= 5"),  # 5 features cannot pair
    (lambda: rope_frequencies(8, scaling={"rope_type": "ntk", "factor": 2.0, "partial_rotary_factor": 0.25}),
     ValueError, "rotary dim >= 4"),
    (lambda: rope_frequencies(8, scaling={"rope_type": "proportional"}), ValueError, "partial_rotary_factor"),
    (lambda: rope_frequencies(8, scaling={"rope_type": "proportional", "partial_rotary_factor": 0.2}), ValueError,
     "partial_rotary_factor.*turns"),
    (lambda: rope_frequencies(8, scaling={**LONGROPE, "factor": 2.0}), ValueError,
     r"short_factor'\] must have rotary_dim // 2 = 4"),
    (lambda: rope_frequencies(64, scaling={**LONGROPE, "factor": 2.0, "long_factor": [1.0] * 31}), ValueError,
     "long_factor"),
    (lambda: rope_frequencies(64, scaling={**LONGROPE, "factor": 2.0, "partial_rotary_factor": 0.5}), ValueError,
     r"short_factor'\] must have rotary_dim // 2 = 16"),
    (lambda: rope_frequencies(64, scaling={**LONGROPE, "factor": 2.0, "short_factor": "1.0"}), TypeError,
     "short_factor"),
    (lambda: rope_frequencies(64, scaling={**LONGROPE, "factor": 2.0, "long_factor": [0.0] * 32}), ValueError,
     r"long_factor'\] must hold finite numbers > 0"),
    (lambda: rope_frequencies(64, scaling=LONGROPE), ValueError, "needs 'factor', 'attention_factor', or"),
    (lambda: rope_frequencies(64, scaling={**LONGROPE, "max_position_embeddings": 1024}), ValueError,
     "max_position_embeddings"),
    (lambda: rope_frequencies(64, scaling={**LONGROPE, "attention_factor": -1.0}), ValueError, "attention_factor"),
    (lambda: rope_frequencies(64, scaling={"rope_type": "longrope", "short_factor": [1.0] * 32}), ValueError,
     r"missing \['long_factor', 'original_max_position_embeddings'\]"),
    (lambda: rope_frequencies(8, base=1e4, scaling={"rope_type": "default", "rope_theta": 1e6}), ValueError,
     r"base=10000.0 disagrees with scaling\['rope_theta'\]=1000000.0"),
    (lambda: rope_frequencies(8, scaling={"rope_type": "default", "rope_theta": -1.0}), ValueError, "rope_theta"),
    (lambda: rope_frequencies(8, scaling={"full_attention": {"rope_type": "default"}}), ValueError,
     "rope_parameters_for"),
    (lambda: rope_parameters_for({"full_attention": {"rope_type": "default"}}), ValueError, "pass layer_type"),
    (lambda: rope_parameters_for({"full_attention": {"rope_type": "default"}}, "sliding_attention"), ValueError,
     r"layer_type='sliding_attention' is not in rope_parameters; it has \['full_attention'\]"),
    (lambda: rope_parameters_for({"full_attention": None, "sliding_attention": {}}, "full_attention"), ValueError,
     r"rope_parameters\['full_attention'\] is None"),
    (lambda: rope_parameters_for(None), TypeError, "rope_parameters must be a dict"),
])
def test_bad_settings_raise_naming_the_key(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_yarn_tables_are_bit_equal_to_hugging_face():
    # DeepSeek-V3's published YaRN settings (factor 40 over 64 rotary features) and gpt-oss's: the
    # interpolated frequencies are formed as 1 / (factor * base**(2i/d)), as Hugging Face forms them.
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    for head_dim, base, factor, original, extra in [(64, 1e4, 40.0, 4096, {}),
                                                     (64, 150000.0, 32.0, 4096, {"truncate": False})]:
        scaling = {"rope_type": "yarn", "rope_theta": base, "factor": factor, "beta_fast": 32, "beta_slow": 1,
                   "original_max_position_embeddings": original, **extra}
        config = LlamaConfig(hidden_size=4 * head_dim, num_attention_heads=4, head_dim=head_dim,
                             rope_parameters=scaling, max_position_embeddings=int(original * factor))
        expected, expected_scale = ROPE_INIT_FUNCTIONS["yarn"](config, "cpu")
        inv_freq, scale = rope_frequencies(head_dim, scaling=scaling)
        assert torch.equal(inv_freq, expected) and scale == expected_scale
