import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from posenc import (LearnedEncoding, SinusoidalEncoding, resize_position_table_2d, sinusoidal_encoding,
                    sinusoidal_encoding_2d)


def formula(n_positions, dim, base=10000.0, offset=0):
    """The sinusoidal table written out element by element in Python floats (float64)."""
    table = torch.empty(n_positions, dim, dtype=torch.float64)
    for row in range(n_positions):
        p = offset + row
        for i in range(dim // 2):
            angle = p / base ** (2 * i / dim)
            table[row, 2 * i] = math.sin(angle)
            table[row, 2 * i + 1] = math.cos(angle)
    return table


@pytest.mark.parametrize("n_positions,dim,base,offset", [(50, 16, 10000.0, 0), (7, 6, 100.0, 3), (3, 2, 10000.0, 1000)])
def test_sinusoidal_matches_formula_in_float64(n_positions, dim, base, offset):
    got = sinusoidal_encoding(n_positions, dim, base=base, offset=offset, dtype=torch.float64)
    torch.testing.assert_close(got, formula(n_positions, dim, base, offset), rtol=0, atol=1e-12)
    assert sinusoidal_encoding(n_positions, dim, base=base, offset=offset).dtype == torch.float32


def test_sinusoidal_known_values():
    table = sinusoidal_encoding(2, 4, dtype=torch.float64)
    # Position 0: sin 0 = 0 and cos 0 = 1 in every pair. Position 1: frequencies 1 and 1/100.
    assert table[0].tolist() == [0.0, 1.0, 0.0, 1.0]
    expected = [math.sin(1), math.cos(1), math.sin(0.01), math.cos(0.01)]
    assert table[1].tolist() == pytest.approx(expected, abs=1e-15)


@given(p=st.integers(0, 500), k=st.integers(-50, 500), half=st.integers(1, 16))
def test_shift_is_a_rotation(p, k, half):
    """PE(p + k) = M_k PE(p), M_k block-diagonal with 2x2 blocks [[cos, sin], [-sin, cos]] of k * w_i."""
    dim = 2 * half
    if p + k < 0:
        return
    table = sinusoidal_encoding(max(p, p + k) + 1, dim, dtype=torch.float64)
    rotated = torch.empty(dim, dtype=torch.float64)
    for i in range(half):
        w = 1.0 / 10000 ** (2 * i / dim)
        c, s = math.cos(k * w), math.sin(k * w)
        sin_p, cos_p = table[p, 2 * i].item(), table[p, 2 * i + 1].item()
        rotated[2 * i] = c * sin_p + s * cos_p  # sin(a + b)
        rotated[2 * i + 1] = -s * sin_p + c * cos_p  # cos(a + b)
    torch.testing.assert_close(rotated, table[p + k], rtol=0, atol=1e-9)


def test_sinusoidal_module_adds_rows_at_offset():
    module = SinusoidalEncoding(8)
    x = torch.randn(2, 5, 8)
    torch.testing.assert_close(module(x, offset=3), x + formula(8, 8)[3:].float(), rtol=0, atol=1e-6)
    assert module(x.double()).dtype == torch.float64


def test_learned_module_adds_table_rows():
    torch.manual_seed(0)
    module = LearnedEncoding(10, 4)
    x = torch.randn(3, 4, 4)
    torch.testing.assert_close(module(x, offset=6), x + module.weight[6:10].detach())
    assert module.weight.requires_grad and module.weight.shape == (10, 4)


def test_learned_refuses_positions_beyond_table():
    module = LearnedEncoding(10, 4)
    with pytest.raises(ValueError, match="max_len=10"):
        module(torch.zeros(1, 5, 4), offset=6)


def test_sinusoidal_2d_halves_encode_row_and_column():
    table = sinusoidal_encoding_2d(3, 5, 8, dtype=torch.float64)
    assert table.shape == (15, 8)
    for r in range(3):
        for c in range(5):
            expected = torch.cat([formula(r + 1, 4)[r], formula(c + 1, 4)[c]])
            torch.testing.assert_close(table[r * 5 + c], expected, rtol=0, atol=1e-12)


def test_resize_same_size_is_identity_and_keeps_prefix():
    torch.manual_seed(0)
    table = torch.randn(1 + 4 * 6, 8)
    torch.testing.assert_close(resize_position_table_2d(table, (4, 6), (4, 6), num_prefix_tokens=1), table)
    bigger = resize_position_table_2d(table, (4, 6), (8, 12), num_prefix_tokens=1)
    assert bigger.shape == (1 + 96, 8)
    assert torch.equal(bigger[0], table[0])


def test_resize_bilinear_upsampling_matches_hand_interpolation():
    """align_corners=False: new pixel centre x' maps to x = (x' + 0.5) * old/new - 0.5, clamped."""
    grid = torch.tensor([[0.0, 10.0], [20.0, 30.0]])  # one feature on a 2x2 grid
    out = resize_position_table_2d(grid.reshape(4, 1), (2, 2), (4, 4), mode="bilinear").reshape(4, 4)
    coords = [min(max((i + 0.5) * 0.5 - 0.5, 0.0), 1.0) for i in range(4)]  # 0, 0.25, 0.75, 1
    expected = torch.tensor([[20.0 * y + 10.0 * x for x in coords] for y in coords])
    torch.testing.assert_close(out, expected)


def test_resize_bicubic_keeps_constant_tables_constant():
    table = torch.full((9, 3), 2.5)
    torch.testing.assert_close(resize_position_table_2d(table, (3, 3), (7, 5)), torch.full((35, 3), 2.5))


def test_sinusoidal_scale_multiplies_the_table():
    x = torch.zeros(1, 4, 8)
    torch.testing.assert_close(SinusoidalEncoding(8, scale=0.5)(x), 0.5 * formula(4, 8).float()[None])


def test_model_sinusoidal_table_matches_embedding_scale():
    from posenc import TransformerLM

    model = TransformerLM(10, 64, 1, 2, position="sinusoidal")
    table = model.absolute.scale * sinusoidal_encoding(100, 64)
    rms = table.pow(2).mean().sqrt().item()
    assert abs(rms - 0.02) < 1e-6  # the same root-mean-square as an N(0, 0.02^2) embedding


# --- The layouts in use (chapter 3): column order x frequency spacing -------------------------------------

def layout_formula(n_positions, dim, base, offset, layout, freq_denominator):
    """Element by element in Python floats: w_i = base ** (-i / denominator), columns by layout."""
    half = dim // 2
    denominator = half if freq_denominator == "d/2" else half - 1
    table = torch.empty(n_positions, dim, dtype=torch.float64)
    for row in range(n_positions):
        for i in range(half):
            angle = (offset + row) * base ** (-i / denominator)
            if layout == "interleaved":
                table[row, 2 * i], table[row, 2 * i + 1] = math.sin(angle), math.cos(angle)
            elif layout == "sin_cos":
                table[row, i], table[row, half + i] = math.sin(angle), math.cos(angle)
            else:
                table[row, i], table[row, half + i] = math.cos(angle), math.sin(angle)
    return table


@pytest.mark.parametrize("layout", ["interleaved", "sin_cos", "cos_sin"])
@pytest.mark.parametrize("freq_denominator", ["d/2", "d/2-1"])
def test_sinusoidal_layouts_match_their_formulas(layout, freq_denominator):
    got = sinusoidal_encoding(20, 12, base=100.0, offset=5, layout=layout, freq_denominator=freq_denominator,
                              dtype=torch.float64)
    expected = layout_formula(20, 12, 100.0, 5, layout, freq_denominator)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)


