import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from posenc import RotaryEmbedding, apply_rope, rope_cos_sin, rope_frequencies


def rope_reference(x, positions, inv_freq, interleaved):
    """RoPE by explicit 2x2 rotation matrices, in float64: pair (a, b) -> (a cos t - b sin t, a sin t + b cos t)."""
    x = x.double()
    out = x.clone()
    half = x.shape[-1] // 2
    for s, p in enumerate(positions.tolist()):
        for i in range(half):
            t = p * inv_freq[i].item()
            a_idx, b_idx = (2 * i, 2 * i + 1) if interleaved else (i, i + half)
            a, b = x[..., s, a_idx], x[..., s, b_idx]
            out[..., s, a_idx] = a * math.cos(t) - b * math.sin(t)
            out[..., s, b_idx] = a * math.sin(t) + b * math.cos(t)
    return out


@pytest.mark.parametrize("interleaved", [False, True])
def test_apply_rope_equals_rotation_matrices(interleaved):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 7, 8)
    positions = torch.tensor([0, 1, 2, 5, 9, 100, 1000])
    inv_freq, _ = rope_frequencies(8)
    cos, sin = rope_cos_sin(positions, inv_freq, interleaved=interleaved)
    got = apply_rope(x, cos, sin, interleaved=interleaved)
    torch.testing.assert_close(got.double(), rope_reference(x, positions, inv_freq, interleaved),
                               rtol=1e-4, atol=1e-4)


def test_default_frequencies_by_hand():
    inv_freq, scale = rope_frequencies(4)
    assert inv_freq.tolist() == pytest.approx([1.0, 0.01], rel=1e-6) and scale == 1.0
    inv_freq, _ = rope_frequencies(6, base=64.0)
    assert inv_freq.tolist() == pytest.approx([1.0, 1 / 4, 1 / 16], rel=1e-6)


@given(seq=st.integers(1, 12), half=st.integers(1, 8), interleaved=st.booleans(), start=st.integers(0, 10_000))
def test_rope_preserves_norms(seq, half, interleaved, start):
    x = torch.randn(2, seq, 2 * half, dtype=torch.float64)
    cos, sin = rope_cos_sin(torch.arange(start, start + seq), rope_frequencies(2 * half)[0], interleaved=interleaved)
    torch.testing.assert_close(apply_rope(x, cos, sin, interleaved=interleaved).norm(dim=-1), x.norm(dim=-1),
                               rtol=1e-6, atol=1e-6)


@given(m=st.integers(0, 2000), n=st.integers(0, 2000), shift=st.integers(0, 2000), interleaved=st.booleans())
def test_scores_depend_only_on_offset(m, n, shift, interleaved):
    """<R_m q, R_n k> = <R_{m+s} q, R_{n+s} k>: only m - n matters."""
    g = torch.Generator().manual_seed(m * 7919 + n)
    q, k = torch.randn(16, generator=g, dtype=torch.float64), torch.randn(16, generator=g, dtype=torch.float64)
    inv_freq = rope_frequencies(16)[0].double()

    def score(pos_q, pos_k):
        cos, sin = rope_cos_sin(torch.tensor([pos_q, pos_k]), inv_freq, interleaved=interleaved)
        rotated_q = apply_rope(q[None], cos[:1], sin[:1], interleaved=interleaved)
        rotated_k = apply_rope(k[None], cos[1:], sin[1:], interleaved=interleaved)
        return (rotated_q * rotated_k).sum().item()

    # Angles are computed in float32 (as in Hugging Face), so positions in the thousands cost ~1e-3.
    assert score(m, n) == pytest.approx(score(m + shift, n + shift), abs=5e-3)


