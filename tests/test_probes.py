"""posenc.probes, the per-head first-token readings, and the Bigram-Backcopy task (chapters 9 and 17)."""

import pytest
import torch

import posenc
from posenc import evaluate, probes, tasks


def _positions(windows=8, seq=128):
    return torch.arange(seq).double().expand(windows, -1)


def test_linear_probe_reads_a_linear_code_and_not_noise():
    p = _positions()
    noise = torch.randn(8, 128, 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    features = torch.cat([3 * p[..., None] - 7, noise], dim=-1)
    assert probes.linear_probe_r2(features, p) > 0.999
    assert probes.linear_probe_r2(noise, p) < 0.05


def test_mlp_probe_reads_a_monotone_code_a_linear_probe_cannot():
    p = _positions()
    features = (p / 127)[..., None] ** 4  # monotone but far from linear in p
    linear, mlp = probes.linear_probe_r2(features, p), probes.mlp_probe_r2(features, p)
    assert 0.6 < linear < 0.9
    assert mlp > 0.95


def test_probes_need_two_windows():
    with pytest.raises(ValueError, match="at least 2 windows"):
        probes.linear_probe_r2(torch.zeros(1, 5, 3), torch.zeros(1, 5))


def _uniform_model():
    """A NoPE model whose attention scores are all zero: every head attends evenly."""
    torch.manual_seed(0)
    model = posenc.TransformerLM(32, 16, 2, 2, position="none")
    with torch.no_grad():
        for block in model.blocks:
            block.attn.qkv.weight[:32].zero_()  # queries and keys
            block.attn.qkv.bias[:32].zero_()
    return model.eval()


def test_first_token_ratio_is_one_for_even_attention():
    tokens = torch.randint(0, 32, (3, 40), generator=torch.Generator().manual_seed(1))
    ratios = probes.first_token_ratio(_uniform_model(), tokens, skip=4)
    torch.testing.assert_close(torch.tensor(ratios), torch.ones(2, 2), rtol=0, atol=1e-5)


def test_first_token_attention_by_head_and_query_selection_agree_with_the_weights():
    model = posenc.TransformerLM(32, 16, 2, 2, position="rope").eval()
    tokens = torch.randint(0, 32, (3, 24), generator=torch.Generator().manual_seed(2))
    queries = torch.rand(3, 24, generator=torch.Generator().manual_seed(3)) < 0.5
    per_head = evaluate.first_token_attention(model, tokens, skip=4, by_head=True, queries=queries)
    pooled = evaluate.first_token_attention(model, tokens, skip=4)
    with torch.no_grad():
        _, weights = model.blocks[0].attn(model.blocks[0].ln_attn(model.token_embedding(tokens)), need_weights=True)
    first = weights[:, :, 4:, 0]  # [batch, heads, queries]
    for head in range(2):
        assert abs(per_head[0][head] - float(first[:, head][queries[:, 4:]].mean())) < 1e-6
    assert abs(pooled[0] - float(first.mean())) < 1e-6
    with pytest.raises(ValueError, match="queries must have the shape"):
        evaluate.first_token_attention(model, tokens, queries=queries[:, 1:])


def test_bigram_backcopy_copies_after_triggers_and_follows_the_table_elsewhere():
    table = tasks.bigram_transitions(32, 3, successors=4, trigger_rate=0.15, seed=5)
    torch.testing.assert_close(table.sum(1), torch.ones(32, dtype=torch.float64))
    assert ((table > 0).sum(1) == 3 + 4).all()
    tokens, targets = tasks.bigram_backcopy(200, 50, table, triggers=3, generator=torch.Generator().manual_seed(0))
    assert (tokens[:, 0] == 32).all() and tokens.shape == targets.shape == (200, 50)
    torch.testing.assert_close(tokens[:, 1:], targets[:, :-1])
    after_trigger = tokens[:, 1:] < 3
    torch.testing.assert_close(targets[:, 1:][after_trigger], tokens[:, :-1][after_trigger])
    drawn = ~after_trigger
    assert (table[tokens[:, 1:][drawn], targets[:, 1:][drawn]] > 0).all()
    rate = float((targets[:, 1:][drawn] < 3).double().mean())
    assert abs(rate - 0.15) < 0.02
