"""Benchmarks of posenc's hot paths against what a reader would otherwise write.

    python -m posenc.bench                 # the issue's sizes (about five minutes on a 2-core CPU)
    python -m posenc.bench --size small    # quick look (seconds); --size tiny is for tests
    python -m posenc.bench --compile       # also time torch.compile'd RoPE (one-off compile reported)
    python -m posenc.bench --json out.json
    python -m posenc.bench --device cuda --dtype bfloat16 --json gpu.json   # on a GPU (no memory probes)

Every measurement is a ratio to a baseline timed in the same process, in interleaved rounds (median of
the rounds), so that the ratios hold on any machine even where the absolute times do not; and every
posenc result is compared with a float64 (or materialised) reference:

- ``apply_rope`` on q of shape ``[1, heads, T, head_dim]``, both pairings, against copying q
  (``q.clone()``, the floor for any out-of-place op) and against the ``rotate_half`` formulation
  (``q * cos + rotate_half(q) * sin``);
- partial rotary (``rotary_dim`` = head_dim/4 and head_dim/2), against copying q and against
  ``torch.cat((rope_formula(q[..., :r], cos, sin), q[..., r:]), -1)``;
- causal ``alibi_attention`` at inference against ``scaled_dot_product_attention`` with no bias (the
  floor) and with a materialised ``[1, heads, T, T]`` ALiBi bias (the obvious alternative; a 4-D mask,
  so that the fused kernel runs), plus the peak memory of each at T and 2T, measured in a fresh process;
- sliding-window attention (posenc's path: ``sliding_window_mask`` as an additive 4-D mask to
  ``scaled_dot_product_attention``, what ``MultiHeadAttention(window=...)`` does) and causal attention with
  learned sinks (``sink_attention``), each against full causal SDPA (the floor) and the eager formulation
  (scores, ``masked_fill``, softmax; for sinks, the sink column concatenated before the softmax and
  dropped after, as gpt-oss's reference code does);
- one training step (forward, backward, AdamW) of chapter 10's ``TransformerLM`` for every position
  method, against the same model with no positions.

Run as ``python -m posenc.bench`` on Linux, the process first pins glibc's mmap threshold
(``pin_fresh_pages``): every allocation above 128 KiB then takes fresh pages from the kernel, whatever ran
before. Without it, glibc raises the threshold after large frees, and whether a 16-64 MiB result costs
page faults (about two thirds of ``q.clone()`` at the issue's size here: 17 ms against 6 ms) depends on the
sizes freed earlier in the process; the copy baseline and the candidates would then be timed in different
regimes from row to row.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

from . import experiments
from .alibi import alibi_attention, alibi_bias, alibi_slopes, causal_mask
from .attention import POSITION_METHODS, MultiHeadAttention
from .block_sparse import block_sparse_attention, dense_attention, kernel_available
from .masks import sliding_window_mask
from .model import TransformerLM
from .rope import apply_rope, compile_apply_rope, rope_cos_sin, rope_formula, rope_frequencies
from .sinks import sink_attention

SIZES = {
    # rope: (heads, T, head_dim), also for partial rotary; alibi: (heads, T, head_dim), also for the
    # sliding-window and sink rows, with window tokens (gpt-oss's 128); train: chapter 10's full preset
    "tiny": dict(rope=(2, 16, 8), alibi=(2, 32, 8), window=8, curve=[64], layer_dim=16,
                 train=dict(dim=32, layers=1, heads=2, seq=16, batch=2), rounds=3),
    "small": dict(rope=(8, 1024, 64), alibi=(8, 512, 64), window=128, curve=[1024, 2048], layer_dim=256,
                  train=dict(dim=96, layers=3, heads=4, seq=128, batch=16), rounds=7),
    "issue": dict(rope=(32, 4096, 128), alibi=(8, 2048, 64), window=128, curve=[2048, 4096, 8192], layer_dim=256,
                  train=dict(dim=96, layers=3, heads=4, seq=128, batch=16), rounds=41),
}

_ALLOCATOR = {"pinned": False}


def pin_fresh_pages(threshold: int = 128 * 1024) -> bool:
    """Make every allocation above ``threshold`` bytes take fresh pages from the kernel (glibc's
    ``mallopt(M_MMAP_THRESHOLD)``, which also stops glibc from moving the threshold), so that what an
    allocation costs does not depend on what the process freed before. For the CLI: it lasts for the
    rest of the process. Returns whether it applied (Linux with glibc only)."""
    import ctypes
    import ctypes.util

    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        applied = bool(libc.mallopt(-3, threshold))  # M_MMAP_THRESHOLD is -3 in glibc's malloc.h
    except (OSError, AttributeError):
        return False
    _ALLOCATOR["pinned"] = _ALLOCATOR["pinned"] or applied
    return applied


def _synchronize() -> None:
    """Wait for queued GPU work, so that a call's time includes its kernels (no-op on a CPU)."""
    if torch.get_default_device().type == "cuda":
        torch.cuda.synchronize()