def test_interleaved_and_half_split_agree_after_permuting_features():
    torch.manual_seed(0)
    head_dim = 10
    x = torch.randn(2, 4, 6, head_dim)
    # Half-split pairs (i, i + d/2); interleaved pairs (2i, 2i + 1). This permutation maps one layout to the other.
    to_interleaved = torch.stack((torch.arange(head_dim // 2), torch.arange(head_dim // 2) + head_dim // 2), -1).flatten()
    positions = torch.arange(3, 9)
    inv_freq, _ = rope_frequencies(head_dim)
    half = apply_rope(x, *rope_cos_sin(positions, inv_freq), interleaved=False)
    inter = apply_rope(x[..., to_interleaved], *rope_cos_sin(positions, inv_freq, interleaved=True), interleaved=True)
    torch.testing.assert_close(inter, half[..., to_interleaved], rtol=0, atol=1e-6)


@pytest.mark.parametrize("interleaved", [False, True])
def test_rotary_embedding_offset_equals_rows_of_full(interleaved):
    torch.manual_seed(0)
    rope = RotaryEmbedding(8, interleaved=interleaved)
    q, k = torch.randn(2, 3, 20, 8), torch.randn(2, 3, 20, 8)
    full_q, full_k = rope(q, k)
    # Equal up to the last bits of float32: the complex kernel's vectorised body and scalar tail round
    # differently (fused multiply-add), and which elements fall in the tail depends on the slice and on
    # the CPU's vector width. 1e-6: a few ulps of these outputs (|x| < 4), ten times one.
    for t in (0, 1, 7, 19):
        part_q, part_k = rope(q[:, :, t:], k[:, :, t:], offset=t)
        torch.testing.assert_close(part_q, full_q[:, :, t:], rtol=0, atol=1e-6)
        torch.testing.assert_close(part_k, full_k[:, :, t:], rtol=0, atol=1e-6)
    # Explicit positions, per batch row, equal the offset path.
    positions = torch.tensor([[5, 6, 7], [0, 1, 2]])
    got_q, _ = rope(q[:, :, :3], k[:, :, :3], positions=positions)
    torch.testing.assert_close(got_q[0], rope(q[:1, :, :3], k[:1, :, :3], offset=5)[0][0], rtol=0, atol=1e-6)
    torch.testing.assert_close(got_q[1], full_q[1, :, :3], rtol=0, atol=1e-6)


def test_apply_rope_keeps_dtype_and_computes_in_float32():
    torch.manual_seed(0)
    x = torch.randn(1, 2, 5, 8)
    cos, sin = rope_cos_sin(torch.arange(5), rope_frequencies(8)[0])
    half = apply_rope(x.half(), cos, sin)
    assert half.dtype == torch.float16
    torch.testing.assert_close(half.float(), apply_rope(x.half().float(), cos, sin), rtol=1e-3, atol=1e-3)


# ---- scaling: hand-computed values for small head_dim -------------------------------------------------

def test_linear_scaling_divides_frequencies():
    inv_freq, scale = rope_frequencies(4, scaling={"rope_type": "linear", "factor": 2.0})
    assert inv_freq.tolist() == pytest.approx([0.5, 0.005], rel=1e-6) and scale == 1.0


def test_ntk_scaling_changes_the_base():
    # base' = 10000 * 4 ** (4 / 2) = 160000, so inv_freq = [1, 160000 ** -0.5] = [1, 1/400].
    inv_freq, _ = rope_frequencies(4, scaling={"rope_type": "ntk", "factor": 4.0})
    assert inv_freq.tolist() == pytest.approx([1.0, 1 / 400], rel=1e-6)


def test_dynamic_scaling_grows_with_length():
    scaling = {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 16}
    # Up to the original length: unchanged. At 32: base' = 10000 * (2 * 32 / 16 - 1) ** (4 / 2) = 90000.
    assert rope_frequencies(4, scaling=scaling, seq_len=10)[0].tolist() == pytest.approx([1.0, 0.01], rel=1e-6)
    assert rope_frequencies(4, scaling=scaling, seq_len=32)[0].tolist() == pytest.approx([1.0, 1 / 300], rel=1e-6)


def test_yarn_by_hand():
    # head_dim 8, base 10000, factor 4, original 64: correction range [floor(-0.497), ceil(1.008)] -> [0, 2],
    # ramp over pairs 0..3 = [0, 0.5, 1, 1]: pair 0 kept, pair 1 half-interpolated, pairs 2-3 divided by 4.
    scaling = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}
    inv_freq, scale = rope_frequencies(8, scaling=scaling)
    assert inv_freq.tolist() == pytest.approx([1.0, 0.1 * (0.5 / 4 + 0.5), 0.01 / 4, 0.001 / 4], rel=1e-6)
    assert scale == pytest.approx(0.1 * math.log(4) + 1)
    _, scale = rope_frequencies(8, scaling={**scaling, "mscale": 1.0, "mscale_all_dim": 1.0})
    assert scale == pytest.approx(1.0)
    _, scale = rope_frequencies(8, scaling={**scaling, "attention_factor": 0.5})
    assert scale == 0.5


def test_llama3_by_hand():
    # head_dim 8: inv_freq 1, 0.1, 0.01, 0.001 -> wavelengths 2pi, 20pi, 200pi, 2000pi.
    # original 1024, low 1, high 4: long wavelengths (> 1024) divided by 8, short (< 256) kept, middle blended.
    scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 1024}
    smooth = (1024 / (200 * math.pi) - 1) / (4 - 1)
    expected = [1.0, 0.1, (1 - smooth) * 0.01 / 8 + smooth * 0.01, 0.001 / 8]
    assert rope_frequencies(8, scaling=scaling)[0].tolist() == pytest.approx(expected, rel=1e-5)


# ---- scaling: equal to Hugging Face transformers' ROPE_INIT_FUNCTIONS -----------------------------------

HF_CASES = [
    (64, 10000.0, {"rope_type": "linear", "factor": 4.0}),
    (128, 500000.0, {"rope_type": "linear", "factor": 2.5}),
    (64, 10000.0, {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048}),
    (128, 10000.0, {"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 4096,
                    "beta_fast": 16, "beta_slow": 2, "truncate": False}),
    (64, 10000.0, {"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096,
                   "mscale": 1.0, "mscale_all_dim": 0.707}),
    (128, 500000.0, {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192}),
    (64, 10000.0, {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 2.0, "high_freq_factor": 8.0,
                   "original_max_position_embeddings": 512}),
]


def hugging_face(head_dim, base, scaling, max_position_embeddings, seq_len=None):
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = LlamaConfig(hidden_size=head_dim * 4, num_attention_heads=4, head_dim=head_dim,
                         max_position_embeddings=max_position_embeddings,
                         rope_parameters={**scaling, "rope_theta": base})
    return ROPE_INIT_FUNCTIONS[scaling["rope_type"]](config, "cpu", seq_len=seq_len)


@pytest.mark.parametrize("head_dim,base,scaling", HF_CASES)
def test_scaling_equals_hugging_face(head_dim, base, scaling):
    original = scaling.get("original_max_position_embeddings", 2048)
    expected_inv_freq, expected_scale = hugging_face(head_dim, base, scaling, int(original * scaling["factor"]))
    inv_freq, scale = rope_frequencies(head_dim, base=base, scaling=scaling)
    torch.testing.assert_close(inv_freq, expected_inv_freq, rtol=1e-6, atol=0)
    assert scale == pytest.approx(expected_scale, rel=1e-12)


@pytest.mark.parametrize("seq_len", [None, 100, 2048, 3000, 9000])
def test_dynamic_equals_hugging_face(seq_len):
    # Hugging Face's dynamic type grows from config.max_position_embeddings: the trained length, which
    # our dict calls original_max_position_embeddings.
    scaling = {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 2048}
    expected, _ = hugging_face(64, 10000.0, {"rope_type": "dynamic", "factor": 2.0}, 2048, seq_len=seq_len)
    torch.testing.assert_close(rope_frequencies(64, scaling=scaling, seq_len=seq_len)[0], expected, rtol=1e-6, atol=0)


def test_cos_sin_equal_hugging_face_rotary_embedding():
    """The whole path, including YaRN's attention scale, against LlamaRotaryEmbedding and apply_rotary_pos_emb."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    scaling = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 256}
    config = LlamaConfig(hidden_size=256, num_attention_heads=4, max_position_embeddings=1024,
                         rope_parameters={**scaling, "rope_theta": 10000.0})
    positions = torch.arange(0, 1024, 7)[None]
    x = torch.randn(1, positions.shape[1], 64)
    hf_cos, hf_sin = LlamaRotaryEmbedding(config)(x, positions)
    rope = RotaryEmbedding(64, scaling=scaling)
    cos, sin = rope.cos_sin(positions)
    torch.testing.assert_close(cos, hf_cos, rtol=0, atol=1e-6)
    torch.testing.assert_close(sin, hf_sin, rtol=0, atol=1e-6)
    q, k = torch.randn(2, 1, 4, positions.shape[1], 64).unbind(0)
    hf_q, hf_k = apply_rotary_pos_emb(q, k, hf_cos, hf_sin)
    our_q, our_k = rope(q, k, positions=positions)
    torch.testing.assert_close(our_q, hf_q, rtol=0, atol=1e-5)
    torch.testing.assert_close(our_k, hf_k, rtol=0, atol=1e-5)


def test_interleaved_equals_meta_llama_complex_form():
    """Meta's Llama rotates (x[2i], x[2i+1]) as the complex number x[2i] + i x[2i+1] times e^{i p w}."""
    torch.manual_seed(0)
    x = torch.randn(2, 9, 4, 16)  # Meta's layout: [batch, seq, heads, head_dim]
    inv_freq, _ = rope_frequencies(16, base=500000.0)
    angles = torch.outer(torch.arange(9).float(), inv_freq)
    x_complex = torch.view_as_complex(x.reshape(2, 9, 4, 8, 2))
    expected = torch.view_as_real(x_complex * torch.polar(torch.ones_like(angles), angles)[None, :, None]).flatten(3)
    cos, sin = rope_cos_sin(torch.arange(9), inv_freq, interleaved=True)
    got = apply_rope(x.transpose(1, 2), cos, sin, interleaved=True).transpose(1, 2)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)


