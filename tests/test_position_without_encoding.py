"""Issue 28: layers that carry order without a position encoding, each against an independent float64 form
(a loop over the paper's equation, or the recurrence), plus their limits as plans."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from posenc import LayerSpec, MultiHeadAttention, TransformerLM, plan_from_dict, plan_to_dict
from posenc.mixers.conv import ShortConv, causal_conv
from posenc.mixers.cope import CoPEAttention, cope_positions, cope_scores
from posenc.mixers.decay import GATE_NORMALISER, DecayLayer, decay_attention
from posenc.mixers.forgetting import ForgettingAttention, forget_bias, forgetting_attention
from posenc.mixers.stick_breaking import StickBreakingAttention, stick_breaking_attention, stick_breaking_weights


def _qkv(batch=2, heads=3, seq=9, dim=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(batch, heads, seq, dim, generator=g, dtype=torch.float64) for _ in range(3)]


def test_forget_bias_sums_the_log_gates_between_key_and_query():
    log_f = F.logsigmoid(torch.randn(2, 3, 7, dtype=torch.float64))
    bias = forget_bias(log_f)
    for i in range(7):
        for j in range(7):
            expected = float(log_f[..., j + 1: i + 1].sum(-1)[0, 0]) if j <= i else -math.inf
            assert float(bias[0, 0, i, j]) == pytest.approx(expected, abs=1e-12)


def test_forgetting_attention_by_loop_and_a_constant_gate_is_alibi():
    q, k, v = _qkv()
    log_f = F.logsigmoid(torch.randn(2, 3, 9, dtype=torch.float64))
    out = forgetting_attention(q, k, v, log_f)
    expected = torch.zeros_like(out)
    for i in range(9):
        scores = torch.stack([q[..., i, :].mul(k[..., j, :]).sum(-1) / math.sqrt(8) + log_f[..., j + 1: i + 1].sum(-1)
                              for j in range(i + 1)], -1)
        expected[..., i, :] = torch.einsum("bhj,bhjd->bhd", scores.softmax(-1), v[..., : i + 1, :])
    torch.testing.assert_close(out, expected)
    slopes = torch.tensor([0.5, 0.25, 0.125], dtype=torch.float64)  # f = exp(-m): ALiBi with slope m
    constant = (-slopes)[None, :, None].expand(2, 3, 9)
    scores = q @ k.transpose(-1, -2) / math.sqrt(8)
    distance = torch.arange(9)[:, None] - torch.arange(9)[None, :]
    alibi = (scores - slopes[:, None, None] * distance).masked_fill(distance < 0, -math.inf).softmax(-1) @ v
    torch.testing.assert_close(forgetting_attention(q, k, v, constant), alibi)


def test_a_fox_layer_with_a_constant_gate_equals_posenc_alibi_layer():
    torch.manual_seed(0)
    fox = ForgettingAttention(32, 4)
    slopes = torch.tensor([0.5, 0.25, 0.125, 0.0625])
    with torch.no_grad():
        fox.forget.weight.zero_()
        fox.forget.bias.copy_(torch.log(torch.expm1(slopes)).neg())  # sigmoid(b) = exp(-m)
    alibi = MultiHeadAttention(32, 4, position="alibi", alibi_slopes=slopes)
    alibi.load_state_dict({name: value for name, value in fox.state_dict().items() if not name.startswith("forget")})
    x = torch.randn(2, 12, 32)
    torch.testing.assert_close(fox(x), alibi(x), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(fox.forget_gates(x), torch.exp(-slopes)[None, :, None].expand(2, 4, 12))


def test_stick_breaking_weights_by_the_product_formula():
    scores = torch.randn(2, 6, 6, dtype=torch.float64) * 3
    weights = stick_breaking_weights(scores)
    beta = torch.sigmoid(scores)
    for i in range(6):
        for j in range(6):
            expected = float(beta[0, i, j] * torch.prod(1 - beta[0, i, j + 1: i])) if j < i else 0.0
            assert float(weights[0, i, j]) == pytest.approx(expected, rel=1e-10, abs=1e-14)
    q, k, v = _qkv()
    out = stick_breaking_attention(q, k, v)
    A = stick_breaking_weights(q @ k.transpose(-1, -2) / math.sqrt(8))
    torch.testing.assert_close(out, A @ v + (1 - A.sum(-1, keepdim=True)) * v)
    assert torch.allclose(out[..., 0, :], v[..., 0, :])  # the first token has nothing before it


def test_stick_breaking_stays_finite_where_the_plain_product_underflows():
    scores = torch.full((1, 1, 600, 600), 30.0, requires_grad=True)  # beta ~ 1: (1 - beta) ~ 1e-13 per key
    weights = stick_breaking_weights(scores)
    weights[..., -1, :].sum().backward()
    assert torch.isfinite(weights).all() and torch.isfinite(scores.grad).all()
    assert float(weights[0, 0, -1, -2].detach()) == pytest.approx(torch.sigmoid(torch.tensor(30.0)).item())  # nearest key


def test_cope_positions_count_gates_from_key_to_query_and_interpolate_the_embeddings():
    scores = torch.randn(1, 2, 6, 6, dtype=torch.float64).masked_fill(torch.ones(6, 6, dtype=torch.bool).triu(1), -math.inf)
    positions = cope_positions(scores, max_positions=4)
    gates = torch.sigmoid(scores)
    for i in range(6):
        for j in range(i + 1):
            assert float(positions[0, 1, i, j]) == pytest.approx(min(float(gates[0, 1, i, j: i + 1].sum()), 3.0))
    q = torch.randn(1, 2, 6, 5, dtype=torch.float64)
    embeddings = torch.randn(4, 5, dtype=torch.float64)
    terms = cope_scores(q, positions, embeddings)
    for i, j in [(5, 0), (3, 2), (4, 4)]:
        p = float(positions[0, 0, i, j])
        low, w = math.floor(p), p - math.floor(p)
        e = embeddings[low] * (1 - w) + embeddings[min(low + 1, 3)] * w
        assert float(terms[0, 0, i, j]) == pytest.approx(float(q[0, 0, i] @ e), rel=1e-6)


def test_cope_with_zero_embeddings_is_causal_attention_without_position():
    torch.manual_seed(0)
    cope = CoPEAttention(32, 4, max_positions=8)
    nope = MultiHeadAttention(32, 4, position="none")
    nope.load_state_dict({name: value for name, value in cope.state_dict().items() if name != "embeddings"})
    x = torch.randn(2, 10, 32)
    torch.testing.assert_close(cope(x), nope(x), atol=1e-5, rtol=1e-5)
    with torch.no_grad():
        cope.embeddings.normal_()
    assert (cope(x) - nope(x)).abs().max() > 1e-3


def test_decay_attention_equals_its_recurrence_in_float64():
    q, k, v = _qkv(seq=11)
    log_a = F.logsigmoid(torch.randn(2, 3, 11, dtype=torch.float64))
    out = decay_attention(q, k, v, log_a)
    state = torch.zeros(2, 3, 8, 8, dtype=torch.float64)
    for t in range(11):  # S_t = a_t S_{t-1} + k_t v_t^T, o_t = S_t^T q_t
        state = log_a[..., t, None, None].exp() * state + k[..., t, :, None] * v[..., t, None, :]
        torch.testing.assert_close(out[..., t, :], torch.einsum("bhde,bhd->bhe", state, q[..., t, :]))


def test_a_decay_layer_starts_near_gla_s_decay_and_normalises_each_head():
    torch.manual_seed(0)
    layer = DecayLayer(32, 4)
    with torch.no_grad():
        layer.decay.weight.zero_()
        layer.decay.bias.zero_()
    x = torch.randn(2, 7, 32)
    torch.testing.assert_close(layer.decays(x), torch.full((2, 4, 7), 0.5 ** (1 / GATE_NORMALISER)))
    q, k, v = layer.qkv(x).view(2, 7, 3, 4, 8).permute(2, 0, 3, 1, 4)
    raw = decay_attention(q / 8 ** 0.5, k, v, torch.full((2, 4, 7), math.log(0.5) / GATE_NORMALISER))
    torch.testing.assert_close(layer.mix(q, k, v, x), raw / (raw.pow(2).mean(-1, keepdim=True) + 1e-6).sqrt())


def test_causal_conv_by_loop():
    x = torch.randn(2, 9, 5, dtype=torch.float64)
    weight = torch.randn(5, 4, dtype=torch.float64)
    out = causal_conv(x, weight)
    for t in range(9):
        expected = sum(weight[:, s] * x[:, t - 3 + s] for s in range(4) if t - 3 + s >= 0)
        torch.testing.assert_close(out[:, t], expected)
    canon = ShortConv(5, 4).double()
    torch.testing.assert_close(canon(x), x + causal_conv(x, canon.weight))  # Canon: the residual around it
    with pytest.raises(ValueError, match="weight must be"):
        causal_conv(x, weight.T)


@pytest.mark.parametrize("spec", [LayerSpec(mixer="forgetting"), LayerSpec(mixer="stick_breaking"),
                                  LayerSpec(mixer="cope", cope_positions=16), LayerSpec(mixer="decay", gate=True),
                                  LayerSpec(conv=4), LayerSpec(mixer="decay", conv=4)])
def test_every_mixer_is_causal_and_trains_in_a_plan(spec):
    torch.manual_seed(0)
    model = TransformerLM(256, 32, 2, 4, position="none", plan=[spec, LayerSpec("none")])
    tokens = torch.randint(0, 256, (2, 16))
    changed = tokens.clone()
    changed[:, 10:] = torch.randint(0, 256, (2, 6))
    torch.testing.assert_close(model(tokens)[:, :10], model(changed)[:, :10])  # the future does not leak
    model(tokens).logsumexp(-1).mean().backward()
    grads = [p.grad for p in model.blocks[0].parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert model.plan[0] == spec and model.blocks[0].attn.spec == LayerSpec(**{**spec.__dict__, "conv": None})


def test_plans_with_mixers_round_trip_and_describe_themselves():
    plan = [LayerSpec(mixer="decay", conv=4), LayerSpec(mixer="cope"), LayerSpec("rope", conv=3)]
    assert plan_from_dict(plan_to_dict(plan)) == plan
    assert plan[1].cope_positions == 64
    model = TransformerLM(256, 32, 3, 4, position="none", plan=plan)
    assert model.describe_plan().splitlines() == ["layer 0: decay conv=4", "layer 1: cope(positions=64)",
                                                   "layer 2: rope conv=3"]


@pytest.mark.parametrize("fields, message", [
    (dict(position="rope", mixer="forgetting"), "carries order itself: position must be 'none'"),
    (dict(mixer="decay", window=8), "LayerSpec.window is for mixer='attention'"),
    (dict(mixer="stick_breaking", sinks=True), "LayerSpec.sinks is for mixer='attention'"),
    (dict(cope_positions=8), "cope_positions is only for mixer='cope'"),
    (dict(mixer="mamba"), "LayerSpec.mixer"),
    (dict(conv=0), "LayerSpec.conv"),
])
def test_what_a_mixer_cannot_use_is_refused_by_name(fields, message):
    with pytest.raises((ValueError, TypeError), match=message):
        LayerSpec(**fields)


def test_mixers_refuse_a_cache_and_attention_refuses_their_specs():
    model = TransformerLM(256, 32, 1, 4, position="none", plan=[LayerSpec(mixer="forgetting")])
    with pytest.raises(ValueError, match="no incremental decoding"):
        model(torch.randint(0, 256, (1, 4)), cache=model.new_cache())
    conv = TransformerLM(256, 32, 1, 4, position="none", plan=[LayerSpec("rope", conv=4)])
    with pytest.raises(ValueError, match="LayerSpec.conv has no incremental decoding"):
        conv(torch.randint(0, 256, (1, 4)), cache=conv.new_cache())
    with pytest.raises(ValueError, match="MultiHeadAttention builds mixer='attention'"):
        MultiHeadAttention.from_spec(32, 4, LayerSpec(mixer="decay"))
    with pytest.raises(ValueError, match="causal"):
        TransformerLM(256, 32, 1, 4, position="none", causal=False, plan=[LayerSpec(mixer="decay")])
    assert isinstance(StickBreakingAttention(32, 4)(torch.randn(1, 3, 32), need_weights=True), tuple)


def test_stick_breaking_matches_the_authors_reference_formulation():
    """stickbreaking_attention/sb_ref.py (shawntan/stickbreaking-attention) as its tests call it
    (attend_current=False): log(1 - beta) summed over the keys between key and query by a product with a
    strictly lower-triangular matrix of ones, and the remainder on the query's own value."""
    q, k, v = _qkv(seq=7)
    logits = q @ k.transpose(-1, -2) / math.sqrt(8)
    hidden = torch.ones(7, 7).triu(0).bool()  # the key itself and later keys
    log_z = F.logsigmoid(logits).masked_fill(hidden, -1e5)
    log_beta = F.logsigmoid(-logits).masked_fill(hidden, 0)
    between = torch.einsum("bhij,jk->bhik", log_beta, torch.ones(7, 7, dtype=torch.float64).tril(-1))
    weights = (log_z + between).exp()
    expected = weights @ v + (1 - weights.sum(-1))[..., None] * v
    torch.testing.assert_close(stick_breaking_attention(q, k, v), expected)
    # the released 3B model's convention ("sb_remainder": false; flash-linear-attention's layer discards rem)
    torch.testing.assert_close(stick_breaking_attention(q, k, v, remainder="drop"), weights @ v)


