"""Multimodal RoPE (posenc.rope.multimodal) against Hugging Face transformers 5.23's Qwen2-VL and Qwen3-VL.

Tiny models and rotary modules are built from configs with random weights; nothing is downloaded. The
largest differences seen are noted next to each tolerance.
"""

import math

import pytest
import torch
from transformers import Qwen2VLConfig, Qwen2VLModel, Qwen2VLTextConfig, Qwen2VLTextModel
from transformers.models.qwen2_vl import modeling_qwen2_vl as hf_qwen2_vl
from transformers.models.qwen3_vl import modeling_qwen3_vl as hf_qwen3_vl
from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLTextConfig, Qwen3VLVisionConfig
from transformers.models.qwen2_vl.configuration_qwen2_vl import Qwen2VLVisionConfig
from transformers.vision_utils import get_vision_position_ids

from posenc.attention import LayerCache, MultiHeadAttention
from posenc.rope import apply_rope, default_inv_freq, rope_cos_sin
from posenc.rope.multimodal import (axial_positions, axial_rope_cos_sin, mrope_cos_sin, mrope_pair_axes,
                                    mrope_positions)

MERGE = 2  # Qwen2-VL's spatial_merge_size: HF's grid_thw holds h and w BEFORE the 2 x 2 merge


def tiny_qwen2_vl_config(mrope_section=(2, 3, 3), theta=1e4):
    text = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=4, vocab_size=64, bos_token_id=None, eos_token_id=None,
                rope_parameters={"rope_type": "default", "mrope_section": list(mrope_section), "rope_theta": theta})
    vision = dict(depth=1, embed_dim=16, hidden_size=64, num_heads=2, spatial_merge_size=MERGE)
    return Qwen2VLConfig(text_config=text, vision_config=vision)


@pytest.fixture(scope="module")
def qwen2_vl():
    torch.manual_seed(0)
    return Qwen2VLModel(tiny_qwen2_vl_config()).eval()


def hf_rope_index(model, layout, with_delta=False):
    """Qwen2-VL's get_rope_index for a layout of ints (text) and ("image" | "video", (t, h, w)) merged grids
    (and its rope delta, with_delta=True)."""
    config = model.config
    token_type, grids = [], {"image": [], "video": []}
    for item in layout:
        if isinstance(item, int):
            token_type += [0] * item
        else:
            kind, (t, h, w) = item
            token_type += [1 if kind == "image" else 2] * (t * h * w)
            grids[kind].append([t, h * MERGE, w * MERGE])  # HF's grid_thw is before the spatial merge
    token_type = torch.tensor([token_type], dtype=torch.int)
    input_ids = torch.where(token_type == 1, config.image_token_id,
                            torch.where(token_type == 2, config.video_token_id, 7)).long()
    position_ids, rope_deltas = model.get_rope_index(
        input_ids, token_type,
        image_grid_thw=torch.tensor(grids["image"]) if grids["image"] else None,
        video_grid_thw=torch.tensor(grids["video"]) if grids["video"] else None)
    return (position_ids[:, 0], int(rope_deltas)) if with_delta else position_ids[:, 0]  # [3, seq]


def segments_of(layout):
    return [item if isinstance(item, int) else item[1] for item in layout]


LAYOUTS = {
    "text only": [9],
    "text image text": [3, ("image", (1, 2, 3)), 4],
    "two images": [2, ("image", (1, 2, 2)), 3, ("image", (1, 3, 1)), 2],
    "video t>1": [2, ("video", (2, 2, 3)), 3],
    "image and video": [1, ("image", (1, 2, 2)), 2, ("video", (3, 2, 2)), 1],
    # more frames than max(h, w): 5.3 to 5.23 resume text at start + max(h, w), not at the largest id + 1
    "long video": [2, ("video", (4, 1, 2)), 3],
    "long video, then an image": [1, ("video", (6, 2, 2)), 2, ("image", (1, 2, 3)), 2],
}