# ---- the fast paths of apply_rope ------------------------------------------------------------------

def _formula64(x, cos, sin, interleaved):
    # the textbook formula in float64, written out here independently of posenc
    x, cos, sin = x.double(), cos.double(), sin.double()
    if interleaved:
        rotated = torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)
    else:
        first, second = x.chunk(2, dim=-1)
        rotated = torch.cat((-second, first), dim=-1)
    return x * cos + rotated * sin


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "broadcast_batch", "bfloat16", "float64"])
def test_fast_apply_rope_equals_the_formula(interleaved, layout):
    torch.manual_seed(0)
    batch, heads, seq, dim = 2, 3, 17, 16
    inv_freq, scale = rope_frequencies(dim, scaling={"rope_type": "yarn", "factor": 4.0,
                                                     "original_max_position_embeddings": 8})
    positions = torch.arange(5, 5 + seq)
    if layout == "broadcast_batch":  # per-row positions: cos/sin [batch, 1, seq, dim]
        positions = torch.stack((positions, positions + 3))[:, None]
    cos, sin = rope_cos_sin(positions, inv_freq, attention_scale=scale, interleaved=interleaved)
    x = torch.randn(batch, heads, seq, dim)
    if layout == "transposed":  # as q comes out of a [batch, seq, heads, dim] projection
        x = torch.randn(batch, seq, heads, dim).transpose(1, 2)
    if layout == "bfloat16":
        x = x.bfloat16()
    if layout == "float64":
        x = x.double()
    got = apply_rope(x, cos, sin, interleaved=interleaved)
    assert got.dtype == x.dtype and got.shape == x.shape
    want = _formula64(x, cos, sin, interleaved)
    tolerance = {"bfloat16": 2e-2, "float64": 1e-12}.get(layout, 1e-6)
    torch.testing.assert_close(got.double(), want, rtol=0, atol=tolerance)


