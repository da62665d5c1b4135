"""Per-layer plans, masks, sinks, temperature and the rolling cache, against formulas written out here."""

from __future__ import annotations

import copy
import json
import math
import textwrap

import pytest
import torch

import posenc
from posenc.attention import MultiHeadAttention
from posenc.cache import KVCache, LayerCache, RollingLayerCache
from posenc.masks import causal_mask, chunked_mask, sliding_window_mask
from posenc.plan import (PLAN_FAMILIES, LayerSpec, Rope, Temperature, describe_plan, every_nth, family_plan,
                         plan_from_dict, plan_to_dict, repeat_pattern)
from posenc.sinks import sink_attention
from posenc.temperature import attention_temperature


def _by_loops(q_len, k_len, visible):
    return torch.tensor([[visible(i + k_len - q_len, j) for j in range(k_len)] for i in range(q_len)])


@pytest.mark.parametrize("q_len,k_len", [(7, 7), (1, 9), (3, 10)])
def test_masks_equal_their_definitions(q_len, k_len):
    assert torch.equal(causal_mask(q_len, k_len), _by_loops(q_len, k_len, lambda i, j: j <= i))
    assert torch.equal(sliding_window_mask(q_len, k_len, 3), _by_loops(q_len, k_len, lambda i, j: j <= i and i - j < 3))
    assert torch.equal(chunked_mask(q_len, k_len, 4), _by_loops(q_len, k_len, lambda i, j: j <= i and i // 4 == j // 4))


def test_attention_temperature_is_llama4s_staircase():
    positions = torch.tensor([0, 8190, 8191, 16382, 16383, 100_000])
    expected = [1 + 0.1 * math.log(1 + math.floor((p + 1) / 8192)) for p in positions.tolist()]
    assert attention_temperature(positions).tolist() == pytest.approx(expected, abs=1e-6)
    assert attention_temperature(positions)[:2].tolist() == [1.0, 1.0]  # exactly 1 below the first step
    assert attention_temperature(torch.tensor([[3, 7]]), floor_scale=4, scale=0.5).shape == (1, 2)


def test_sink_attention_equals_the_concatenated_softmax():
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 5, 8, generator=generator, dtype=torch.float64) for _ in range(3))
    sinks = torch.randn(3, generator=generator, dtype=torch.float64)
    mask = sliding_window_mask(5, 5, 2)
    scores = (q @ k.transpose(-2, -1) / math.sqrt(8)).masked_fill(~mask, float("-inf"))
    with_sink = torch.cat((scores, sinks[None, :, None, None].expand(2, 3, 5, 1)), dim=-1)
    expected = with_sink.softmax(-1)[..., :-1] @ v
    torch.testing.assert_close(sink_attention(q, k, v, sinks, mask=mask), expected, rtol=0, atol=1e-12)
    out, weights = sink_attention(q, k, v, sinks, mask=mask, need_weights=True)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-12)
    assert (weights.sum(-1) < 1).all()  # the sink keeps a share of every row
    # a sink at -inf is no sink at all
    plain = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(sink_attention(q, k, v, torch.full((3,), float("-inf"), dtype=torch.float64),
                                              mask=mask), plain, rtol=0, atol=1e-12)


def _model(plan, seed=0, **options):
    torch.manual_seed(seed)
    model = posenc.TransformerLM(50, 32, len(plan), 4, position=options.pop("position", "none"), plan=plan,
                                 **options).eval()
    for block in model.blocks:  # sinks start at zero; make them matter
        if block.attn.sinks is not None:
            torch.nn.init.normal_(block.attn.sinks, std=1.0)
    return model


