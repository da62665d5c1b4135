"""``apply_rope``'s kernels: equal to the formula for any tables, partial rotary, gradients, no host sync.

References are independent of posenc: Hugging Face transformers 5.23's own ``apply_rotary_pos_emb`` of
GPT-NeoX (half-split pairs, partial rotary by slicing and concatenating) and of GPT-J (interleaved pairs),
run in float64. Tables are random as well as from ``rope_cos_sin``: the fast paths must not rely on each
angle being repeated per pair unless they can know it without looking.
"""

from __future__ import annotations

import pytest
import torch
from transformers.models.gpt_neox.modeling_gpt_neox import apply_rotary_pos_emb as neox_rope
from transformers.models.gptj.modeling_gptj import apply_rotary_pos_emb as gptj_rope

import posenc
import posenc.rope.kernels as kernels
from posenc import MultiHeadAttention, RotaryEmbedding, apply_rope, rope_cos_sin, rope_frequencies

LARGEST = {}  # largest difference seen per test, printed with -s


def _record(name: str, got: torch.Tensor, want: torch.Tensor) -> None:
    LARGEST[name] = max(LARGEST.get(name, 0.0), (got.double() - want).abs().max().item())
    print(f"{name}: largest |difference| {LARGEST[name]:.1e}")


def hf_reference(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool) -> torch.Tensor:
    """Transformers' RoPE in float64 on ``x[..., :r]``, the other features passed: ``x`` [b, h, s, d],
    ``cos``/``sin`` [s, r] or [b, 1, s, r]."""
    x, cos, sin = x.double(), cos.double(), sin.double()
    rotary_dim = cos.shape[-1]
    cos, sin = (t.expand(x.shape[0], 1, x.shape[2], rotary_dim)[:, 0] for t in (cos, sin))  # [b, s, r]
    if not interleaved:  # GPT-NeoX: [b, s, r] tables, unsqueezed over heads; slices and concatenates itself
        return neox_rope(x, x, cos, sin)[0]
    # GPT-J: x as [b, s, h, d], tables as [b, s, r/2] with one angle per pair (it repeats them itself);
    # for tables whose pair entries differ, rotate the two members separately with each one's entries
    rotated = torch.empty_like(x[..., :rotary_dim])
    for member in (0, 1):
        pairs = gptj_rope(x[..., :rotary_dim].transpose(1, 2), sin[..., member::2], cos[..., member::2])
        rotated[..., member::2] = pairs.transpose(1, 2)[..., member::2]
    return torch.cat((rotated, x[..., rotary_dim:]), dim=-1)


