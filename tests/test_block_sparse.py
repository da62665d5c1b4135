"""posenc.block_sparse: FlexAttention with a block mask equals the dense masked attention (issue 29)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

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
    torch.testing.assert_close(out.double(), _by_hand(q, k, v, 40, slopes, sinks), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out, bs.dense_attention(q, k, v, window=40, slopes=slopes, sinks=sinks),
                               atol=1e-5, rtol=1e-5)
    chunked = bs.block_sparse_attention(q, k, v, chunk=100)
    torch.testing.assert_close(chunked, bs.dense_attention(q, k, v, chunk=100), atol=1e-5, rtol=1e-5)
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


def _compile_error(inner: Exception) -> Exception:
    """An error as torch.compile raises it: the cause wrapped by the backend."""
    from torch._dynamo.exc import BackendCompilerFailed
    return BackendCompilerFailed(_compile_error, inner, None)


@pytest.fixture
def kernel_for_this_cpu(monkeypatch):
    """PyTorch's check that it has a FlexAttention kernel for this CPU passes (it fails under make
    test-portable's ATEN_CPU_CAPABILITY=default): the compile step is reached."""
    import torch._inductor.kernel.flex.flex_cpu as flex_cpu
    monkeypatch.setattr(flex_cpu, "check_cpu_supported", lambda: True)


@torch.no_grad()
def test_without_a_compiler_it_falls_back_to_the_dense_path_once(monkeypatch, kernel_for_this_cpu):
    from torch._inductor.exc import InvalidCxxCompiler
    calls = []

    def no_compiler(*args, **kwargs):
        calls.append(1)
        raise _compile_error(InvalidCxxCompiler())

    monkeypatch.setattr(bs, "_COMPILED", {"flex": no_compiler})
    q, k, v = torch.randn(3, 1, 2, 50, 8)
    with pytest.warns(RuntimeWarning, match="dense masked path"):
        out = bs.block_sparse_attention(q, k, v, window=10)
    torch.testing.assert_close(out, bs.dense_attention(q, k, v, window=10))
    assert bs._COMPILED["failed"] == {"cpu"}
    bs.block_sparse_attention(q, k, v, window=10)  # from now on the dense path, without trying again
    assert len(calls) == 1


@torch.no_grad()
@pytest.mark.parametrize("error", [RuntimeError("Q and KV block size must be divisible by BLOCK_M and BLOCK_N"),
                                   _compile_error(ValueError("an unsupported score_mod"))])
def test_any_other_compile_error_is_raised_not_swallowed(monkeypatch, kernel_for_this_cpu, error):
    def broken(*args, **kwargs):
        raise error

    monkeypatch.setattr(bs, "_COMPILED", {"flex": broken})
    q, k, v = torch.randn(3, 1, 2, 50, 8)
    with pytest.raises(type(error)):
        bs.block_sparse_attention(q, k, v, window=10)
    assert not bs._COMPILED["failed"]


def _rows(counts, indices):
    """Each query block's key blocks, as sorted lists (FlexAttention's layout read back)."""
    return [sorted(indices[0, 0, r, :n].tolist()) for r, n in enumerate(counts[0, 0].tolist())]


@pytest.mark.parametrize("block", [16, 64, 128])
def test_the_block_mask_equals_create_block_mask_which_evaluates_every_pair(block):
    """Partial and full blocks, for causal, window and chunk masks, with and without a sink key, at lengths
    that are and are not multiples of the block: the same as PyTorch's create_block_mask."""
    from torch.nn.attention.flex_attention import create_block_mask
    cases = 0
    for seq in (1, 5, block - 1, block, block + 1, 2 * block + 7, 300):
        for window, chunk in ((None, None), (1, None), (10, None), (block, None), (block + 1, None), (129, None),
                              (None, 1), (None, 16), (None, 50), (None, block), (None, 100)):
            for sink in (False, True):
                expected = create_block_mask(bs._visible(window, chunk, seq, sink), None, None, seq, seq + sink,
                                             BLOCK_SIZE=block)
                partial, full = bs.block_classes(seq, block, window=window, chunk=chunk, sink=sink)
                case = (seq, window, chunk, sink)
                assert _rows(*bs._ordered(partial)) == _rows(expected.kv_num_blocks, expected.kv_indices), case
                assert _rows(*bs._ordered(full)) == _rows(expected.full_kv_num_blocks, expected.full_kv_indices), case
                cases += 1
    assert cases == 7 * 11 * 2