def has_long_video(layout):
    """Whether a video has more temporal patches than max(h, w): where the two resume rules differ."""
    return any(not isinstance(item, int) and item[1][0] > max(item[1][1:]) for item in layout)


@pytest.mark.parametrize("name", LAYOUTS)
def test_mrope_positions_equal_hf_get_rope_index(qwen2_vl, name):
    # transformers 5.23 equals the "transformers_5.3" rule everywhere, and the default wherever no video
    # has more temporal patches than max(h, w)
    layout = LAYOUTS[name]
    expected = hf_rope_index(qwen2_vl, layout)
    got = mrope_positions(segments_of(layout), resume="transformers_5.3")
    assert got.dtype == torch.long and got.shape == expected.shape
    assert torch.equal(got, expected)
    assert torch.equal(mrope_positions(segments_of(layout)), expected) == (not has_long_video(layout))


def test_hf_5_3_prompt_ids_and_rope_deltas_disagree_after_a_long_video(qwen2_vl):
    # transformers 5.23 gives the text after a 6-frame 2 x 2 video the ids 4, 5, 6, but continues
    # generation at (its largest id) + 1 = 8: a jump over 7. Under the paper's rule the text is 8, 9, 10
    # and generation continues at 11, one past the last prompt token.
    layout = [2, ("video", (6, 2, 2)), 3]
    ids, delta = hf_rope_index(qwen2_vl, layout, with_delta=True)
    assert ids[:, -3:].tolist() == [[4, 5, 6]] * 3 and ids.shape[1] + delta == 8
    default = mrope_positions(segments_of(layout))
    assert int(default[0, -1]) + 1 == int(default.max()) + 1 == 11


def test_mrope_positions_by_hand():
    # text 0 1 | a 1 x 2 x 3 image starting at 2 | text resumes at 2 + max(1, 2, 3) = 5
    expected = torch.tensor([[0, 1, 2, 2, 2, 2, 2, 2, 5, 6],
                             [0, 1, 2, 2, 2, 3, 3, 3, 5, 6],
                             [0, 1, 2, 3, 4, 2, 3, 4, 5, 6]])
    for resume in ("largest_id_plus_one", "transformers_5.3"):  # an image: the two rules agree
        assert torch.equal(mrope_positions([2, (1, 2, 3), 2], seq_len=10, resume=resume), expected)
    assert torch.equal(mrope_positions([5]), torch.arange(5).expand(3, 5))


def paper_rule(segments):
    """The Qwen2-VL paper's rule, read literally: each segment starts one past the largest id so far."""
    columns = []
    for item in segments:
        start = max((max(column) for column in columns), default=-1) + 1
        if isinstance(item, int):
            columns += [(start + i,) * 3 for i in range(item)]
        else:
            t, h, w = item
            columns += [(start + f, start + r, start + c) for f in range(t) for r in range(h) for c in range(w)]
    return torch.tensor(columns).T


def test_mrope_positions_default_is_the_paper_rule():
    # a 6-frame 2 x 2 video at 2: frames t = 2 .. 7, so the text resumes at 8 (the 5.3 rule: 2 + 2 = 4,
    # reusing the t ids of frames 2, 3, 4)
    positions = mrope_positions([2, (6, 2, 2), 3])
    assert positions[:, -3:].tolist() == [[8, 9, 10]] * 3
    assert int(positions[0, 2:26].max()) == 7
    assert mrope_positions([2, (6, 2, 2), 3], resume="transformers_5.3")[:, -3:].tolist() == [[4, 5, 6]] * 3
    # the example in the Qwen team's get_rope_index docstring: 3 temporal patches of 2 x 2, then 5 text
    # tokens at "the max vision position_ids plus 1": 3, 4, 5, 6, 7
    assert mrope_positions([(3, 2, 2), 5])[:, -5:].tolist() == [[3, 4, 5, 6, 7]] * 3
    # two grids back to back: the image starts one past the video's last frame (t = 2), not at 0 + max(1, 1)
    assert mrope_positions([(3, 1, 1), (1, 2, 2), 1]).tolist() == [[0, 1, 2, 3, 3, 3, 3, 5],
                                                                   [0, 0, 0, 3, 3, 4, 4, 5],
                                                                   [0, 0, 0, 3, 4, 3, 4, 5]]
    for segments in ([3, (1, 3, 4), 2, (2, 2, 3), 3], [2, (6, 2, 2), 3], [1, (9, 1, 3), (1, 4, 2), 2, (5, 5, 5), 1]):
        assert torch.equal(mrope_positions(segments), paper_rule(segments))