@pytest.mark.parametrize("family", PLAN_FAMILIES)
def test_cached_decoding_equals_the_full_pass_for_every_family(family):
    plan = family_plan(family, 4, window=6, original_context=8)
    model = _model(plan)
    tokens = torch.randint(0, 50, (2, 21), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = model(tokens)
        cache = model.new_cache()
        steps = [model(tokens[:, :5], cache=cache)] + [model(tokens[:, t:t + 1], cache=cache) for t in range(5, 21)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=0, atol=2e-5)


def test_windows_chunks_temperature_and_sinks_change_the_output():
    tokens = torch.randint(0, 50, (1, 20), generator=torch.Generator().manual_seed(2))
    base = LayerSpec("rope")
    variants = [LayerSpec("rope", window=4), LayerSpec("rope", chunk=4), LayerSpec("rope", sinks=True),
                LayerSpec("none"), LayerSpec("none", temperature=Temperature(floor_scale=4, scale=0.5))]
    with torch.no_grad():
        reference = _model([base] * 2)(tokens)
        for spec in variants:
            logits = _model([spec] * 2)(tokens)
            # the first tokens see the same keys (inside the window, chunk and first temperature step) ...
            if spec.window or spec.chunk or spec.temperature:
                expected = reference if spec.position == "rope" else _model([LayerSpec("none")] * 2)(tokens)
                torch.testing.assert_close(logits[:, :3], expected[:, :3], rtol=0, atol=1e-5)
            # ... and later ones do not
            assert (logits[:, 8:] - reference[:, 8:]).abs().max() > 1e-3, spec.describe()


def test_uniform_plan_reproduces_the_position_argument_bit_for_bit():
    tokens = torch.randint(0, 50, (2, 12), generator=torch.Generator().manual_seed(3))
    for position, spec in [("rope", LayerSpec("rope", rope=Rope(base=10000.0))), ("alibi", LayerSpec("alibi")),
                           ("t5", LayerSpec("t5")), ("none", LayerSpec("none"))]:
        torch.manual_seed(0)
        old = posenc.TransformerLM(50, 32, 2, 4, position=position).eval()
        new = _model([spec] * 2)
        assert new.plan == old.plan
        with torch.no_grad():
            assert torch.equal(old(tokens), new(tokens)), position


@pytest.mark.parametrize("spec", [LayerSpec("t5", window=4), LayerSpec("t5", chunk=4)])
def test_uniform_plan_of_windowed_or_chunked_t5_layers(spec):
    # review P5-m8: equal T5 layers share one bias per pass, and a window or chunk crashed on that path
    tokens = torch.randint(0, 50, (1, 16), generator=torch.Generator().manual_seed(4))
    model = _model([spec] * 2)
    assert model.t5_layers_share
    with torch.no_grad():
        logits = model(tokens)
        model.t5_layers_share = False  # each layer builds its own bias and mask (the mixed-plan path)
        torch.testing.assert_close(logits, model(tokens), rtol=0, atol=1e-6)
        model.t5_layers_share = True
        # which tokens can reach query i, from the masks' definitions: two windows of 4 reach 6 back,
        # chunks of 4 never leave the query's chunk
        first = (lambda i: max(0, i - 6)) if spec.window else (lambda i: i - i % 4)
        for i in (7, 9, 14):
            changed = tokens.clone()
            changed[0, first(i) - 1] = (changed[0, first(i) - 1] + 1) % 50  # just out of reach
            torch.testing.assert_close(model(changed)[:, i], logits[:, i], rtol=0, atol=1e-6)
            changed[0, first(i)] = (changed[0, first(i)] + 1) % 50  # the farthest token in reach
            assert (model(changed)[:, i] - logits[:, i]).abs().max() > 1e-4, i
        cache = model.new_cache()
        steps = [model(tokens[:, t:t + 1], cache=cache) for t in range(16)]
    torch.testing.assert_close(torch.cat(steps, dim=1), logits, rtol=0, atol=2e-5)


def test_plans_are_data():
    plan = family_plan("gemma3", 6)
    assert plan_from_dict(json.loads(json.dumps(plan_to_dict(plan)))) == plan
    assert describe_plan(plan).splitlines()[0] == "layer 0: rope(base=10000) window=32"
    assert describe_plan(plan).splitlines()[5] == "layer 5: rope(base=1e+06, linear x8)"
    local, nope = LayerSpec("rope", window=8), LayerSpec("none")
    assert [s.position for s in every_nth(nope, 4, otherwise=local, n_layers=8)] == ["rope"] * 3 + ["none"] + \
        ["rope"] * 3 + ["none"]
    assert repeat_pattern({"L": local, "G": nope}, "LLG", 5) == [local, local, nope, local, local]
    layer = MultiHeadAttention.from_spec(32, 4, LayerSpec("rope", window=8, sinks=True))
    assert layer.spec == LayerSpec("rope", window=8, sinks=True)


def test_a_layer_spec_head_dim_sets_the_head_width():
    # Gemma 3 and gpt-oss set head_dim apart from dim / n_heads: the spec carries it, the layer's heads take it,
    # and RoPE's frequencies and the default softmax scale are computed over it, not over dim // n_heads
    spec = LayerSpec("rope", rope=Rope(100.0), window=8, head_dim=16)
    assert spec.describe() == "rope(base=100) window=8 head_dim=16"
    assert plan_from_dict(json.loads(json.dumps(plan_to_dict([spec])))) == [spec]
    assert plan_from_dict([{k: v for k, v in plan_to_dict([LayerSpec("none")])[0].items() if k != "head_dim"}]) == \
        [LayerSpec("none")]  # records written before head_dim read as before
    torch.manual_seed(0)
    layer = MultiHeadAttention.from_spec(32, 4, spec).eval()  # 32 / 4 = 8, but heads of 16
    assert layer.spec == spec and layer.head_dim == 16 and layer.rotary.head_dim == 16
    assert tuple(layer.qkv.weight.shape) == (3 * 4 * 16, 32) and tuple(layer.out.weight.shape) == (32, 4 * 16)
    x = torch.randn(2, 11, 32)
    q, k, v = layer.qkv(x).view(2, 11, 3, 4, 16).permute(2, 0, 3, 1, 4)
    q, k = layer.rotary(q, k)
    visible = sliding_window_mask(11, 11, 8)
    scores = (q @ k.transpose(-2, -1) / 4.0).masked_fill(~visible, float("-inf"))  # 16 ** -0.5
    expected = layer.out((scores.softmax(-1) @ v).transpose(1, 2).reshape(2, 11, 64))
    torch.testing.assert_close(layer(x), expected)
    assert MultiHeadAttention(30, 4, head_dim=8).inner_dim == 32  # dim need not divide by n_heads then


def _rolling_layer():
    torch.manual_seed(0)
    return MultiHeadAttention(16, 2, position="rope", rope_base=100.0).eval()


def test_rolling_cache_equals_a_full_pass_over_the_kept_tokens():
    layer = _rolling_layer()
    hidden = torch.randn(1, 30, 16, generator=torch.Generator().manual_seed(4))
    sink_tokens, window = 3, 5
    cache = RollingLayerCache(sink_tokens, window)
    with torch.no_grad():
        for t in range(30):
            out = layer(hidden[:, t:t + 1], cache=cache)
            kept = list(range(min(sink_tokens, t + 1))) + list(range(max(sink_tokens, t + 1 - window), t + 1))
            assert cache.length == len(kept)
            expected = layer(hidden[:, kept])[:, -1:]  # positions 0 .. len(kept)-1, as StreamingLLM assigns
            torch.testing.assert_close(out, expected, rtol=0, atol=2e-6)
    assert cache.evicted == 30 - sink_tokens - window


def test_rolling_cache_without_rerotation_would_be_wrong():
    layer = _rolling_layer()
    hidden = torch.randn(1, 12, 16, generator=torch.Generator().manual_seed(5))
    cache = RollingLayerCache(2, 4)
    with torch.no_grad():
        for t in range(12):
            out = layer(hidden[:, t:t + 1], cache=cache)
        kept = [0, 1, 8, 9, 10, 11]
        expected = layer(hidden[:, kept])[:, -1:]
        torch.testing.assert_close(out, expected, rtol=0, atol=2e-6)
        # keys kept at their old rotation (positions 6..9 instead of 2..5) give a different output
        stale = RollingLayerCache(2, 4)
        stale_out = [layer(hidden[:, t:t + 1], cache=stale) for t in range(7)]
        stale.make_room = lambda new_tokens, shift_keys=None: RollingLayerCache.make_room(stale, new_tokens, None)
        for t in range(7, 12):
            stale_out.append(layer(hidden[:, t:t + 1], cache=stale))
    assert (stale_out[-1] - expected).abs().max() > 1e-3


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_rolling_cache_in_half_precision_stays_within_a_fresh_pass_error(dtype):
    # StreamingLLM's 4 + 1020 (its cache of 1024) over 2100 tokens: kept keys are re-rotated up to 1019
    # times. Stored back in bf16 after each rotation they drifted to 15x a fresh pass's error (review P4-M3).
    torch.manual_seed(0)
    layer = MultiHeadAttention(256, 2, position="rope").eval()
    n, sink_tokens, window = 2100, 4, 1020
    hidden = torch.randn(1, n, 256, generator=torch.Generator().manual_seed(1))
    kept = list(range(sink_tokens)) + list(range(n - window, n))
    with torch.no_grad():
        reference = copy.deepcopy(layer).double()(hidden[:, kept].double())[0, -1]
        layer = layer.to(dtype)
        fresh = layer(hidden[:, kept].to(dtype))[0, -1]
        cache = RollingLayerCache(sink_tokens, window)
        for t in range(n):
            out = layer(hidden[:, t:t + 1].to(dtype), cache=cache)
    assert out.dtype == dtype and cache.length == sink_tokens + window

    def error(y):
        return ((y.double() - reference).norm() / reference.norm()).item()

    assert error(out[0, -1]) < 1.5 * error(fresh), (error(out[0, -1]), error(fresh))


def test_streaming_model_matches_a_one_layer_full_pass():
    torch.manual_seed(0)
    model = posenc.TransformerLM(50, 16, 1, 2, position="rope").eval()
    tokens = torch.randint(0, 50, (1, 40), generator=torch.Generator().manual_seed(6))
    cache = model.new_cache(sink_tokens=2, window=6)
    with torch.no_grad():
        for t in range(40):
            logits = model(tokens[:, t:t + 1], cache=cache)
        kept = [0, 1] + list(range(34, 40))
        torch.testing.assert_close(logits, model(tokens[:, kept])[:, -1:], rtol=0, atol=2e-6)


def test_streaming_runs_a_learned_table_past_its_length():
    # Positions never pass sink_tokens + window - 1, so an 8-row table streams 40 tokens. (Absolute
    # positions are baked into the cached keys, so unlike RoPE it does not equal a fresh pass.)
    torch.manual_seed(0)
    model = posenc.TransformerLM(50, 16, 2, 2, position="learned", max_len=8).eval()
    cache = model.new_cache(sink_tokens=2, window=6)
    with torch.no_grad():
        for t in range(40):
            logits = model(torch.tensor([[t % 50]]), cache=cache)
    assert cache.length == 8 and cache[0].evicted == 32 and torch.isfinite(logits).all()
    with pytest.raises(ValueError, match="max_len=8"):
        model.new_cache(sink_tokens=4, window=6)


@pytest.mark.parametrize("make, match", [
    (lambda: LayerSpec("rotary"), "LayerSpec.position"),
    (lambda: LayerSpec("sinusoidal"), "absolute encoding"),
    (lambda: LayerSpec("none", rope=Rope()), "LayerSpec.rope"),
    (lambda: LayerSpec("rope", window=0), "LayerSpec.window"),
    (lambda: LayerSpec("rope", window=4, chunk=4), "window or chunk"),
    (lambda: LayerSpec("rope", head_dim=0), "LayerSpec.head_dim"),
    (lambda: Temperature(floor_scale=0), "Temperature.floor_scale"),
    (lambda: posenc.TransformerLM(50, 32, 2, 4, position="none", plan=[LayerSpec("rope", window=64)] * 2,
                                  max_len=32), r"plan\[0\].window"),
    (lambda: posenc.TransformerLM(50, 32, 3, 4, position="none", plan=[LayerSpec("rope")] * 2), "n_layers"),
    (lambda: posenc.TransformerLM(50, 32, 2, 4, position="rope", plan=[LayerSpec("rope")] * 2), "with a plan"),
    (lambda: posenc.TransformerLM(50, 32, 2, 4, position="none", plan=["rope", "rope"]), r"plan\[0\]"),
    (lambda: MultiHeadAttention(32, 4, window=4, causal=False), "causal=True"),
    (lambda: repeat_pattern({"L": LayerSpec("rope")}, "LG", 4), "pattern letters"),
    (lambda: family_plan("llama5", 4), "family"),
    (lambda: RollingLayerCache(2, 0), "window"),
    (lambda: KVCache(2, sink_tokens=4), "both sink_tokens and window"),
    (lambda: sliding_window_mask(4, 3, 2), "q_len must be <= k_len"),
    (lambda: sink_attention(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4),
                            torch.zeros(3)), "sinks must have shape"),
    (lambda: attention_temperature(torch.tensor([0.5])), "positions"),
])
def test_bad_plans_raise_errors_that_name_the_argument(make, match):
    with pytest.raises((ValueError, TypeError), match=match):
        make()