def test_sinusoidal_layout_known_values():
    # dim 4, base 100, position 1. Spacing d/2: w = 1, 1/10; spacing d/2-1: w = 1, 1/100 (the last
    # wavelength is then 2*pi*base).
    s, c = math.sin, math.cos
    one = {(layout, spacing): sinusoidal_encoding(2, 4, base=100.0, layout=layout, freq_denominator=spacing,
                                                  dtype=torch.float64)[1].tolist()
           for layout in ("interleaved", "sin_cos", "cos_sin") for spacing in ("d/2", "d/2-1")}
    assert one["interleaved", "d/2"] == pytest.approx([s(1), c(1), s(0.1), c(0.1)], abs=1e-15)
    assert one["sin_cos", "d/2"] == pytest.approx([s(1), s(0.1), c(1), c(0.1)], abs=1e-15)
    assert one["sin_cos", "d/2-1"] == pytest.approx([s(1), s(0.01), c(1), c(0.01)], abs=1e-15)
    assert one["cos_sin", "d/2-1"] == pytest.approx([c(1), c(0.01), s(1), s(0.01)], abs=1e-15)
    assert one["interleaved", "d/2-1"] == pytest.approx([s(1), c(1), s(0.01), c(0.01)], abs=1e-15)


def test_sinusoidal_layout_errors_name_the_argument():
    with pytest.raises(ValueError, match="layout"):
        sinusoidal_encoding(4, 8, layout="sin-cos")
    with pytest.raises(ValueError, match="freq_denominator"):
        sinusoidal_encoding(4, 8, freq_denominator="d")
    with pytest.raises(ValueError, match="freq_denominator"):
        sinusoidal_encoding(4, 2, freq_denominator="d/2-1")  # divides by dim/2 - 1 = 0
    with pytest.raises(ValueError, match="layout"):
        SinusoidalEncoding(8, layout="sincos")