def hf_mrope_tables(config, position_ids):
    rotary = hf_qwen2_vl.Qwen2VLRotaryEmbedding(config)
    return rotary(torch.zeros(1), position_ids)  # cos, sin [batch, seq, head_dim]


def test_mrope_cos_sin_equals_qwen2_vl_rotary_and_attention_rotation():
    # head_dim 32 = 128 / 4, sections sum to 16. In 5.23 the sectioning lives in
    # Qwen2VLRotaryEmbedding.recomposition_frequencies; the attention then calls plain apply_rotary_pos_emb.
    config = Qwen2VLTextConfig(hidden_size=128, num_attention_heads=4, num_key_value_heads=4,
                               rope_parameters={"rope_type": "default", "mrope_section": [4, 6, 6],
                                                "rope_theta": 1e6})
    batch_positions = torch.stack([mrope_positions([3, (1, 3, 4), 5]),
                                   mrope_positions([1, (2, 2, 2), 2, (1, 2, 2), 5])])  # [batch, 3, seq=20]
    hf_cos, hf_sin = hf_mrope_tables(config, batch_positions.transpose(0, 1))
    inv_freq = default_inv_freq(32, 1e6)
    cos, sin = mrope_cos_sin(batch_positions, inv_freq, [4, 6, 6])
    assert cos.shape == (2, 20, 32) and cos.dtype == torch.float32
    torch.testing.assert_close(cos, hf_cos, rtol=0, atol=0)  # bit for bit
    torch.testing.assert_close(sin, hf_sin, rtol=0, atol=0)
    for b in range(2):  # unbatched positions give each row
        cos_b, sin_b = mrope_cos_sin(batch_positions[b], inv_freq, [4, 6, 6])
        assert torch.equal(cos_b, hf_cos[b]) and torch.equal(sin_b, hf_sin[b])

    torch.manual_seed(1)
    q, k = torch.randn(2, 4, 20, 32), torch.randn(2, 4, 20, 32)
    hf_q, hf_k = hf_qwen2_vl.apply_rotary_pos_emb(q, k, hf_cos, hf_sin)
    got_q, got_k = apply_rope(q, cos[:, None], sin[:, None]), apply_rope(k, cos[:, None], sin[:, None])
    torch.testing.assert_close(got_q, hf_q, rtol=0, atol=1e-6)  # largest difference seen: 2.4e-7
    torch.testing.assert_close(got_k, hf_k, rtol=0, atol=1e-6)


@pytest.mark.parametrize("head_dim, section", [(128, [24, 20, 20]), (32, [6, 5, 5]), (16, [3, 3, 2])])
def test_interleaved_sections_equal_qwen3_vl_text_rotary(head_dim, section):
    config = Qwen3VLTextConfig(head_dim=head_dim, rope_parameters={
        "rope_type": "default", "mrope_section": section, "mrope_interleaved": True, "rope_theta": 5e6})
    rotary = hf_qwen3_vl.Qwen3VLTextRotaryEmbedding(config)
    positions = mrope_positions([3, (2, 3, 5), 4, (1, 4, 2), 2])
    hf_cos, hf_sin = rotary(torch.zeros(1), positions[:, None])
    cos, sin = mrope_cos_sin(positions, default_inv_freq(head_dim, 5e6), section, interleaved_sections=True)
    assert torch.equal(cos, hf_cos[0]) and torch.equal(sin, hf_sin[0])  # bit for bit
    contiguous, _ = mrope_cos_sin(positions, default_inv_freq(head_dim, 5e6), section)
    assert not torch.equal(contiguous, cos)  # the two layouts really differ on vision tokens