def _precision() -> str:
    """The default dtype every benchmark's tensors take, as the row labels print it (``fp32``...)."""
    return {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[torch.get_default_dtype()]


def timed_rounds(candidates: dict, rounds: int, warmup: int = 2) -> dict[str, float]:
    """Median seconds per call of each ``name -> fn``, timed in interleaved rounds (on a GPU, each call
    is followed by a synchronisation, so its kernels are inside its time)."""
    for fn in candidates.values():
        for _ in range(warmup):
            fn()
    _synchronize()
    times = {name: [] for name in candidates}
    for _ in range(rounds):
        for name, fn in candidates.items():
            start = time.perf_counter()
            fn()
            _synchronize()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """The Hugging Face / GPT-NeoX helper, as readers write it."""
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


def _reference64(x, cos, sin, interleaved):
    x, cos, sin = x.double(), cos.double(), sin.double()
    if interleaved:
        rotated = torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)
    else:
        rotated = rotate_half(x)
    return x * cos + rotated * sin


def bench_rope(heads: int, seq: int, head_dim: int, rounds: int, compile_too: bool) -> list[dict]:
    torch.manual_seed(0)
    q = torch.randn(1, heads, seq, head_dim)
    inv_freq, _ = rope_frequencies(head_dim)
    rows = []
    for interleaved in (False, True):
        cos, sin = rope_cos_sin(torch.arange(seq), inv_freq, interleaved=interleaved)
        candidates = {
            "copy (q.clone())": lambda: q.clone(),
            "rotate_half formula": lambda: rope_formula(q, cos, sin, interleaved=interleaved),
            "posenc apply_rope": lambda: apply_rope(q, cos, sin, interleaved=interleaved),
        }
        compile_seconds = None
        if compile_too:
            compiled = compile_apply_rope()
            start = time.perf_counter()
            compiled(q, cos, sin, interleaved=interleaved)
            compile_seconds = time.perf_counter() - start
            candidates["posenc compile_apply_rope"] = lambda: compiled(q, cos, sin, interleaved=interleaved)
        seconds = timed_rounds(candidates, rounds)
        reference = _reference64(q, cos, sin, interleaved)
        errors = {"posenc apply_rope": (apply_rope(q, cos, sin, interleaved=interleaved).double()
                                        - reference).abs().max().item()}
        if compile_too:
            errors["posenc compile_apply_rope"] = (compiled(q, cos, sin, interleaved=interleaved).double()
                                                   - reference).abs().max().item()
        rows.append({
            "operation": f"apply_rope {'interleaved' if interleaved else 'half-split'} "
                         f"[1, {heads}, {seq}, {head_dim}] {_precision()}",
            "seconds": seconds, "baseline": "copy (q.clone())", "alternative": "rotate_half formula",
            "max_abs_error_vs_float64": errors, "compile_seconds": compile_seconds,
        })
    return rows