def test_sinusoidal_module_uses_its_layout():
    module = SinusoidalEncoding(8, layout="cos_sin", freq_denominator="d/2-1")
    x = torch.randn(2, 5, 8)
    expected = x + layout_formula(8, 8, 10000.0, 0, "cos_sin", "d/2-1")[3:].float()
    torch.testing.assert_close(module(x, offset=3), expected, rtol=0, atol=1e-6)


def test_sin_cos_d2_minus_1_is_whispers_encoder_table():
    pytest.importorskip("transformers")
    from transformers.models.whisper.modeling_whisper import sinusoids

    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)  # HF's function then computes in float64: compare exactly
    try:
        theirs = sinusoids(1500, 384)  # Whisper tiny: 1500 positions, d_model 384
    finally:
        torch.set_default_dtype(default)
    ours = sinusoidal_encoding(1500, 384, layout="sin_cos", freq_denominator="d/2-1", dtype=torch.float64)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-9)


def test_sin_cos_d2_minus_1_with_offset_is_fairseqs_table():
    """fairseq's table, kept by HF's M2M100: positions start at padding_idx + 1, the padding row is zero."""
    pytest.importorskip("transformers")
    from transformers.models.m2m_100.modeling_m2m_100 import M2M100SinusoidalPositionalEmbedding

    padding_idx = 1
    module = M2M100SinusoidalPositionalEmbedding(64, 16, padding_idx=padding_idx)
    theirs = module(input_ids=torch.full((1, 40), 5))[0]  # no padding tokens
    ours = sinusoidal_encoding(40, 16, layout="sin_cos", freq_denominator="d/2-1", offset=padding_idx + 1)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=2e-5)  # HF computes in float32
    assert torch.equal(module.weights[padding_idx], torch.zeros(16))
    shifted = sinusoidal_encoding(40, 16, layout="sin_cos", freq_denominator="d/2-1")  # indexed from 0
    assert (shifted - theirs).abs().max() > 0.5  # the silent off-by-two


def test_cos_sin_d2_minus_1_is_musicgens_table():
    pytest.importorskip("transformers")
    from transformers.models.musicgen.modeling_musicgen import MusicgenSinusoidalPositionalEmbedding

    theirs = MusicgenSinusoidalPositionalEmbedding.get_embedding(100, 32)
    ours = sinusoidal_encoding(100, 32, layout="cos_sin", freq_denominator="d/2-1")
    torch.testing.assert_close(ours, theirs, rtol=0, atol=5e-5)  # HF computes in float32