def test_pair_axes_layouts():
    assert mrope_pair_axes([2, 3, 3]).tolist() == [0, 0, 1, 1, 1, 2, 2, 2]
    assert mrope_pair_axes([3, 3, 2], interleaved_sections=True).tolist() == [0, 1, 2, 0, 1, 2, 0, 1]
    axes = mrope_pair_axes([24, 20, 20], interleaved_sections=True)
    assert axes.bincount().tolist() == [24, 20, 20] and axes[-4:].tolist() == [0, 0, 0, 0]


@pytest.mark.parametrize("interleaved_sections", [False, True])
def test_text_only_mrope_is_plain_rope(interleaved_sections):
    positions = torch.tensor([0, 1, 2, 7, 100, 4095])
    inv_freq = default_inv_freq(16, 1e6)
    cos, sin = mrope_cos_sin(positions.expand(3, -1), inv_freq, [3, 3, 2],
                             interleaved_sections=interleaved_sections, attention_scale=1.5)
    plain_cos, plain_sin = rope_cos_sin(positions, inv_freq, attention_scale=1.5)
    assert torch.equal(cos, plain_cos) and torch.equal(sin, plain_sin)


def mrope_reference(x, positions, inv_freq, section):
    """Qwen2-VL's M-RoPE in float64 by explicit rotations: contiguous pair blocks follow t, h, w in turn."""
    x, out = x.double(), x.double().clone()
    half = x.shape[-1] // 2
    axis_of_pair = [0] * section[0] + [1] * section[1] + [2] * section[2]
    for s in range(x.shape[-2]):
        for i in range(half):
            angle = positions[axis_of_pair[i], s].item() * inv_freq[i].item()
            a, b = x[..., s, i], x[..., s, i + half]
            out[..., s, i] = a * math.cos(angle) - b * math.sin(angle)
            out[..., s, i + half] = a * math.sin(angle) + b * math.cos(angle)
    return out


def test_mrope_equals_float64_rotations_and_is_relative_per_axis():
    torch.manual_seed(2)
    inv_freq = default_inv_freq(16, 100.0)
    positions = mrope_positions([2, (2, 2, 3), 2])
    x = torch.randn(3, positions.shape[1], 16)
    cos, sin = mrope_cos_sin(positions, inv_freq, [2, 3, 3])
    torch.testing.assert_close(apply_rope(x, cos, sin).double(), mrope_reference(x, positions, inv_freq, [2, 3, 3]),
                               rtol=0, atol=1e-6)  # largest difference seen: 2.0e-7
    # q at (t, h, w) and k at (t', h', w'): the score depends only on the differences, axis by axis
    q, k = torch.randn(16), torch.randn(16)

    def score(query_ids, key_ids):
        ids = torch.tensor([query_ids, key_ids]).T  # [3, 2]
        c, s = mrope_cos_sin(ids, inv_freq, [2, 3, 3])
        rotated = apply_rope(torch.stack([q, k]), c, s)
        return float(rotated[0] @ rotated[1])

    base = score((5, 3, 9), (2, 1, 4))
    assert score((5 + 11, 3 + 4, 9 + 7), (2 + 11, 1 + 4, 4 + 7)) == pytest.approx(base, abs=1e-4)
    assert score((5, 3, 9), (2, 1, 5)) != pytest.approx(base, abs=1e-2)


@pytest.mark.parametrize("t, h, w, merge", [(1, 3, 5, 1), (1, 4, 6, 2), (2, 4, 2, 2)])
def test_axial_positions_equal_hf_vision_position_ids(t, h, w, merge):
    hf = get_vision_position_ids(torch.tensor([[t, h, w]]), merge)  # [t * h * w, 2]
    assert torch.equal(axial_positions(h, w, merge_size=merge).repeat(1, t), hf.T)  # frames repeat the ids


