"""Bad input fails loudly, naming the argument and what is allowed."""

import pytest
import torch

import posenc


@pytest.mark.parametrize("call,error,message", [
    # odd or non-positive dims
    (lambda: posenc.sinusoidal_encoding(4, 7), ValueError, "dim must be a positive even integer"),
    (lambda: posenc.sinusoidal_encoding(4, 0), ValueError, "dim must be an integer >= 1"),
    (lambda: posenc.rope_frequencies(9), ValueError, "head_dim must be a positive even integer"),
    (lambda: posenc.RotaryEmbedding(-2), ValueError, "head_dim"),
    (lambda: posenc.SinusoidalEncoding(5), ValueError, "dim must be a positive even integer"),
    (lambda: posenc.MultiHeadAttention(30, 4), ValueError, "dim must be divisible by n_heads"),
    (lambda: posenc.sinusoidal_encoding_2d(4, 4, 6), ValueError, "dim must be a positive multiple of 4"),
    # non-positive lengths or head counts
    (lambda: posenc.sinusoidal_encoding_2d(0, 4, 8), ValueError, "height"),
    (lambda: posenc.sinusoidal_encoding(0, 8), ValueError, "n_positions must be an integer >= 1"),
    (lambda: posenc.sinusoidal_encoding(4, 8, offset=-1), ValueError, "offset must be an integer >= 0"),
    (lambda: posenc.LearnedEncoding(0, 8), ValueError, "max_len"),
    (lambda: posenc.alibi_slopes(0), ValueError, "n_heads must be an integer >= 1"),
    (lambda: posenc.alibi_bias(4, 0), ValueError, "q_len"),
    (lambda: posenc.alibi_bias(4, 5, 3), ValueError, "k_len must be >= q_len"),
    (lambda: posenc.T5RelativeBias(0), ValueError, "n_heads"),
    (lambda: posenc.TransformerLM(10, 8, 0, 2, position="none"), ValueError, "n_layers"),
    # wrong types
    (lambda: posenc.sinusoidal_encoding(4.0, 8), TypeError, "n_positions must be an integer"),
    (lambda: posenc.alibi_slopes("8"), TypeError, "n_heads must be an integer"),
    (lambda: posenc.rope_frequencies(8, scaling="linear"), TypeError, "scaling must be a dict"),
    (lambda: posenc.apply_rope([1.0], torch.ones(1, 2), torch.ones(1, 2)), TypeError, "x must be a torch.Tensor"),
    (lambda: posenc.t5_relative_bucket(torch.tensor([1.5])), TypeError, "relative_position must be an integer"),
    # a sequence longer than a learned table
    (lambda: posenc.LearnedEncoding(4, 8)(torch.zeros(1, 5, 8)), ValueError, "max_len=4"),
    (lambda: posenc.TransformerLM(10, 8, 1, 2, position="learned"), ValueError, "max_len is required"),
    # unknown method or rope_type
    (lambda: posenc.TransformerLM(10, 8, 1, 2, position="xpos"), ValueError, "position must be one of"),
    (lambda: posenc.MultiHeadAttention(8, 2, position="Rope"), ValueError, "position must be one of"),
    (lambda: posenc.rope_frequencies(8, scaling={"rope_type": "su"}), ValueError,
     r"scaling\['rope_type'\] must be one of"),
    (lambda: posenc.rope_frequencies(8, scaling={"factor": 2.0}), ValueError, "must contain 'rope_type'"),
    # missing or wrong scaling keys
    (lambda: posenc.rope_frequencies(8, scaling={"rope_type": "linear"}), ValueError, r"missing \['factor'\]"),
    (lambda: posenc.rope_frequencies(8, scaling={"rope_type": "yarn", "factor": 4.0}), ValueError,
     "original_max_position_embeddings"),
    (lambda: posenc.rope_frequencies(8, scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                 "original_max_position_embeddings": 8192}),
     ValueError, "high_freq_factor"),
    (lambda: posenc.rope_frequencies(8, scaling={"rope_type": "longrope"}), ValueError, r"missing \['short_factor'"),
    (lambda: posenc.rope_frequencies(8, scaling={"rope_type": "default", "partial_rotary_factor": 2.0}), ValueError,
     "partial_rotary_factor"),
    (lambda: posenc.rope_frequencies(8, scaling={"rope_type": "linear", "factor": 2.0, "fator": 3}), ValueError,
     "unknown keys"),
    (lambda: posenc.rope_frequencies(8, scaling={"rope_type": "linear", "factor": 0.5}), ValueError, "factor"),
    (lambda: posenc.rope_frequencies(8, base=10000.0, scaling={"rope_type": "linear", "factor": 2.0,
                                                               "rope_theta": 500000.0}), ValueError, "rope_theta"),
    # fractional positions
    (lambda: posenc.rope_cos_sin(torch.tensor([0.0, 1.5]), torch.ones(4)), ValueError, "whole-number positions"),
    (lambda: posenc.RotaryEmbedding(8)(torch.zeros(1, 1, 2, 8), torch.zeros(1, 1, 2, 8),
                                       positions=torch.tensor([0.5, 1.0])), ValueError, "whole-number"),
    # mismatched shapes
    (lambda: posenc.apply_rope(torch.zeros(2, 3, 8), torch.zeros(3, 10), torch.zeros(3, 10)), ValueError, "cos/sin must end in"),
    (lambda: posenc.apply_rope(torch.zeros(2, 3, 8), torch.zeros(4, 8), torch.zeros(4, 8)), ValueError, "cos/sin must end in"),
    (lambda: posenc.apply_rope(torch.zeros(2, 3, 8), torch.zeros(3, 5), torch.zeros(3, 5)), ValueError, "even rotary_dim"),
    (lambda: posenc.apply_rope(torch.zeros(3, 8), torch.zeros(3, 8), torch.zeros(2, 8)), ValueError, "same shape"),
    (lambda: posenc.RotaryEmbedding(8)(torch.zeros(1, 2, 3, 8), torch.zeros(1, 2, 4, 8)), ValueError, "share batch and seq"),
    (lambda: posenc.RotaryEmbedding(8)(torch.zeros(1, 2, 3, 6), torch.zeros(1, 2, 3, 6)), ValueError, "q must be"),
    (lambda: posenc.RotaryEmbedding(8)(torch.zeros(1, 2, 3, 8), torch.zeros(1, 2, 3, 8),
                                       positions=torch.arange(4)), ValueError, "positions must be"),
    (lambda: posenc.SinusoidalEncoding(8)(torch.zeros(2, 3, 6)), ValueError, "x must have shape"),
    (lambda: posenc.alibi_bias(4, 3, slopes=torch.ones(3)), ValueError, "slopes must have shape"),
    (lambda: posenc.alibi_attention(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 5), torch.zeros(1, 2, 3, 4)),
     ValueError, "shapes do not match"),
    (lambda: posenc.MultiHeadAttention(8, 2)(torch.zeros(1, 3, 6)), ValueError, "x must be"),
    (lambda: posenc.resize_position_table_2d(torch.zeros(10, 4), (3, 3), (4, 4)), ValueError, r"table must be"),
    (lambda: posenc.resize_position_table_2d(torch.zeros(9, 4), (3, 3), (4, 4), mode="area"), ValueError, "mode"),
    (lambda: posenc.TransformerLM(10, 8, 1, 2, position="none")(torch.zeros(1, 3)), ValueError, "integer tensor"),
    (lambda: posenc.TransformerLM(10, 8, 1, 2, position="none")(torch.tensor([[3, 10]])), ValueError, r"\[0, 10\)"),
    (lambda: posenc.MultiHeadAttention(8, 2, causal=False)(torch.zeros(1, 3, 8), cache=posenc.LayerCache()),
     ValueError, "causal=True"),
])
def test_bad_input_raises_clear_error(call, error, message):
    with pytest.raises(error, match=message):
        call()
