"""Chapter 10's study: every position method in the same small byte-level language model.

Each method is trained at length L at the best of a small learning-rate sweep (the sweep runs on the
first seed and is extended past an edge that wins; the other seeds use the winner), then evaluated at
L, 2L, ... 16L with the book's evaluation tools: perplexity with a bootstrap interval over windows
spread across the whole validation split, the truncated baseline (the same model reading at most L
tokens at once), per-position loss up to the longest length, and a passkey grid. The RoPE model is also
evaluated with YaRN (factor n/L) and with dynamic NTK (the YaRN paper's form), so that ALiBi is measured
against RoPE's extension recipes in the same study. Every method sees the same batches for a given seed, so differences can be paired by seed.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from .. import data
from ..attention import POSITION_METHODS
from ..plan import LayerSpec, Rope, Temperature, every_nth, repeat_pattern
from ..train import TrainConfig, train_model
from ..stats import t_interval
from .common import (make_model, over_seeds, paired_seed_interval, passkey, rank, save_checkpoint, score_lengths,
                     training_batches)
from .context_extension import extension_recipe

_COMMON = dict(methods=list(POSITION_METHODS), decay="linear", weight_decay=0.01,
               passkey_depths=[0.0, 0.25, 0.5, 0.75, 1.0], passkey_rate=0.25,
               max_bytes=4_000_000)
PRESETS = {
    "tiny": dict(_COMMON, dim=32, layers=1, heads=2, train_len=48, factors=[1, 2], steps=6, batch=4,
                 warmup=2, seeds=[0, 1], lr_grid=[1e-3, 3e-3], methods=["none", "rope"],
                 max_bytes=400_000, eval_tokens=512, passkey_lengths=[128], passkey_keys=2, curve_bin=8),
    "ci": dict(_COMMON, dim=64, layers=2, heads=4, train_len=64, factors=[1, 2, 4, 8], steps=200, batch=16,
               warmup=20, seeds=[0], lr_grid=[3e-3], eval_tokens=8192, passkey_lengths=[64, 128],
               passkey_keys=4, curve_bin=8),
    "full": dict(_COMMON, dim=96, layers=3, heads=4, train_len=128, factors=[1, 2, 4, 8, 16], steps=2000,
                 batch=16, warmup=100, seeds=[0, 1, 2, 3, 4], lr_grid=[1.5e-3, 3e-3, 6e-3], lr_extend=2,
                 eval_tokens=131072, passkey_lengths=[128, 256, 512, 1024, 2048], passkey_keys=16,
                 curve_bin=16),
    # the same code at more than 10x the full scale for a CUDA device
    "gpu": dict(_COMMON, dim=384, layers=6, heads=6, train_len=512, factors=[1, 2, 4, 8, 16], steps=10000,
                batch=32, warmup=500, seeds=[0, 1, 2, 3, 4], lr_grid=[5e-4, 1e-3, 2e-3], lr_extend=2,
                max_bytes=50_000_000, corpus="packages", eval_tokens=262144,
                passkey_lengths=[512, 1024, 2048, 4096, 8192], passkey_keys=32, curve_bin=64),
}

# The sinusoidal table is fixed at the size of the token embeddings at initialisation (RMS 0.02, as the
# original Transformer's ratio), but trained embeddings grow (the learned table grows about 7x here).
# This variant, run by the ``table-scale`` preset, makes the fixed table 5x larger, near the size a
# learned table reaches, so chapter 10 can check how much of sinusoidal's gap is the table's size.
VARIANTS = {"sinusoidal, table x5": ("sinusoidal", {"sinusoidal_scale": 5 * 0.02 * 2 ** 0.5})}
PRESETS["table-scale"] = dict(PRESETS["full"], methods=list(VARIANTS), lr_grid=[3e-3], lr_extend=0)

# The ``hybrid`` preset: the per-layer patterns of 2025-26 models (posenc.plan) beside pure RoPE, NoPE and
# ALiBi in the same model, at 4 layers so that a 3 local : 1 global pattern fits. Every RoPE layer keeps
# base 1e4, as the pure RoPE model has, so that only the pattern differs; the Gemma 3 row changes the
# global layer's base, which is what that pattern is about. Windows and chunks are ``window`` tokens.
def hybrid_plans(config: dict) -> dict:
    """``{name: plan}`` of the hybrid preset for ``config`` (its ``layers`` and ``window``)."""
    layers, window = config["layers"], config.get("window", config["train_len"] // 4)
    local, nope = LayerSpec("rope", window=window), LayerSpec("none")
    temperature = Temperature(floor_scale=window, scale=0.1)
    return {
        "local RoPE + global NoPE": repeat_pattern({"L": local, "G": nope}, "LLLG", layers),  # Cohere 2
        "chunked RoPE + NoPE with temperature": every_nth(  # Llama 4
            LayerSpec("none", temperature=temperature), 4, otherwise=LayerSpec("rope", chunk=window), n_layers=layers),
        "local RoPE + global RoPE base 1e6": repeat_pattern(  # Gemma 3
            {"L": local, "G": LayerSpec("rope", rope=Rope(1e6))}, "LLLG", layers),
        "RoPE + NoPE every 4th": every_nth(nope, 4, otherwise=LayerSpec("rope"), n_layers=layers),  # SmolLM3
        "local and full RoPE with sinks": repeat_pattern(  # gpt-oss
            {"S": LayerSpec("rope", window=window, sinks=True), "F": LayerSpec("rope", sinks=True)}, "SF", layers),
        "local RoPE only": [local] * layers,  # the control: no layer sees beyond the window
    }


HYBRIDS = tuple(hybrid_plans({"layers": 4, "window": 32, "train_len": 128}))
PRESETS["hybrid"] = dict(PRESETS["full"], layers=4, window=32, methods=["rope", "none", "alibi", *HYBRIDS],
                         lr_grid=[3e-3, 6e-3, 1.2e-2])

ROPE_EXTENSIONS = ("YaRN", "dynamic NTK")


def build(method: str, config: dict, train_len: int, **options):
    """The study's model for ``method``: a position method, one of ``VARIANTS``, or a hybrid plan."""
    if method in HYBRIDS:
        return make_model("none", config, data.VOCAB_SIZE, train_len, plan=hybrid_plans(config)[method], **options)
    base, extra = VARIANTS.get(method, (method, {}))
    return make_model(base, config, data.VOCAB_SIZE, train_len, **extra, **options)