def bench_partial_rope(heads: int, seq: int, head_dim: int, rounds: int) -> list[dict]:
    """Half-split ``apply_rope`` rotating the first head_dim/4 and head_dim/2 features of q."""
    torch.manual_seed(0)
    q = torch.randn(1, heads, seq, head_dim)
    rows = []
    for rotary_dim in (head_dim // 4, head_dim // 2):
        inv_freq, _ = rope_frequencies(rotary_dim)
        cos, sin = rope_cos_sin(torch.arange(seq), inv_freq)
        obvious = f"cat(rope_formula(q[..., :{rotary_dim}]), q[..., {rotary_dim}:])"
        candidates = {
            "copy (q.clone())": lambda: q.clone(),
            obvious: lambda r=rotary_dim, cos=cos, sin=sin: torch.cat((rope_formula(q[..., :r], cos, sin),
                                                                       q[..., r:]), dim=-1),
            "posenc apply_rope": lambda cos=cos, sin=sin: apply_rope(q, cos, sin),
        }
        seconds = timed_rounds(candidates, rounds)
        reference = torch.cat((_reference64(q[..., :rotary_dim], cos, sin, False), q[..., rotary_dim:].double()), -1)
        rows.append({
            "operation": f"apply_rope half-split, rotary_dim {rotary_dim} of {head_dim}, "
                         f"[1, {heads}, {seq}, {head_dim}] {_precision()}",
            "seconds": seconds, "baseline": "copy (q.clone())", "alternative": obvious,
            "max_abs_error_vs_float64": {"posenc apply_rope": (apply_rope(q, cos, sin).double()
                                                               - reference).abs().max().item()},
        })
    return rows


ALIBI_VARIANTS = ("SDPA causal, no bias", "SDPA + materialised ALiBi bias", "posenc alibi_attention")


def _alibi_case(name: str, heads: int, seq: int, head_dim: int):
    """Inputs for one variant (and, for the materialised one, its bias, built once as a cache would)."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, heads, seq, head_dim) for _ in range(3))
    if name == "SDPA causal, no bias":
        return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)
    if name == "SDPA + materialised ALiBi bias":
        # [1, heads, T, T]: the 4-D mask lets PyTorch's fused kernel run (a 3-D mask takes the math kernel).
        # In q's dtype: a float32 bias beside bfloat16 q, k, v gave a wrong output on an H100 (error 3.7).
        bias = alibi_bias(heads, seq).masked_fill(~causal_mask(seq, seq), float("-inf"))[None].to(q.dtype)
        return lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    if name == "posenc alibi_attention":
        return lambda: alibi_attention(q, k, v)
    raise ValueError(f"unknown variant {name!r}")


_MEMORY_PROBE = """
import torch
from posenc.bench import _alibi_case


def status(field):  # kB -> bytes, from /proc/self/status (Linux)
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field))