@pytest.mark.parametrize("interleaved", [False, True])
def test_tables_not_laid_out_by_rope_cos_sin_take_the_general_formula(interleaved):
    torch.manual_seed(1)
    x, cos, sin = torch.randn(2, 4, 6, 8), torch.randn(6, 8), torch.randn(6, 8)  # no repeated angles
    torch.testing.assert_close(apply_rope(x, cos, sin, interleaved=interleaved).double(),
                               _formula64(x, cos, sin, interleaved), rtol=0, atol=1e-6)


@pytest.mark.parametrize("interleaved", [False, True])
def test_fast_apply_rope_gradient(interleaved):
    torch.manual_seed(2)
    inv_freq, _ = rope_frequencies(8)
    cos, sin = (t.double() for t in rope_cos_sin(torch.arange(5), inv_freq, interleaved=interleaved))
    x = torch.randn(2, 3, 5, 8, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: apply_rope(t, cos, sin, interleaved=interleaved), (x,))
    # and the gradient equals the formula's
    grad_out = torch.randn(2, 3, 5, 8, dtype=torch.float64)
    (fast,) = torch.autograd.grad(apply_rope(x, cos, sin, interleaved=interleaved), x, grad_out)
    (plain,) = torch.autograd.grad(_formula64(x, cos, sin, interleaved), x, grad_out)
    torch.testing.assert_close(fast, plain, rtol=0, atol=1e-12)


@pytest.mark.parametrize("interleaved", [False, True])
def test_compiled_rope_equals_apply_rope(interleaved):
    from posenc.rope import compile_apply_rope

    torch.manual_seed(3)
    inv_freq, _ = rope_frequencies(16)
    cos, sin = rope_cos_sin(torch.arange(12), inv_freq, interleaved=interleaved)
    x = torch.randn(1, 2, 12, 16)
    compiled = compile_apply_rope()
    torch.testing.assert_close(compiled(x, cos, sin, interleaved=interleaved).double(),
                               _formula64(x, cos, sin, interleaved), rtol=0, atol=1e-6)