def test_stick_breaking_layer_that_drops_the_remainder():
    torch.manual_seed(0)
    own = StickBreakingAttention(32, 4)
    drop = StickBreakingAttention(32, 4, remainder="drop")
    drop.load_state_dict(own.state_dict())
    x = torch.randn(2, 9, 32, dtype=torch.float64)
    own, drop = own.double(), drop.double()
    q, k, v = own.qkv(x).view(2, 9, 3, 4, 8).permute(2, 0, 3, 1, 4)
    weights = stick_breaking_weights(q @ k.transpose(-1, -2) / math.sqrt(8))
    heads = lambda h: own.out(h.transpose(1, 2).reshape(2, 9, 32))  # noqa: E731
    torch.testing.assert_close(drop(x), heads(weights @ v))
    torch.testing.assert_close(own(x), heads(weights @ v + (1 - weights.sum(-1, keepdim=True)) * v))
    torch.testing.assert_close(drop(x)[:, 0], own.out.bias.expand(2, 32))  # nothing before the first token
    assert "remainder='drop'" in repr(drop) and own.spec == LayerSpec(mixer="stick_breaking")
    with pytest.raises(ValueError, match="remainder='own' only"):
        drop.spec
    with pytest.raises(ValueError, match="remainder must be one of"):
        StickBreakingAttention(32, 4, remainder="bias")
    with pytest.raises(ValueError, match="remainder must be one of"):
        stick_breaking_attention(q, k, v, remainder=None)