torch.set_num_threads({threads})
_alibi_case({name!r}, {heads}, 64, {head_dim})()  # load kernels and start threads first
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # reset the peak (VmHWM) to the current resident size
before = status("VmRSS:")
_alibi_case({name!r}, {heads}, {seq}, {head_dim})()
print(status("VmHWM:") - before)
"""


def peak_memory_bytes(name: str, heads: int, seq: int, head_dim: int) -> int:
    """Peak resident-memory growth of a fresh process while it builds one variant's inputs (q, k, v and,
    for the materialised variant, its bias) and runs it once: everything the variant needs. Linux only
    (it resets the peak through /proc/self/clear_refs)."""
    code = _MEMORY_PROBE.format(threads=torch.get_num_threads(), heads=heads, seq=seq, head_dim=head_dim,
                                name=name)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return int(done.stdout.strip().splitlines()[-1])


def bench_alibi(heads: int, seq: int, head_dim: int, rounds: int, memory: bool,
                block_sparse: bool = False) -> list[dict]:
    """ALiBi's kernels; with ``block_sparse`` (``run`` sets it, for the goals) also the FlexAttention path,
    which compiles first (tens of seconds)."""
    candidates = {name: _alibi_case(name, heads, seq, head_dim) for name in ALIBI_VARIANTS}
    if block_sparse and _has_compiler():
        torch.manual_seed(0)
        q, k, v = (torch.randn(1, heads, seq, head_dim) for _ in range(3))
        slopes = alibi_slopes(heads)
        candidates[BLOCK_SPARSE] = lambda: block_sparse_attention(q, k, v, slopes=slopes)
    seconds = timed_rounds(candidates, rounds)
    fast = candidates["posenc alibi_attention"]()
    materialised = candidates["SDPA + materialised ALiBi bias"]()
    row = {"operation": f"causal ALiBi attention, {heads} heads, T={seq}, head_dim {head_dim}, {_precision()}",
           "seconds": seconds, "baseline": "SDPA causal, no bias", "alternative": "SDPA + materialised ALiBi bias",
           "max_abs_error_vs_materialised": (fast - materialised).abs().max().item(),
           "inputs_bytes": 4 * heads * seq * head_dim * 4, "bias_bytes": heads * seq * seq * 4}
    if memory:
        row["peak_memory_bytes"] = {
            str(length): {name: peak_memory_bytes(name, heads, length, head_dim) for name in ALIBI_VARIANTS}
            for length in (seq, 2 * seq)}
    return [row]


def _eager_attention(q, k, v, visible: torch.Tensor, sinks: torch.Tensor | None = None) -> torch.Tensor:
    """Attention as readers write it: scores, ``masked_fill`` where hidden, softmax, times v; with sinks,
    a column of sink logits concatenated before the softmax and dropped after (gpt-oss)."""
    scores = (q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5).masked_fill(~visible, float("-inf"))
    if sinks is None:
        return scores.softmax(dim=-1) @ v
    sink_column = sinks.to(scores.dtype)[None, :, None, None].expand(*scores.shape[:-1], 1)
    return torch.cat((scores, sink_column), dim=-1).softmax(dim=-1)[..., :-1] @ v


def _attention_row(operation: str, candidates: dict, posenc_name: str, reference: torch.Tensor,
                   rounds: int) -> dict:
    seconds = timed_rounds(candidates, rounds)
    error = (candidates[posenc_name]().double() - reference).abs().max().item()
    return {"operation": operation, "seconds": seconds, "baseline": "SDPA causal (full, no sinks)",
            "alternative": next(name for name in candidates if name.startswith("eager")),
            "max_abs_error_vs_float64": {posenc_name: error}}


def bench_window_attention(heads: int, seq: int, head_dim: int, window: int, rounds: int) -> list[dict]:
    """Causal attention within a sliding window of ``window`` tokens, at inference (masks built per call,
    as ``MultiHeadAttention`` does on each forward)."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, heads, seq, head_dim) for _ in range(3))

    def posenc_window():  # MultiHeadAttention(window=...)'s path: an additive 4-D mask, the fused kernel
        hidden = ~sliding_window_mask(seq, seq, window)
        mask = torch.zeros(seq, seq).masked_fill(hidden, float("-inf"))[None, None]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    candidates = {
        "SDPA causal (full, no sinks)": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        "eager scores + masked_fill + softmax": lambda: _eager_attention(q, k, v, sliding_window_mask(seq, seq,
                                                                                                    window)),
        "posenc window mask + SDPA": posenc_window,
    }
    if _has_compiler():
        candidates[BLOCK_SPARSE] = lambda: block_sparse_attention(q, k, v, window=window)
    reference = _eager_attention(q.double(), k.double(), v.double(), sliding_window_mask(seq, seq, window))
    return [_attention_row(f"sliding-window attention (window {window}), {heads} heads, T={seq}, "
                           f"head_dim {head_dim}, {_precision()}", candidates, "posenc window mask + SDPA", reference, rounds)]


BLOCK_SPARSE = "posenc block_sparse (FlexAttention)"