def test_the_block_size_is_the_cuda_kernels_tile_on_cuda_and_64_elsewhere():
    assert bs.block_size("cuda") == bs.block_size(torch.device("cuda", 0)) == 128
    assert bs.block_size("cpu") == 64
    mask = bs.block_mask(1000, window=100)
    assert mask.BLOCK_SIZE == (64, 64) and mask.seq_lengths == (1000, 1000)
    with pytest.raises(ValueError, match="window or chunk"):
        bs.block_mask(100, window=10, chunk=10)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the peak memory from Linux's /proc")
def test_a_window_of_4096_at_131072_tokens_builds_within_1_gb():
    """create_block_mask evaluates all T x T pairs (16 G booleans at this size); the block indices do not.
    The peak is the new process's own high-water mark (VmHWM; getrusage's maxrss would carry the pytest
    worker's across the fork and exec)."""
    program = ("import torch; from posenc import block_sparse as bs; "
               "mask = bs.block_mask(131072, window=4096); "
               "peak = next(line.split()[1] for line in open('/proc/self/status') if line.startswith('VmHWM')); "
               "print(mask.kv_num_blocks.shape[-1], int(mask.kv_num_blocks.max()), int(mask.full_kv_num_blocks.max()), "
               "peak)")
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    query_blocks, partial, full, peak_kib = map(int, out.stdout.split())
    assert query_blocks == 131072 // 64
    assert (partial, full) == (2, 4096 // 64 - 1)  # the diagonal block and the window's far edge; 63 whole blocks
    assert peak_kib < 1024 * 1024, f"peak resident memory {peak_kib / 1024:.0f} MB, with torch imported"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@torch.no_grad()
def test_on_cuda_the_compiled_kernel_runs_with_blocks_of_128_and_equals_the_dense_path():
    torch.manual_seed(0)
    q, k, v = torch.randn(3, 1, 4, 1000, 64, device="cuda", dtype=torch.bfloat16)
    for options in (dict(window=128), dict(chunk=256), dict(slopes=torch.rand(4, device="cuda")),
                    dict(sinks=torch.randn(4, device="cuda"))):
        out = bs.block_sparse_attention(q, k, v, **options)
        reference = bs.dense_attention(q.float(), k.float(), v.float(), **options)
        torch.testing.assert_close(out.float(), reference, atol=2e-2, rtol=2e-2)
    assert not bs._COMPILED.get("failed")  # compiled, not the fallback
    assert bs.block_mask(1000, window=128, device="cuda").BLOCK_SIZE == (128, 128)


def test_where_pytorch_has_no_cpu_kernel_it_takes_the_dense_path_without_trying(monkeypatch):
    """PyTorch's FlexAttention has no CPU kernel without AVX2, on macOS or with ATEN_CPU_CAPABILITY=default
    (it raises NotImplementedError from the compiler): posenc checks first, warns once and stays dense."""
    import torch._inductor.kernel.flex.flex_cpu as flex_cpu

    def never(*args, **kwargs):
        raise AssertionError("compiled although PyTorch has no kernel here")

    monkeypatch.setattr(flex_cpu, "check_cpu_supported", lambda: False)
    monkeypatch.setattr(bs, "_COMPILED", {"flex": never})
    assert not bs.kernel_available("cpu")
    q, k, v = torch.randn(3, 1, 2, 50, 8)
    with torch.no_grad(), pytest.warns(RuntimeWarning, match="no FlexAttention kernel for this CPU"):
        out = bs.block_sparse_attention(q, k, v, chunk=16)
    torch.testing.assert_close(out, bs.dense_attention(q, k, v, chunk=16))