def test_rolling_cache_refuses_explicit_positions_and_oversized_chunks():
    layer = _rolling_layer()
    with pytest.raises(ValueError, match="positions"):
        layer(torch.zeros(1, 2, 16), cache=RollingLayerCache(1, 4), positions=torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="window=4"):
        layer(torch.zeros(1, 5, 16), cache=RollingLayerCache(1, 4))
    assert isinstance(LayerCache(), LayerCache)


def test_every_public_name_is_on_the_api_page():
    from pathlib import Path
    import inspect
    page = (Path(__file__).resolve().parents[1] / "book" / "api.md").read_text()
    documented = set()
    for module in [line.split("::")[1].strip() for line in page.splitlines() if "automodule::" in line]:
        documented.add(module)
    missing = []
    for name in posenc.__all__:
        obj = getattr(posenc, name)
        home = getattr(obj, "__module__", None) if (inspect.isfunction(obj) or inspect.isclass(obj)) else None
        if home is not None and home not in documented:
            missing.append(f"{name} ({home})")
    assert not missing, f"public names whose module is not on book/api.md: {missing}"


def test_the_documented_examples_are_the_family_presets():
    import posenc.plan as plan_module
    doc = plan_module.__doc__
    start = doc.rindex("\n", 0, doc.index("from posenc import")) + 1
    code = textwrap.dedent(doc[start:doc.index("    model = TransformerLM")])
    namespace = {}
    exec(code, namespace)
    for family, name, n_layers in [("llama4", "llama4", 8), ("gemma3", "gemma3", 12), ("cohere2", "cohere2", 8),
                                   ("gpt-oss", "gpt_oss", 8), ("smollm3", "smollm3", 8)]:
        assert namespace[name] == family_plan(family, n_layers), family


def test_plan_from_a_v4_config_json_equals_the_v5_form():
    from posenc.hf_config import plan_from_hf_config
    v4 = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
          "rope_theta": 500000.0, "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                   "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}
    v5 = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
          "rope_parameters": {**v4["rope_scaling"], "rope_theta": 500000.0}}
    assert plan_from_hf_config(v4) == plan_from_hf_config(v5) == [
        LayerSpec("rope", rope=Rope(scaling=v5["rope_parameters"]))] * 2
    layer = MultiHeadAttention.from_spec(64, 4, plan_from_hf_config(v4)[0])
    assert layer.rotary.base == 500000.0
    with pytest.raises(ValueError, match="num_hidden_layers"):
        plan_from_hf_config({"model_type": "llama"})