def sweep(config: dict, runs: list[dict], method: str) -> list[float]:
    """The learning rates tried for ``method`` on the first seed: ``lr_grid``, extended by a factor of
    two past whichever edge wins (at most ``lr_extend`` times), so that the winner sits inside what was
    tried rather than at its edge. Each extension waits until every rate before it has run."""
    grid = list(config["lr_grid"])
    scores = _sweep_scores(config, runs, method)
    for _ in range(config.get("lr_extend", 0)):
        if any(lr not in scores for lr in grid):
            break
        best = min(grid, key=scores.get)
        if best == grid[-1]:
            grid.append(grid[-1] * 2)
        elif best == grid[0]:
            grid.insert(0, grid[0] / 2)
        else:
            break
    return grid


def _sweep_scores(config: dict, runs: list[dict], method: str) -> dict[float, float]:
    L, sweep_seed = str(config["train_len"]), config["seeds"][0]
    return {run["lr"]: run["perplexity"][L]["perplexity"] for run in runs
            if run["method"] == method and run["seed"] == sweep_seed}


def best_lr(config: dict, runs: list[dict], method: str) -> float | None:
    """The sweep's winner for ``method``: the learning rate whose first-seed run has the lowest
    perplexity at L (``None`` until every learning rate of the sweep has run)."""
    grid, scores = sweep(config, runs, method), _sweep_scores(config, runs, method)
    if any(lr not in scores for lr in grid):
        return None
    return min(grid, key=scores.get)


def next_run(config: dict, runs: list[dict]) -> dict | None:
    """First every method's sweep on the first seed, then the other seeds at each method's winner."""
    done = {(run["method"], run["seed"], run["lr"]) for run in runs}
    for method in config["methods"]:
        for lr in sweep(config, runs, method):
            if (method, config["seeds"][0], lr) not in done:
                return {"method": method, "seed": config["seeds"][0], "lr": lr}
    for seed in config["seeds"][1:]:
        for method in config["methods"]:
            lr = best_lr(config, runs, method)
            if (method, seed, lr) not in done:
                return {"method": method, "seed": seed, "lr": lr}
    return None


def seed_runs(record: dict) -> list[dict]:
    """The runs of a record at each method's chosen learning rate (one per method and seed)."""
    config, runs = record["config"], record["runs"]
    chosen = {method: best_lr(config, runs, method) for method in config["methods"]}
    return [run for run in runs if run["lr"] == chosen[run["method"]]]


