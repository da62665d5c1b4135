import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from posenc import POSITION_METHODS, MultiHeadAttention, TransformerLM


def make_model(position, **options):
    torch.manual_seed(0)
    return TransformerLM(37, 32, 2, 4, position=position, max_len=64, **options).eval()


def decode_in_chunks(model, tokens, boundaries):
    """Logits of feeding ``tokens`` through the KV cache in chunks ending at ``boundaries``."""
    cache, parts, start = model.new_cache(), [], 0
    with torch.no_grad():
        for end in boundaries:
            parts.append(model(tokens[:, start:end], cache=cache))
            start = end
    assert cache.length == tokens.shape[1]
    return torch.cat(parts, dim=1)


@pytest.mark.parametrize("chunks", ["one token at a time", "prompt then chunks"])
@pytest.mark.parametrize("position", POSITION_METHODS)
def test_kv_cache_decoding_equals_full_pass(position, chunks):
    model = make_model(position)
    tokens = torch.randint(0, 37, (2, 24), generator=torch.Generator().manual_seed(1))
    boundaries = range(1, 25) if chunks == "one token at a time" else [7, 8, 24]
    with torch.no_grad():
        full = model(tokens)
    torch.testing.assert_close(decode_in_chunks(model, tokens, boundaries), full, rtol=0, atol=1e-5)


@pytest.mark.parametrize("options", [{"rope_interleaved": True}, {"rope_base": 500.0},
                                     {"rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                                       "original_max_position_embeddings": 8}}])
def test_kv_cache_with_rope_options(options):
    model = make_model("rope", **options)
    tokens = torch.randint(0, 37, (1, 16), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        full = model(tokens)
    torch.testing.assert_close(decode_in_chunks(model, tokens, range(1, 17)), full, rtol=0, atol=1e-5)


@given(seed=st.integers(0, 10_000), seq=st.integers(2, 9))
def test_bidirectional_attention_without_positions_is_permutation_equivariant(seed, seq):
    torch.manual_seed(seed)
    attention = MultiHeadAttention(16, 4, position="none", causal=False).double()
    x = torch.randn(2, seq, 16, dtype=torch.float64)
    perm = torch.randperm(seq)
    with torch.no_grad():
        torch.testing.assert_close(attention(x[:, perm]), attention(x)[:, perm], rtol=0, atol=1e-12)


@pytest.mark.parametrize("position", ["t5", "rope", "alibi"])
def test_relative_methods_break_equivariance(position):
    torch.manual_seed(0)
    attention = MultiHeadAttention(16, 4, position=position, causal=False).double()
    if position == "t5":
        torch.nn.init.normal_(attention.t5_bias.table.weight, std=1.0)
    x = torch.randn(1, 6, 16, dtype=torch.float64)
    perm = torch.tensor([1, 2, 3, 4, 5, 0])
    with torch.no_grad():
        assert (attention(x[:, perm]) - attention(x)[:, perm]).abs().max() > 1e-3


def test_attention_weights_match_output():
    torch.manual_seed(0)
    for position in ("none", "t5", "rope", "alibi"):
        attention = MultiHeadAttention(16, 4, position=position, causal=True)
        x = torch.randn(2, 5, 16)
        y, weights = attention(x, need_weights=True)
        assert weights.shape == (2, 4, 5, 5)
        torch.testing.assert_close(weights.sum(-1), torch.ones(2, 4, 5))
        assert torch.all(weights.triu(1) == 0)  # causal: no weight on later keys
        torch.testing.assert_close(y, attention(x), rtol=1e-5, atol=1e-6)


def test_generate_greedy_matches_argmax_of_full_pass():
    model = make_model("rope")
    prompt = torch.tensor([[1, 2, 3], [4, 5, 6]])
    out = model.generate(prompt, 6, temperature=0)
    assert out.shape == (2, 9) and torch.equal(out[:, :3], prompt)
    with torch.no_grad():
        for t in range(3, 9):
            torch.testing.assert_close(model(out[:, :t])[:, -1].argmax(-1), out[:, t])


def test_generate_sampling_is_reproducible_and_respects_top_k():
    model = make_model("alibi")
    prompt = torch.tensor([3, 1, 4])
    a = model.generate(prompt, 5, top_k=3, generator=torch.Generator().manual_seed(0))
    b = model.generate(prompt, 5, top_k=3, generator=torch.Generator().manual_seed(0))
    assert a.shape == (8,) and torch.equal(a, b)
    # top_k=1 is greedy.
    torch.testing.assert_close(model.generate(prompt, 5, top_k=1), model.generate(prompt, 5, temperature=0))


def test_learned_model_refuses_to_run_past_its_table():
    model = TransformerLM(10, 8, 1, 2, position="learned", max_len=6)
    model(torch.zeros(1, 6, dtype=torch.long))
    with pytest.raises(ValueError, match="max_len=6"):
        model(torch.zeros(1, 7, dtype=torch.long))
    with pytest.raises(ValueError, match="max_len=6"):
        model.generate(torch.zeros(1, 4, dtype=torch.long), 3)


def test_bidirectional_model_sees_the_future_and_has_no_cache():
    torch.manual_seed(0)
    model = TransformerLM(20, 16, 1, 2, position="learned", max_len=8, causal=False).eval()
    tokens = torch.randint(0, 20, (1, 6))
    changed = tokens.clone()
    changed[0, -1] = (changed[0, -1] + 1) % 20
    with torch.no_grad():
        assert (model(tokens)[0, 0] - model(changed)[0, 0]).abs().max() > 1e-4  # position 0 sees the last token
    with pytest.raises(ValueError, match="causal=True"):
        model.new_cache()