def test_axial_positions_raster_order():
    assert axial_positions(2, 3).tolist() == [[0, 0, 0, 1, 1, 1], [0, 1, 2, 0, 1, 2]]
    assert axial_positions(2, 4, merge_size=2).tolist() == [[0, 0, 1, 1, 0, 0, 1, 1], [0, 1, 0, 1, 2, 3, 2, 3]]


@pytest.mark.parametrize("version", ["qwen2_vl", "qwen3_vl"])
def test_axial_rope_equals_hf_vision_rotary(version):
    # 4 heads of head_dim 16; the HF module is given its own vision position ids (merge 2, block order)
    theta = 10000.0
    if version == "qwen2_vl":
        config = Qwen2VLVisionConfig(embed_dim=64, num_heads=4, rope_parameters={"rope_type": "axial",
                                                                                 "rope_theta": theta})
        module, rotary = hf_qwen2_vl, hf_qwen2_vl.Qwen2VLVisionRotaryEmbedding(config)
    else:
        config = Qwen3VLVisionConfig(hidden_size=64, num_heads=4, rope_parameters={"rope_type": "axial",
                                                                                   "rope_theta": theta})
        module, rotary = hf_qwen3_vl, hf_qwen3_vl.Qwen3VLVisionRotaryEmbedding(config)
    hf_ids = get_vision_position_ids(torch.tensor([[1, 4, 6]]), MERGE)  # [n, 2]
    hf_cos, hf_sin = rotary(torch.zeros(1), hf_ids)
    positions = axial_positions(4, 6, merge_size=MERGE)
    cos, sin = axial_rope_cos_sin(positions, 16, base=theta)
    assert cos.shape == (24, 16) and torch.equal(cos, hf_cos) and torch.equal(sin, hf_sin)

    torch.manual_seed(3)
    q, k = torch.randn(24, 4, 16), torch.randn(24, 4, 16)  # HF's vision layout [n, heads, head_dim]
    hf_q, hf_k = module.apply_rotary_pos_emb_vision(q, k, hf_cos, hf_sin)
    got_q = apply_rope(q.transpose(0, 1), cos, sin).transpose(0, 1)
    got_k = apply_rope(k.transpose(0, 1), cos, sin).transpose(0, 1)
    torch.testing.assert_close(got_q, hf_q, rtol=0, atol=1e-6)  # largest difference seen: 2.4e-7
    torch.testing.assert_close(got_k, hf_k, rtol=0, atol=1e-6)


def test_axial_rope_by_hand_and_relative():
    # head_dim 8: pairs 0, 1 turn with the row at inv_freq [1, 1/100]; pairs 2, 3 with the column
    cos, sin = axial_rope_cos_sin(torch.tensor([[3], [5]]), 8, base=10000.0)
    angles = torch.tensor([3.0, 3.0 / 100, 5.0, 5.0 / 100] * 2, dtype=torch.float64)
    torch.testing.assert_close(cos[0].double(), angles.cos(), rtol=0, atol=1e-7)
    torch.testing.assert_close(sin[0].double(), angles.sin(), rtol=0, atol=1e-7)

    torch.manual_seed(4)
    q, k = torch.randn(16), torch.randn(16)

    def score(query_rc, key_rc):
        c, s = axial_rope_cos_sin(torch.tensor([query_rc, key_rc]).T, 16)
        rotated = apply_rope(torch.stack([q, k]), c, s)
        return float(rotated[0] @ rotated[1])

    base = score((2, 7), (0, 3))
    assert score((2 + 9, 7 + 5), (0 + 9, 3 + 5)) == pytest.approx(base, abs=1e-4)
    assert score((2 + 9, 7), (0 + 9, 3)) == pytest.approx(base, abs=1e-4)
    assert score((2, 7), (1, 3)) != pytest.approx(base, abs=1e-2)  # a different d_row
    assert score((2, 7), (0, 4)) != pytest.approx(base, abs=1e-2)  # a different d_col