def bench_sink_attention(heads: int, seq: int, head_dim: int, rounds: int) -> list[dict]:
    """Causal attention with one learned sink logit per head (gpt-oss), at inference."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, heads, seq, head_dim) for _ in range(3))
    sinks = torch.randn(heads)
    candidates = {
        "SDPA causal (full, no sinks)": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        "eager scores + sink column + softmax + drop": lambda: _eager_attention(q, k, v, causal_mask(seq, seq), sinks),
        "posenc sink_attention": lambda: sink_attention(q, k, v, sinks, mask=causal_mask(seq, seq)),
    }
    if _has_compiler():
        candidates[BLOCK_SPARSE] = lambda: block_sparse_attention(q, k, v, sinks=sinks)
        candidates["posenc block_sparse, causal, no sinks"] = lambda: block_sparse_attention(q, k, v)
    reference = _eager_attention(q.double(), k.double(), v.double(), causal_mask(seq, seq), sinks.double())
    return [_attention_row(f"causal attention with learned sinks, {heads} heads, T={seq}, head_dim {head_dim}, "
                           f"{_precision()}", candidates, "posenc sink_attention", reference, rounds)]


def bench_train_step(dim: int, layers: int, heads: int, seq: int, batch: int, rounds: int) -> list[dict]:
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, 256, (batch, seq + 1), generator=generator, device="cpu").to(torch.get_default_device())
    candidates = {}
    for method in POSITION_METHODS:
        torch.manual_seed(0)
        model = TransformerLM(256, dim, layers, heads, position=method, max_len=seq)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

        def step(model=model, optimizer=optimizer):
            logits = model(tokens[:, :-1])
            loss = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

        candidates[f"train step, {method}"] = step
    seconds = timed_rounds(candidates, rounds)
    return [{"operation": f"TransformerLM training step (width {dim}, {layers} layers, batch {batch} x {seq})",
             "seconds": seconds, "baseline": "train step, none", "alternative": None, "note": T5_TRAINING_NOTE}]


T5_TRAINING_NOTE = ("t5: the learned bias needs a gradient in training, so SDPA runs its unfused math kernel "
                    "on CPU (a fused kernel refuses a mask that requires grad); the other methods keep the fused one")


def bench_mask_curve(heads: int, head_dim: int, window: int, lengths, rounds: int) -> list[dict]:
    """Time against T of causal attention, a sliding window of ``window`` and chunks of ``window``, each
    through the dense masked path (what ``MultiHeadAttention`` does without ``block_sparse``) and through
    ``block_sparse_attention``, beside full causal SDPA at the same T (the baseline of each row)."""
    rows = []
    for seq in lengths:
        torch.manual_seed(0)
        q, k, v = (torch.randn(1, heads, seq, head_dim) for _ in range(3))
        candidates = {"SDPA causal (full, no sinks)": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                      "dense window mask + SDPA": lambda: dense_attention(q, k, v, window=window),
                      "dense chunk mask + SDPA": lambda: dense_attention(q, k, v, chunk=window)}
        if _has_compiler():
            candidates["block_sparse window"] = lambda: block_sparse_attention(q, k, v, window=window)
            candidates["block_sparse chunk"] = lambda: block_sparse_attention(q, k, v, chunk=window)
        rows.append({"operation": f"mask cost curve: window / chunk {window}, {heads} heads, T={seq}, "
                                  f"head_dim {head_dim}, {_precision()}", "seconds": timed_rounds(candidates, rounds),
                     "baseline": "SDPA causal (full, no sinks)", "alternative": None, "seq": seq})
    return rows


def bench_layer(dim: int, heads: int, window: int, lengths, rounds: int) -> list[dict]:
    """A whole ``MultiHeadAttention`` layer at inference (projections included): windowed or chunked with
    ``block_sparse`` against the same layer with neither (full causal attention)."""
    rows = []
    for seq in lengths:
        torch.manual_seed(0)
        x = torch.randn(1, seq, dim)
        full = MultiHeadAttention(dim, heads, position="rope").eval()
        layers = {"layer, full causal": full}
        for name, options in (("window", dict(window=window)), ("chunk", dict(chunk=window))):
            layer = MultiHeadAttention(dim, heads, position="rope", block_sparse=_has_compiler(), **options)
            layer.load_state_dict(full.state_dict())
            layers[f"layer, {name} {window}" + (", block_sparse" if layer.block_sparse else "")] = layer.eval()
        candidates = {name: (lambda layer=layer: layer(x)) for name, layer in layers.items()}
        with torch.no_grad():
            seconds = timed_rounds(candidates, rounds)
        rows.append({"operation": f"MultiHeadAttention layer (dim {dim}, {heads} heads, RoPE), T={seq}, inference",
                     "seconds": seconds, "baseline": "layer, full causal", "alternative": None, "seq": seq})
    return rows


# The goals: (what, row operation prefix, T or None, candidate, at most this many times the baseline)
GOALS = (
    ("sliding window 128 at T=2048, x full causal SDPA", "mask cost curve", 2048, "block_sparse window", 0.5),
    ("sliding window 128 at T=8192, x full causal SDPA", "mask cost curve", 8192, "block_sparse window", 0.2),
    ("chunks of 128 at T=2048, x full causal SDPA", "mask cost curve", 2048, "block_sparse chunk", 0.5),
    ("chunks of 128 at T=8192, x full causal SDPA", "mask cost curve", 8192, "block_sparse chunk", 0.2),
    ("layer with window 128 at T=2048, x the layer without", "MultiHeadAttention layer", 2048,
     "layer, window 128, block_sparse", 0.75),
    ("layer with window 128 at T=8192, x the layer without", "MultiHeadAttention layer", 8192,
     "layer, window 128, block_sparse", 0.35),
    ("layer with chunks of 128 at T=2048, x the layer without", "MultiHeadAttention layer", 2048,
     "layer, chunk 128, block_sparse", 0.75),
    ("layer with chunks of 128 at T=8192, x the layer without", "MultiHeadAttention layer", 8192,
     "layer, chunk 128, block_sparse", 0.35),
    ("sinks, x the same attention without sinks", "causal attention with learned sinks", None, BLOCK_SPARSE, 1.2),
    ("ALiBi via block mask, x ALiBi via a 4-D mask", "causal ALiBi attention", None, BLOCK_SPARSE, 1.0),
    ("half-split apply_rope, x copying q", "apply_rope half-split", None, "posenc apply_rope", 1.15),
)
_GOAL_BASELINES = {"sinks": "posenc block_sparse, causal, no sinks", "ALiBi": "SDPA + materialised ALiBi bias"}


def goals(result: dict) -> list[dict]:
    """Each goal of ``GOALS`` with its measured ratio and whether it is met (None where the result has
    no such row or candidate, e.g. without a compiler or at a size that does not reach that T, or where
    the row lists the candidate or the baseline under ``"excluded"``, ``{variant: why}``: it ran another
    kernel than its name says, or computed a wrong output)."""
    out = []
    for what, prefix, seq, candidate, bound in GOALS:
        baseline = next((name for key, name in _GOAL_BASELINES.items() if what.startswith(key)), None)
        ratio = None
        for row in result["rows"]:
            if row["operation"].startswith(prefix) and (seq is None or row.get("seq") == seq) \
                    and candidate in row["seconds"]:
                if {candidate, baseline or row["baseline"]} & set(row.get("excluded", {})):
                    break
                base = row["seconds"][baseline or row["baseline"]]
                ratio = row["seconds"][candidate] / base
                break
        out.append({"goal": what, "at most": bound, "ratio": ratio,
                    "met": None if ratio is None else ratio <= bound})
    return out


def cost_curves(result: dict) -> dict[str, dict[int, float]]:
    """Seconds per call against T, ``{variant: {T: seconds}}``, from a result's "mask cost curve" rows
    (full causal SDPA, and a window and chunks through the dense mask and through ``block_sparse``).
    A variant that a row lists under ``"excluded"`` (it ran another kernel than its name says, e.g.
    FlexAttention uncompiled) is left out at that T."""
    curves: dict[str, dict[int, float]] = {}
    for row in result["rows"]:
        if row["operation"].startswith("mask cost curve"):
            for name, seconds in row["seconds"].items():
                if name not in row.get("excluded", {}):
                    curves.setdefault(name, {})[row["seq"]] = seconds
    return curves


def environment() -> dict:
    """The experiments' record of versions and hardware, plus whether a C compiler was found."""
    return {**experiments.environment(), "compiler": "available" if _has_compiler() else "none found",
            "allocator": "fresh pages above 128 KiB (pinned)" if _ALLOCATOR["pinned"] else "as the process found it"}