def test_cos_sin_d2_is_the_dit_style_timestep_embedding():
    """DiT / GLIDE timestep embedding (diffusers' flip_sin_to_cos=True, downscale_freq_shift=0), as in HF's
    VibeVoice diffusion head, at integer timesteps."""
    pytest.importorskip("transformers")
    from transformers.models.vibevoice.configuration_vibevoice import VibeVoiceDiffusionHeadConfig
    from transformers.models.vibevoice.modeling_vibevoice import VibeVoiceDiffusionHeadSinusoidalEmbedding

    config = VibeVoiceDiffusionHeadConfig()  # frequency_embedding_size 256, diffusion_max_period 10000
    assert (config.frequency_embedding_size, config.diffusion_max_period) == (256, 10000)
    theirs = VibeVoiceDiffusionHeadSinusoidalEmbedding(config)(torch.arange(1000))
    ours = sinusoidal_encoding(1000, 256, base=10000.0, layout="cos_sin", freq_denominator="d/2")
    torch.testing.assert_close(ours, theirs, rtol=0, atol=2e-4)  # float32 angles up to 999 rad


def test_sin_cos_2d_is_hugging_face_vitmae_table():
    pytest.importorskip("transformers")
    from transformers.models.vit_mae.modeling_vit_mae import build_2d_sinusoidal_position_embedding

    theirs = build_2d_sinusoidal_position_embedding(7, 5, 64, dtype=torch.float64)  # rows first
    ours = sinusoidal_encoding_2d(7, 5, 64, layout="sin_cos", dtype=torch.float64)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-12)
    default = sinusoidal_encoding_2d(7, 5, 64, dtype=torch.float64)  # interleaved: not ViTMAE's
    assert (default - theirs).abs().max() > 0.5


def mae_original_2d_table(embed_dim, grid_size):
    """MAE's ``get_2d_sincos_pos_embed`` (facebookresearch/mae, util/pos_embed.py) rewritten in numpy,
    in float64 instead of MAE's float32 so that the comparison can be exact."""
    import numpy as np

    def one_axis(dim, pos):  # get_1d_sincos_pos_embed_from_grid
        omega = 1.0 / 10000 ** (np.arange(dim // 2, dtype=np.float64) / (dim / 2))  # [D/2]
        out = np.outer(pos.reshape(-1), omega)  # [M, D/2]
        return np.concatenate([np.sin(out), np.cos(out)], axis=1)

    grid_h = np.arange(grid_size, dtype=np.float64)
    grid_w = np.arange(grid_size, dtype=np.float64)
    grid = np.meshgrid(grid_w, grid_h)  # as in MAE: w goes first, so grid[0][r, c] = c
    first = one_axis(embed_dim // 2, grid[0])  # MAE names it emb_h, but it encodes the column
    second = one_axis(embed_dim // 2, grid[1])  # the row
    return np.concatenate([first, second], axis=1)  # [grid_size**2, embed_dim], row-major patches


def test_maes_original_table_is_sin_cos_2d_with_halves_swapped():
    theirs = torch.from_numpy(mae_original_2d_table(64, 6))
    ours = sinusoidal_encoding_2d(6, 6, 64, layout="sin_cos", dtype=torch.float64)  # rows first
    swapped = torch.cat((ours[:, 32:], ours[:, :32]), dim=1)
    torch.testing.assert_close(swapped, theirs, rtol=0, atol=1e-12)
    assert (ours - theirs).abs().max() > 0.5  # unswapped, the row-first table is not MAE's
    # the first half changes along a grid row (column index), not down a column
    assert (theirs[1, :32] - theirs[0, :32]).abs().max() > 0.5
    torch.testing.assert_close(theirs[6, :32], theirs[0, :32], rtol=0, atol=0)