def test_qwen2_vl_attention_layer_equals_posenc_attention():
    torch.manual_seed(5)
    config = tiny_qwen2_vl_config(mrope_section=(2, 3, 3), theta=1e6).text_config
    config._attn_implementation = "eager"
    config.initializer_range = 0.15  # weights large enough that outputs are O(1), not O(0.01)
    model = Qwen2VLTextModel(config).eval()
    hf_attention = model.layers[1].self_attn
    captured = {}

    def hook(module, args, kwargs, output):
        captured["x"] = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]
        captured["y"] = output[0]

    handle = hf_attention.register_forward_hook(hook, with_kwargs=True)
    # two layouts of 13 tokens: text, a 2 x 3 merged image, text; and text, a 2-frame 2 x 2 video, text
    positions = torch.stack([mrope_positions([3, (1, 2, 3), 4]), mrope_positions([1, (2, 2, 2), 4])])
    with torch.no_grad():
        model(input_ids=torch.randint(0, 64, (2, 13)), position_ids=positions.transpose(0, 1))
    handle.remove()

    attention = MultiHeadAttention(64, 4, position="rope")
    with torch.no_grad():
        attention.qkv.weight.copy_(torch.cat([hf_attention.q_proj.weight, hf_attention.k_proj.weight,
                                              hf_attention.v_proj.weight]))
        attention.qkv.bias.copy_(torch.cat([hf_attention.q_proj.bias, hf_attention.k_proj.bias,
                                            hf_attention.v_proj.bias]))
        attention.out.weight.copy_(hf_attention.o_proj.weight)
        attention.out.bias.zero_()  # Qwen2-VL's o_proj has no bias
        cos, sin = mrope_cos_sin(positions, default_inv_freq(16, 1e6), [2, 3, 3])  # [2, 13, 16]
        got = attention(captured["x"], rope_cos_sin=(cos, sin))
        # largest seen: 6.0e-7 (outputs ~3); 5e-5 relative to the outputs, as tests/hf_layers.py (round-off
        # grows 2.5x under make test-portable's other kernels)
        torch.testing.assert_close(got, captured["y"], rtol=5e-5, atol=5e-5)

        # cached decoding, one token at a time with its own tables, equals the full pass
        cache = LayerCache()
        steps = [attention(captured["x"][:, i:i + 1], cache=cache, rope_cos_sin=(cos[:, i:i + 1], sin[:, i:i + 1]))
                 for i in range(13)]
        torch.testing.assert_close(torch.cat(steps, dim=1), got, rtol=5e-5, atol=5e-5)  # largest seen: 9.5e-7

        # the vision ids matter: plain 1-D positions give a different output
        cos_1d, sin_1d = rope_cos_sin(torch.arange(13), default_inv_freq(16, 1e6))
        assert (attention(captured["x"], rope_cos_sin=(cos_1d, sin_1d)) - captured["y"]).abs().max() > 1e-2


def test_qwen2_vl_vision_attention_equals_posenc_encoder_attention():
    # the ViT's attention: one qkv Linear laid out [3, heads, head_dim] like posenc's, no causal mask
    torch.manual_seed(6)
    config = Qwen2VLVisionConfig(embed_dim=64, num_heads=4, rope_parameters={"rope_type": "axial", "rope_theta": 1e4})
    config._attn_implementation = "eager"
    hf_attention = hf_qwen2_vl.VisionAttention(config).eval()
    for parameter in hf_attention.parameters():
        torch.nn.init.normal_(parameter, std=0.15)
    hf_tables = hf_qwen2_vl.Qwen2VLVisionRotaryEmbedding(config)(
        torch.zeros(1), get_vision_position_ids(torch.tensor([[1, 4, 6]]), MERGE))
    x = torch.randn(24, 64)
    attention = MultiHeadAttention(64, 4, position="rope", causal=False)
    with torch.no_grad():
        for ours, theirs in ((attention.qkv, hf_attention.qkv), (attention.out, hf_attention.proj)):
            ours.weight.copy_(theirs.weight)
            ours.bias.copy_(theirs.bias)
        expected = hf_attention(x, cu_seqlens=torch.tensor([0, 24], dtype=torch.int32), position_embeddings=hf_tables)
        cos, sin = axial_rope_cos_sin(axial_positions(4, 6, merge_size=MERGE), 16, base=1e4)
        got = attention(x[None], rope_cos_sin=(cos, sin))[0]
    torch.testing.assert_close(got, expected, rtol=5e-5, atol=5e-5)  # largest seen: 7.2e-7 (outputs ~2)