def _has_compiler() -> bool:
    """A C compiler on the PATH and a FlexAttention kernel for the default device on this machine."""
    from shutil import which

    return (any(which(c) for c in ("cc", "gcc", "clang", "c++", "g++"))
            and kernel_available(torch.get_default_device()))


def run(size: str = "issue", *, compile_too: bool = False, memory: bool = True) -> dict:
    """Run every benchmark at a named size; returns ``{"environment", "size", "rows"}``."""
    if size not in SIZES:
        raise ValueError(f"size must be one of {sorted(SIZES)}, got {size!r}")
    config = SIZES[size]
    rows = bench_rope(*config["rope"], config["rounds"], compile_too)
    rows += bench_partial_rope(*config["rope"], config["rounds"])
    rows += bench_alibi(*config["alibi"], config["rounds"], memory, block_sparse=True)
    rows += bench_window_attention(*config["alibi"], config["window"], config["rounds"])
    rows += bench_sink_attention(*config["alibi"], config["rounds"])
    rows += bench_mask_curve(config["alibi"][0], config["alibi"][2], config["window"], config["curve"],
                             config["rounds"])
    rows += bench_layer(config["layer_dim"], config["alibi"][0], config["window"], config["curve"], config["rounds"])
    rows += bench_train_step(**config["train"], rounds=max(3, config["rounds"]))
    result = {"environment": environment(), "size": size, "rows": rows,
              "device": str(torch.get_default_device()), "dtype": _precision()}
    result["goals"] = goals(result)
    return result