def test_cope_layer_matches_the_papers_listing():
    """The CoPE module of Golovneva et al. (arXiv 2405.18719, its code listing): gates from the scaled, masked
    scores, positions by a flipped cumulative sum clamped at npos_max - 1, q . e interpolated, added to the
    scores before the softmax."""
    torch.manual_seed(0)
    layer = CoPEAttention(16, 2, max_positions=5).double()
    with torch.no_grad():
        layer.embeddings.normal_()
    x = torch.randn(1, 9, 16, dtype=torch.float64)
    q, k, v = layer.qkv(x).view(1, 9, 3, 2, 8).permute(2, 0, 3, 1, 4)
    logits = q @ k.transpose(-1, -2) / math.sqrt(8) + torch.ones(9, 9).tril().log()
    pos = torch.sigmoid(logits).flip(-1).cumsum(dim=-1).flip(-1).clamp(max=5 - 1)
    ceil, floor = pos.ceil().long(), pos.floor().long()
    logits_int = q @ layer.embeddings.T  # the listing's pos_emb is [head_dim, npos_max]
    w = pos - floor
    attn = torch.softmax(logits + logits_int.gather(-1, ceil) * w + logits_int.gather(-1, floor) * (1 - w), -1)
    torch.testing.assert_close(layer.weights(q, k, x), attn)