def random_tables(shape, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=generator), torch.randn(shape, generator=generator)


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("rotary_dim", [16, 8, 4])
@pytest.mark.parametrize("tables", ["rope_cos_sin", "random", "per_batch"])
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_apply_rope_equals_transformers_for_any_tables(interleaved, rotary_dim, tables, layout, monkeypatch):
    batch, heads, seq, head_dim = 2, 3, 11, 16
    bytes_per_position = batch * heads * rotary_dim * 4
    monkeypatch.setattr(kernels, "_CHUNK_BYTES", 3 * bytes_per_position)  # chunks of 3 positions, the last short
    torch.manual_seed(0)
    x = torch.randn(batch, heads, seq, head_dim)
    if layout == "transposed":  # as q comes out of a [batch, seq, heads, dim] projection
        x = torch.randn(batch, seq, heads, head_dim).transpose(1, 2)
    if tables == "rope_cos_sin":
        inv_freq, scale = rope_frequencies(rotary_dim, scaling={"rope_type": "yarn", "factor": 4.0,
                                                                "original_max_position_embeddings": 8})
        cos, sin = rope_cos_sin(torch.arange(3, 3 + seq), inv_freq, attention_scale=scale, interleaved=interleaved)
    elif tables == "random":  # every entry different: no angle repeated per pair
        cos, sin = random_tables((seq, rotary_dim))
    else:
        cos, sin = random_tables((batch, 1, seq, rotary_dim))
    got = apply_rope(x, cos, sin, interleaved=interleaved)
    want = hf_reference(x, cos, sin, interleaved)
    assert got.shape == x.shape and got.dtype == x.dtype
    torch.testing.assert_close(got[..., rotary_dim:], x[..., rotary_dim:], rtol=0, atol=0)  # passed bit for bit
    _record("apply_rope vs transformers (float32)", got, want)
    torch.testing.assert_close(got.double(), want, rtol=0, atol=2e-6)


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64])
def test_other_dtypes_compute_in_float32_or_better(interleaved, dtype, monkeypatch):
    monkeypatch.setattr(kernels, "_CHUNK_BYTES", 2 * 3 * 8 * 4)  # a float32 scratch chunk of 2 positions
    torch.manual_seed(1)
    x = torch.randn(1, 3, 7, 16).to(dtype)
    inv_freq, _ = rope_frequencies(8)
    cos, sin = rope_cos_sin(torch.arange(7), inv_freq, interleaved=interleaved)
    got = apply_rope(x, cos, sin, interleaved=interleaved)
    assert got.dtype == dtype
    want = hf_reference(x, cos, sin, interleaved)
    # float32 arithmetic, then one rounding to the output dtype: half an ulp (relative) of each output
    half_ulp = {torch.bfloat16: 2**-8, torch.float16: 2**-11, torch.float64: 2**-52}[dtype]
    _record(f"apply_rope {dtype} vs transformers float64", got, want)
    # float64: the complex kernel's vector body and scalar tail (fused multiply-add) may round each element
    # differently, so 1e-12 rather than bit-exact
    atol = 1e-12 if dtype == torch.float64 else 1e-6
    torch.testing.assert_close(got.double(), want, rtol=half_ulp, atol=atol)


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("rotary_dim", [8, 4])
@pytest.mark.parametrize("tables", ["rope_cos_sin", "random"])
def test_gradient_is_exact(interleaved, rotary_dim, tables, monkeypatch):
    monkeypatch.setattr(kernels, "_CHUNK_BYTES", 2 * (2 * 3 * rotary_dim * 8))  # chunks of 2 positions
    torch.manual_seed(2)
    if tables == "rope_cos_sin":
        inv_freq, _ = rope_frequencies(rotary_dim)
        cos, sin = (t.double() for t in rope_cos_sin(torch.arange(5), inv_freq, interleaved=interleaved))
    else:
        cos, sin = (t.double() for t in random_tables((5, rotary_dim), seed=3))
    x = torch.randn(2, 3, 5, 8, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: apply_rope(t, cos, sin, interleaved=interleaved), (x,))
    grad_out = torch.randn(2, 3, 5, 8, dtype=torch.float64)
    (fast,) = torch.autograd.grad(apply_rope(x, cos, sin, interleaved=interleaved), x, grad_out)
    (plain,) = torch.autograd.grad(hf_reference(x, cos, sin, interleaved), x, grad_out)
    _record("gradient vs autograd through transformers", fast, plain)
    torch.testing.assert_close(fast, plain, rtol=0, atol=1e-12)


def test_gradient_through_rotary_embedding_in_float32():
    torch.manual_seed(4)
    rotary = RotaryEmbedding(16, scaling={"rope_type": "default", "partial_rotary_factor": 0.5}, interleaved=True)
    q = torch.randn(2, 3, 6, 16, requires_grad=True)
    k = torch.randn(2, 1, 6, 16, requires_grad=True)
    rotated_q, rotated_k = rotary(q, k, offset=2)
    cos, sin = rotary.cos_sin(torch.arange(2, 8))
    grad_q = torch.randn_like(rotated_q)
    (fast,) = torch.autograd.grad(rotated_q, q, grad_q)
    qd = q.detach().double().requires_grad_()
    (plain,) = torch.autograd.grad(hf_reference(qd, cos, sin, True), qd, grad_q.double())
    _record("RotaryEmbedding gradient vs transformers", fast, plain)
    torch.testing.assert_close(fast.double(), plain, rtol=0, atol=1e-6)


# ---- no host synchronisation --------------------------------------------------------------------
# Meta tensors have shapes and no data: anything that reads values on the host (torch.equal, .item(),
# bool(), int(), .tolist()) raises on them, so running on "meta" proves the code never waits for the
# device to hand back a value. (On a GPU, test_no_sync_on_cuda checks the same with CUDA's own detector.)

