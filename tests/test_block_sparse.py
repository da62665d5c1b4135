"""posenc.block_sparse: FlexAttention with a block mask equals the dense masked attention (issue 29)."""

from __future__ import annotations

import math

import pytest
import torch

from posenc import LayerSpec, TransformerLM
from posenc import block_sparse as bs


def _by_hand(q, k, v, window=None, slopes=None, sinks=None):
    """float64 softmax over the visible keys (and the sink logit), by formula."""
    q, k, v = (t.double() for t in (q, k, v))
    seq = q.shape[2]
    i, j = torch.arange(seq)[:, None], torch.arange(seq)[None, :]
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if slopes is not None:
        scores = scores - slopes.double()[:, None, None] * (i - j)
    hidden = (j > i) | ((i - j >= window) if window else torch.zeros_like(j > i))
    scores = scores.masked_fill(hidden, -math.inf)
    if sinks is not None:
        sink = sinks.double()[None, :, None, None].expand(*scores.shape[:3], 1)
        return torch.softmax(torch.cat([scores, sink], -1), -1)[..., :seq] @ v
    return torch.softmax(scores, -1) @ v


@torch.no_grad()
def test_window_alibi_and_sinks_equal_the_formula_and_the_dense_path():
    torch.manual_seed(0)
    q, k, v = torch.randn(3, 2, 4, 300, 16)  # 300: not a multiple of the 128-token block
    slopes, sinks = torch.tensor([0.5, 0.25, 0.125, 0.0625]), torch.randn(4)
    out = bs.block_sparse_attention(q, k, v, window=40, slopes=slopes, sinks=sinks)
    torch.testing.assert_close(out.double(), _by_hand(q, k, v, 40, slopes, sinks), atol=2e-6, rtol=1e-5)
    torch.testing.assert_close(out, bs.dense_attention(q, k, v, window=40, slopes=slopes, sinks=sinks),
                               atol=2e-6, rtol=1e-5)
    chunked = bs.block_sparse_attention(q, k, v, chunk=100)
    torch.testing.assert_close(chunked, bs.dense_attention(q, k, v, chunk=100), atol=2e-6, rtol=1e-5)
    assert bs.block_mask(2048, window=128).sparsity() > 80  # 32 of 256 blocks are computed


@torch.no_grad()
def test_a_model_with_block_sparse_layers_gives_the_same_logits():
    torch.manual_seed(0)
    plan = [LayerSpec("rope", window=40, sinks=True), LayerSpec("alibi"), LayerSpec("none", chunk=100),
            LayerSpec("rope", gate=True)]
    model = TransformerLM(256, 64, 4, 4, position="none", plan=plan).eval()
    tokens = torch.randint(0, 256, (2, 300))
    dense = model(tokens)
    bs.use_block_sparse(model)
    assert all(block.attn.block_sparse for block in model.blocks)
    torch.testing.assert_close(model(tokens), dense, atol=1e-5, rtol=1e-5)


def test_training_and_decoding_keep_the_dense_path_and_the_function_refuses_a_gradient():
    torch.manual_seed(0)
    model = bs.use_block_sparse(TransformerLM(256, 32, 1, 2, position="none",
                                              plan=[LayerSpec("rope", window=8)]))
    tokens = torch.randint(0, 256, (1, 20))
    model(tokens).sum().backward()  # a gradient: the dense path, no error
    assert model.blocks[0].attn.qkv.weight.grad is not None
    with torch.no_grad():
        cache = model.new_cache()
        model(tokens[:, :10], cache=cache)
        model(tokens[:, 10:11], cache=cache)  # one query, ten keys: decoding keeps the dense path
    q = torch.randn(1, 2, 8, 16, requires_grad=True)
    with pytest.raises(ValueError, match="inference"):
        bs.block_sparse_attention(q, q, q)
    with pytest.raises(ValueError, match="same seq"):
        bs.block_sparse_attention(torch.randn(1, 2, 8, 16), torch.randn(1, 2, 9, 16), torch.randn(1, 2, 9, 16))


@torch.no_grad()
def test_without_a_compiler_it_falls_back_to_the_dense_path_once(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("no C compiler")

    monkeypatch.setattr(bs, "_COMPILED", {"flex": broken})
    q, k, v = torch.randn(3, 1, 2, 50, 8)
    with pytest.warns(RuntimeWarning, match="dense masked path"):
        out = bs.block_sparse_attention(q, k, v, window=10)
    torch.testing.assert_close(out, bs.dense_attention(q, k, v, window=10))
    assert bs._COMPILED["failed"]