# ---- errors name the argument ----

def test_mrope_section_errors():
    inv_freq, positions = default_inv_freq(16), mrope_positions([4])
    with pytest.raises(ValueError, match="mrope_section"):
        mrope_cos_sin(positions, inv_freq, [2, 3, 4])  # sums to 9, not 8
    with pytest.raises(ValueError, match="mrope_section"):
        mrope_cos_sin(positions, inv_freq, [0, 4, 4], interleaved_sections=True)  # h, w hold at most 3 each
    with pytest.raises(ValueError, match="mrope_section"):
        mrope_cos_sin(positions, inv_freq, [2, 3, 3], interleaved_sections=True)  # HF would silently use [3, 3, 2]
    with pytest.raises(TypeError, match="mrope_section"):
        mrope_cos_sin(positions, inv_freq, [8])
    with pytest.raises(ValueError, match=r"mrope_section\[1\]"):
        mrope_cos_sin(positions, inv_freq, [5, -1, 4])
    with pytest.raises(ValueError, match="mrope_section"):
        mrope_pair_axes([0, 0, 0])


def test_mrope_cos_sin_input_errors():
    inv_freq = default_inv_freq(16)
    with pytest.raises(ValueError, match="positions"):
        mrope_cos_sin(torch.arange(4), inv_freq, [2, 3, 3])  # 1-D: no axes
    with pytest.raises(ValueError, match="positions"):
        mrope_cos_sin(torch.zeros(2, 4, dtype=torch.long), inv_freq, [2, 3, 3])  # 2 axes, not 3
    with pytest.raises(ValueError, match="positions"):
        mrope_cos_sin(torch.full((3, 4), 0.5), inv_freq, [2, 3, 3])
    with pytest.raises(ValueError, match="inv_freq"):
        mrope_cos_sin(torch.zeros(3, 4, dtype=torch.long), inv_freq[None], [2, 3, 3])


def test_mrope_positions_errors():
    with pytest.raises(TypeError, match="segments"):
        mrope_positions(5)
    with pytest.raises(TypeError, match=r"segments\[1\]"):
        mrope_positions([2, (1, 2)])
    with pytest.raises(ValueError, match=r"segments\[0\]\[1\]"):
        mrope_positions([(1, 0, 2)])
    with pytest.raises(ValueError, match=r"segments\[0\]"):
        mrope_positions([-1])
    with pytest.raises(ValueError, match="seq_len"):
        mrope_positions([2, (1, 2, 2)], seq_len=7)  # covers 6 tokens
    with pytest.raises(ValueError, match="resume"):
        mrope_positions([2], resume="max_hw")


def test_axial_errors():
    with pytest.raises(ValueError, match="merge_size"):
        axial_positions(3, 4, merge_size=2)
    with pytest.raises(ValueError, match="height"):
        axial_positions(0, 4)
    with pytest.raises(ValueError, match="head_dim"):
        axial_rope_cos_sin(axial_positions(2, 2), 6)
    with pytest.raises(ValueError, match="positions"):
        axial_rope_cos_sin(torch.zeros(3, 4, dtype=torch.long), 8)
    with pytest.raises(ValueError, match="base"):
        axial_rope_cos_sin(axial_positions(2, 2), 8, base=0.0)