@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("rotary_dim", [16, 8])
def test_apply_rope_reads_no_values_off_the_cpu(interleaved, rotary_dim):
    meta = torch.device("meta")
    inv_freq, _ = rope_frequencies(rotary_dim)
    cos, sin = rope_cos_sin(torch.arange(5, device=meta), inv_freq.to(meta), interleaved=interleaved)
    x = torch.randn(2, 3, 5, 16, device=meta, requires_grad=True)
    out = apply_rope(x, cos, sin, interleaved=interleaved)
    out.sum().backward()
    assert out.shape == x.shape and x.grad.shape == x.shape
    assert apply_rope(x.detach().bfloat16(), cos, sin, interleaved=interleaved).dtype == torch.bfloat16


def test_meta_tensors_do_catch_a_host_read():
    # the premise of the tests above: the value checks apply_rope used to do raise on meta tensors
    cos = torch.zeros(5, 16, device="meta")
    with pytest.raises((NotImplementedError, RuntimeError)):
        kernels._angles_repeat_per_pair(cos, cos)
    with pytest.raises(RuntimeError):
        cos.sum().item()


LAYERS = {  # the default layer, then RoPE in both pairings, and the 2026 layer options over RoPE
    "default": {}, "rope": dict(position="rope"), "rope interleaved": dict(position="rope", rope_interleaved=True),
    "sliding window": dict(position="rope", window=3), "sinks and window": dict(position="rope", window=3, sinks=True),
    "alibi": dict(position="alibi"), "t5": dict(position="t5"),
}


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_attention_forward_and_decoding_read_no_values(layer):
    torch.manual_seed(5)
    attention = MultiHeadAttention(32, 4, **LAYERS[layer]).to("meta")
    x = torch.randn(2, 7, 32, device="meta")
    assert attention(x).shape == (2, 7, 32)
    for cache in (posenc.LayerCache(), posenc.RollingLayerCache(sink_tokens=2, window=4)):
        attention(x[:, :3], cache=cache)
        for step in range(3, 7):  # decoding; the rolling cache evicts (and re-rotates RoPE keys) from step 4 on
            assert attention(x[:, step:step + 1], cache=cache).shape == (2, 1, 32)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_no_sync_on_cuda(layer):
    # CUDA's own detector: with sync_debug_mode "error", any operation that makes the host wait raises
    device = torch.device("cuda")
    interleaved = layer == "rope interleaved"
    inv_freq, _ = rope_frequencies(8)
    cos, sin = rope_cos_sin(torch.arange(5, device=device), inv_freq.to(device), interleaved=interleaved)
    random_cos, random_sin = (t.to(device) for t in random_tables((5, 16)))
    x = torch.randn(2, 3, 5, 16, device=device)
    attention = MultiHeadAttention(32, 4, **LAYERS[layer]).to(device)
    tokens = torch.randn(2, 7, 32, device=device)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        partial = apply_rope(x, cos, sin, interleaved=interleaved)
        general = apply_rope(x, random_cos, random_sin, interleaved=interleaved)
        attention(tokens)
        cache = posenc.RollingLayerCache(sink_tokens=2, window=4)
        for step in range(7):
            attention(tokens[:, step:step + 1], cache=cache)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    for got, tables in ((partial, (cos, sin)), (general, (random_cos, random_sin))):
        want = hf_reference(x.cpu(), *(t.cpu() for t in tables), interleaved)
        torch.testing.assert_close(got.cpu().double(), want, rtol=0, atol=2e-6)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_sync_detector_catches_a_host_read():
    # the premise of test_no_sync_on_cuda: the detector raises on what apply_rope used to do
    cos = torch.zeros(5, 16, device="cuda")
    torch.cuda.set_sync_debug_mode("error")
    try:
        with pytest.raises(RuntimeError, match="synchroniz"):
            kernels._angles_repeat_per_pair(cos, cos)
    finally:
        torch.cuda.set_sync_debug_mode("default")


# ---- errors --------------------------------------------------------------------------------------

def test_tables_that_do_not_broadcast_are_a_clear_error():
    with pytest.raises(ValueError, match="cos/sin's leading dimensions"):
        apply_rope(torch.zeros(2, 3, 5, 8), torch.zeros(4, 1, 5, 8), torch.zeros(4, 1, 5, 8))


def test_second_derivative_is_refused_clearly():
    cos, sin = random_tables((5, 8))
    x = torch.randn(1, 2, 5, 8, requires_grad=True)
    (grad,) = torch.autograd.grad(apply_rope(x, cos, sin).square().sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="differentiate twice"):
        grad.sum().backward()
