"""posenc.interactive's LongRoPE figure against the published factors and hand computations (the other
figures are checked in the browser test and by chapter 19's assertions)."""

import math

import torch

from posenc import interactive
from test_hf_published_configs import PHI_35_MINI_INSTRUCT


def test_the_package_copy_of_phi35_factors_equals_the_published_config():
    published = PHI_35_MINI_INSTRUCT["rope_scaling"]
    ours = interactive.PHI35_MINI_LONGROPE
    for key in ("short_factor", "long_factor"):  # the config holds float32 values of two-decimal numbers
        assert torch.equal(torch.tensor(ours[key], dtype=torch.float32),
                           torch.tensor(published[key], dtype=torch.float32)), key
    config = PHI_35_MINI_INSTRUCT
    assert ours["head_dim"] == config["hidden_size"] // config["num_attention_heads"]
    assert ours["base"] == config["rope_theta"]
    assert ours["original_max_position_embeddings"] == config["original_max_position_embeddings"]
    assert ours["max_position_embeddings"] == config["max_position_embeddings"]


def test_longrope_frames_draw_each_pairs_factor_and_the_references():
    frames, layout = interactive.longrope_factors()
    assert [frame["label"] for frame in frames] == ["short factors", "long factors"]
    published = PHI_35_MINI_INSTRUCT["rope_scaling"]
    for frame, key in zip(frames, ("short_factor", "long_factor")):
        traces = {trace["name"]: trace for trace in frame["data"]}
        longrope = traces[f"LongRoPE, {frame['label']}"]["y"]
        # inv_freq' = inv_freq / factor_i, so the slow-down of pair i is its factor (drawn to 3 significant
        # digits, which every CPU's float32 tables agree on)
        assert max(abs(a - b) / b for a, b in zip(longrope, published[key])) <= 5e-3
        assert all(abs(value - 32) < 1e-3 for value in traces["PI at s = 32"]["y"])
    assert frames[0]["data"][-1]["y"] != frames[1]["data"][-1]["y"]
    assert "64.84" in frames[1]["title"] and "2.84" in frames[0]["title"]
    # YaRN's bands by hand: wavelength 2 pi 10000^(2i/96) under 4096/32 = 128 tokens, over 4096 tokens
    wavelengths = [2 * math.pi * 10000 ** (2 * i / 96) for i in range(48)]
    kept = sum(w < 128 for w in wavelengths)
    interpolated = sum(w > 4096 for w in wavelengths)
    assert [shape["x0"] for shape in layout["shapes"]] == [kept - 0.5, 48 - interpolated - 0.5]