def environment_line(result: dict) -> str:
    """Where a result was measured: versions, processor, threads and allocator, on one line."""
    env = result["environment"]
    return (f"posenc {env['posenc']}, torch {env['torch']}, Python {env['python']}, "
            f"{env['processor']}, {env['cpu_count']} CPUs, {env['torch_threads']} torch threads, "
            f"allocator: {env.get('allocator', 'as the process found it')}"
            + (f", on {env['gpu']} ({result.get('dtype', 'fp32')})" if result.get("device", "cpu") != "cpu" else ""))


def _note(row: dict, name: str) -> str:
    if name == row["baseline"]:
        return "baseline"
    if row.get("alternative") and name != row["alternative"]:
        ratio = row["seconds"][row["alternative"]] / row["seconds"][name]
        return f"{ratio:.1f}x faster than the alternative" if ratio >= 1 else \
            f"{1 / ratio:.1f}x slower than the alternative"
    return ""


def row_cells(row: dict) -> dict:
    """One operation of a result as table cells, ``{name: {"ms", "x baseline", "note"}}`` (formatted
    strings, as ``format_table`` prints them); ``posenc.tables.frame(row_cells(row))`` makes the table."""
    base = row["seconds"][row["baseline"]]
    return {name: {"ms": f"{seconds * 1e3:.2f}", "x baseline": f"{seconds / base:.2f}", "note": _note(row, name)}
            for name, seconds in row["seconds"].items()}


def row_notes(row: dict) -> list[str]:
    """What one operation reports besides its times: compile time, errors against the references and
    peak memory, one line each."""
    notes = [row["note"]] if row.get("note") else []
    if row.get("compile_seconds") is not None:
        notes.append(f"(one-off compilation: {row['compile_seconds']:.1f} s)")
    for name, error in row.get("max_abs_error_vs_float64", {}).items():
        notes.append(f"{name}: max |error| vs float64 reference {error:.1e}")
    if "max_abs_error_vs_materialised" in row:
        notes.append(f"max |difference| vs the materialised bias: {row['max_abs_error_vs_materialised']:.1e}")
    for length, peaks in row.get("peak_memory_bytes", {}).items():
        cells = ", ".join(f"{name} {peak / 2**20:.0f} MiB" for name, peak in peaks.items())
        notes.append(f"peak memory growth at T={length}: {cells}")
    return notes


def format_table(result: dict) -> str:
    """The result as a plain-text table: time, ratio to the row's baseline, and notes."""
    lines = [environment_line(result)]
    for row in result["rows"]:
        lines.append("")
        lines.append(row["operation"])
        for name, cells in row_cells(row).items():
            lines.append(f"  {name:<46} {cells['ms']:>9} ms  x{cells['x baseline']:>5}  {cells['note']}")
        lines.extend(f"  {note}" for note in row_notes(row))
    if result.get("goals"):
        lines += ["", "goals (ratio measured in this process; at most):"]
        for goal in result["goals"]:
            ratio = "not measured" if goal["ratio"] is None else f"{goal['ratio']:.2f}"
            verdict = {None: "", True: "met", False: "NOT met"}[goal["met"]]
            lines.append(f"  {goal['goal']:<58} {ratio:>12} (<= {goal['at most']:.2f})  {verdict}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m posenc.bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="issue", choices=sorted(SIZES))
    parser.add_argument("--compile", action="store_true", help="also time compile_apply_rope")
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory probes")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--json", default=None, help="also write the result to this JSON file")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                        help="where every tensor is made (cuda: synchronised timings, no memory probes)")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                        help="every tensor's dtype (float64 references are computed regardless)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.set_default_device(args.device)
    torch.set_default_dtype(getattr(torch, args.dtype))
    result = run(args.size, compile_too=args.compile, memory=not args.no_memory and args.device == "cpu")
    print(format_table(result))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    pin_fresh_pages()
    main()