def run(config: dict, key: dict, checkpoint_dir: Path | None) -> dict:
    method, seed, lr = key["method"], key["seed"], key["lr"]
    train_bytes, validation = data.stdlib_split(config["max_bytes"], corpus=config.get("corpus", "stdlib"))
    L = config["train_len"]
    lengths = [f * L for f in config["factors"]]
    torch.manual_seed(seed)
    model = build(method, config, L)
    start = time.perf_counter()
    history = train_model(
        model, training_batches(train_bytes, config, config["batch"], L),
        TrainConfig(steps=config["steps"], warmup=config["warmup"], lr=lr, seed=seed, decay=config["decay"],
                    weight_decay=config["weight_decay"], log_every=max(1, config["steps"] // 20)))
    result = {"train_seconds": time.perf_counter() - start, "history": history,
              "parameters": sum(p.numel() for p in model.parameters()),
              "train_tokens": config["steps"] * config["batch"] * L}
    if rank() != 0:
        return result
    if checkpoint_dir is not None:
        save_checkpoint(model, checkpoint_dir / f"head_to_head_{method}_seed{seed}_lr{lr:g}.pt",
                        {"method": method, "seed": seed, "lr": lr, "config": json.dumps(config)})
    usable = [n for n in lengths if method != "learned" or n <= L]  # no table rows beyond L
    scores = score_lengths(model, validation, config, usable, curve_length=lengths[-1], truncate=L)
    result.update(scores)
    keys = [n for n in config["passkey_lengths"] if method != "learned" or n <= L]
    result["passkey"] = passkey(model, validation, config, keys)
    result["truncated_passkey"] = passkey(model, validation, config, config["passkey_lengths"], context=L)
    if method == "rope":
        result["rope_extensions"] = {}
        weights = model.state_dict()
        for name in ROPE_EXTENSIONS:
            entry = {"perplexity": {}}
            for n in lengths[1:]:
                scaled = build(method, config, L,
                                    rope_scaling=extension_recipe(name, n / L, L))
                scaled.load_state_dict(weights)
                scaled_scores = score_lengths(scaled, validation, config, [n], curve_length=lengths[-1])
                entry["perplexity"][str(n)] = scaled_scores["perplexity"][str(n)]
                if n == lengths[-1]:
                    entry["curve"] = scaled_scores["curve"]
                    entry["passkey"] = passkey(scaled, validation, config, config["passkey_lengths"])
            result["rope_extensions"][name] = entry
    result["seconds"] = time.perf_counter() - start
    return result


# ---- reading a record: rows are methods, "<method>, truncated", "rope + YaRN", "rope + dynamic NTK" -----

TRUNCATED = ", truncated"


def _reading(row: str) -> tuple[str, tuple]:
    """``(method, keys)`` of a row: ``keys`` lead from a run to that reading's results (``()`` for the
    plain model, ``("truncated",)``, or ``("rope_extensions", name)``)."""
    if row.endswith(TRUNCATED):
        return row[: -len(TRUNCATED)], ("truncated",)
    if row.startswith("rope + "):
        name = row[len("rope + "):]
        if name not in ROPE_EXTENSIONS:
            raise ValueError(f"RoPE extension must be one of {ROPE_EXTENSIONS}, got {name!r}")
        return "rope", ("rope_extensions", name)
    return row, ()


def perplexity_path(row: str, length: int, train_len: int) -> tuple[str, tuple]:
    """``(method, path)``: which method's runs hold ``row``'s perplexity at ``length`` and where (for
    ``over_seeds``). A truncated row or a RoPE extension at ``length <= L`` is the plain model."""
    method, keys = _reading(row)
    n = str(length)
    if length <= train_len or not keys:
        return method, ("perplexity", n, "perplexity")
    if keys == ("truncated",):
        return method, ("truncated", n, "perplexity")
    return method, (*keys, "perplexity", n, "perplexity")


def table(record: dict, rows, lengths) -> dict:
    """``{row: {length: (mean, low, high) or None}}``: the 95% t-interval over seeds (each method at its
    chosen learning rate) of each row's perplexity; ``None`` where no run has it (learned beyond L)."""
    L, runs = record["config"]["train_len"], seed_runs(record)
    out = {}
    for row in rows:
        method, _ = perplexity_path(row, L, L)
        out[row] = {}
        for n in lengths:
            values = over_seeds(record, *perplexity_path(row, n, L)[1], method=method, runs=runs)
            out[row][n] = t_interval(list(values.values())) if values else None
    return out


def paired(record: dict, row_a: str, row_b: str, length: int, *,
           leave_out: tuple[int, ...] = ()) -> tuple[float, float, float]:
    """95% t-interval of the per-seed perplexity difference ``row_a - row_b`` at ``length`` (every
    method sees the same batches for a seed, so the seed pairs them); ``leave_out``: seeds left out
    (the seed that chose the learning rates, say)."""
    L = record["config"]["train_len"]
    (method_a, path_a), (method_b, path_b) = (perplexity_path(row, length, L) for row in (row_a, row_b))
    runs = [run for run in seed_runs(record) if run["seed"] not in leave_out]
    return paired_seed_interval(record, path_a, path_b, method_a=method_a, method_b=method_b, runs=runs)


def mean_curve(record: dict, row: str) -> list[float]:
    """The per-position loss curve of ``row`` at the longest length, averaged over seeds (bins of
    ``curve_bin`` tokens): ``"<method>"``, ``"<method>, truncated"`` or ``"rope + <extension>"``."""
    method, keys = _reading(row)
    if not keys:
        path = ("curve",)
    elif keys == ("truncated",):
        path = ("truncated_curve",)
    else:
        path = (*keys, "curve")
    curves = []
    for run in seed_runs(record):
        value = run if run["method"] == method else None
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        if value is not None:
            curves.append(value)
    if not curves:
        raise ValueError(f"no run has a curve for {row!r}")
    return [sum(values) / len(curves) for values in zip(*curves)]


# ---- readers for chapter 15 (hybrid layers) ------------------------------------------------------------

def passkey_summary(record: dict, method: str, part: str = "passkey") -> tuple[dict, list]:
    """``({length: (exact, digits)}, effective_lengths)`` for ``method`` at its chosen learning rate: the
    fraction of passkeys retrieved exactly and of digits right at each passkey length, averaged over depths
    and seeds (each depth of each seed weighs the same), and each seed's effective length. ``part`` is
    ``"passkey"`` (the whole window) or ``"truncated_passkey"`` (read through a window of L)."""
    grids = [run[part] for run in seed_runs(record) if run["method"] == method and part in run]
    if not grids:
        raise ValueError(f"no run of {method!r} has {part!r}")
    out = {}
    for n in record["config"]["passkey_lengths"]:
        held = [grid for grid in grids if str(n) in grid["grid"]]
        if held:
            exact = [v for grid in held for v in grid["grid"][str(n)].values()]
            digits = [v for grid in held for v in grid["digits"][str(n)].values()]
            out[n] = (sum(exact) / len(exact), sum(digits) / len(digits))
    return out, [grid["effective_length"] for grid in grids]


def curve_excess(record: dict, method: str) -> list[float]:
    """Bin by bin, ``method``'s per-position loss reading the whole longest window minus its truncated
    reading of the same bytes, each averaged over seeds: below zero where reading beyond L helps."""
    return [a - b for a, b in zip(mean_curve(record, method), mean_curve(record, method + TRUNCATED))]


def chunk_halves(record: dict, method: str, first: int, last: int) -> dict[int, tuple[float, float]]:
    """``{seed: (first halves, second halves)}``: in the positions ``first .. last - 1`` (whole chunks of
    ``config["window"]`` tokens), the mean per-position loss over the first half of each chunk and over
    the second half, from ``method``'s curve at the longest length (bins of ``curve_bin``). A chunked layer gives the first query of a
    chunk one key and the last one a whole chunk, so it makes the first halves harder; a temperature
    that steps once per chunk is the same for both halves and cannot."""
    config = record["config"]
    chunk, width = config["window"], config["curve_bin"]
    if chunk % (2 * width) or first % chunk or last % chunk:
        raise ValueError(f"first={first} and last={last} must be multiples of the chunk {chunk}, and the chunk "
                         f"a multiple of twice the curve's bin {width}")
    out = {}
    for run in seed_runs(record):
        if run["method"] != method:
            continue
        halves = [0.0, 0.0]
        for start in range(first, last, chunk):
            for half in (0, 1):
                lo = (start + half * chunk // 2) // width
                bins = run["curve"][lo:lo + chunk // 2 // width]
                halves[half] += sum(bins) / len(bins)
        chunks = (last - first) // chunk
        out[run["seed"]] = (halves[0] / chunks, halves[1] / chunks)
    return out
