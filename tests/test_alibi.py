import math

import pytest
import torch

from posenc import alibi_attention, alibi_bias, alibi_slopes


def paper_rule(n):
    """Press et al.'s rule in exponent form: 2^(-8k/n) for powers of two; else the lower power of two's
    slopes followed by the odd-numbered slopes of the next power of two."""
    if n & (n - 1) == 0:
        return [2.0 ** (-8 * k / n) for k in range(1, n + 1)]
    lower = 2 ** int(math.log2(n))
    upper = [2.0 ** (-8 * k / (2 * lower)) for k in range(1, 2 * lower + 1, 2)]
    return paper_rule(lower) + upper[: n - lower]


def test_eight_heads_are_halvings():
    assert alibi_slopes(8).tolist() == [2.0 ** -k for k in range(1, 9)]


@pytest.mark.parametrize("n,expected", [
    (3, [2 ** -4, 2 ** -8, 2 ** -2]),
    (5, [2 ** -2, 2 ** -4, 2 ** -6, 2 ** -8, 2 ** -1]),
    (6, [2 ** -2, 2 ** -4, 2 ** -6, 2 ** -8, 2 ** -1, 2 ** -3]),
    (12, [2.0 ** -k for k in range(1, 9)] + [2 ** -0.5, 2 ** -1.5, 2 ** -2.5, 2 ** -3.5]),
])
def test_hand_worked_slopes(n, expected):
    torch.testing.assert_close(alibi_slopes(n), torch.tensor(expected), rtol=1e-6, atol=0)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6, 7, 12, 16, 20, 24, 32, 40])
def test_slopes_follow_paper_rule(n):
    torch.testing.assert_close(alibi_slopes(n), torch.tensor(paper_rule(n), dtype=torch.float32), rtol=1e-6, atol=0)


@pytest.mark.parametrize("n_heads,q_len,k_len", [(4, 5, 5), (3, 2, 7), (8, 1, 6)])
def test_bias_against_loop(n_heads, q_len, k_len):
    slopes = alibi_slopes(n_heads)
    expected = torch.empty(n_heads, q_len, k_len)
    for h in range(n_heads):
        for i in range(q_len):
            for j in range(k_len):
                expected[h, i, j] = -slopes[h] * abs((i + k_len - q_len) - j)
    torch.testing.assert_close(alibi_bias(n_heads, q_len, k_len), expected, rtol=0, atol=0)


def reference_attention(q, k, v, slopes, causal):
    q_len, k_len = q.shape[2], k.shape[2]
    scores = q.double() @ k.double().transpose(-2, -1) / math.sqrt(q.shape[-1])
    for h in range(q.shape[1]):
        for i in range(q_len):
            for j in range(k_len):
                query_pos = i + k_len - q_len
                scores[:, h, i, j] -= slopes[h].item() * abs(query_pos - j)
                if causal and j > query_pos:
                    scores[:, h, i, j] = float("-inf")
    return scores.softmax(-1) @ v.double()


@pytest.mark.parametrize("q_len,k_len,causal,dtype", [(9, 9, True, torch.float32), (9, 9, False, torch.float32),
                                                      (3, 9, True, torch.float32), (9, 9, True, torch.float64),
                                                      (6, 6, True, torch.bfloat16)])
def test_alibi_attention_matches_reference(q_len, k_len, causal, dtype):
    torch.manual_seed(0)
    q = torch.randn(2, 6, q_len, 8).to(dtype)
    k, v = torch.randn(2, 6, k_len, 8).to(dtype), torch.randn(2, 6, k_len, 8).to(dtype)
    out = alibi_attention(q, k, v, causal=causal)
    assert out.dtype == dtype and out.shape == q.shape
    tolerance = 2e-2 if dtype == torch.bfloat16 else 1e-5
    torch.testing.assert_close(out.double(), reference_attention(q, k, v, alibi_slopes(6), causal),
                               rtol=tolerance, atol=tolerance)


def test_alibi_attention_long_sequence_precision():
    """The fused causal path folds slope * j into the scores; check it stays accurate at 2048 tokens."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 4, 2048, 16) for _ in range(3))
    bias = alibi_bias(4, 2048).double()
    mask = torch.ones(2048, 2048, dtype=torch.bool).tril()
    scores = (q.double() @ k.double().transpose(-2, -1)) / 4 + bias
    expected = scores.masked_fill(~mask, float("-inf")).softmax(-1) @ v.double()
    torch.testing.assert_close(alibi_attention(q, k, v).double(), expected, rtol=1e-4, atol=1e-4)


def test_alibi_attention_fused_path_with_a_different_value_width():
    torch.manual_seed(0)
    q, k = torch.randn(2, 3, 7, 8), torch.randn(2, 3, 7, 8)
    v = torch.randn(2, 3, 7, 12)
    out = alibi_attention(q, k, v, causal=True)
    assert out.shape == (2, 3, 7, 12)
    torch.testing.assert_close(out.double(), reference_attention(q, k, v, alibi_slopes(3), True),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n", [1, 3, 6, 8, 12, 20, 24, 40])
def test_slopes_equal_hugging_face_bloom(n):
    """BLOOM's build_alibi_tensor is an independent implementation of the paper's rule."""
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor

    alibi = build_alibi_tensor(torch.ones(1, 2), n, torch.float32)  # [heads, 1, 2] = slope * [0, 1]
    torch.testing.assert_close(alibi_slopes(n), alibi[:, 0, 1], rtol=1e-6, atol=0)
