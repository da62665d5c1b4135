"""Does each position method let a model use its context? Chapter 10's study, on models that do.

The book's earlier studies trained on text alone, and their models used under 256 bytes of context: no
induction, no passkey retrieval even at the training length, a truncated reading as good as the whole.
Every "beyond L" comparison was then decided before the encoding mattered. Here every method trains on
a documented mixture (``common.task_mixture``): BOS text windows, and rows holding a long-range task from
``posenc.tasks`` (a planted block copied at a controlled distance; multi-query associative recall), with a
curriculum that grows the tasks' span from L/4 to L. Then, per method and seed:

- **Positive control** (``"positive_control"``): copy accuracy with the source anywhere within L. A
  method whose runs do not reach ``control_threshold`` is reported as not having learned the task, and
  nothing is read from its beyond-L numbers.
- **Retrieval by source distance** (``"retrieval"``): copy and passkey accuracy at each length fL with
  the source between fL/2 and fL back (within L for f = 1), and associative recall over the whole
  window; zero-shot, and read through the last L tokens only (``"truncated"``: the negative control, at
  chance beyond L). RoPE is also read with YaRN and dynamic NTK at each length (unless the preset sets
  ``rope_extensions`` to False).
- **Language modelling**: perplexity at each length and its truncated reading, the per-position curve,
  LongPPL's long-short difference (``evaluate.long_short_difference``) and Olsson et al.'s in-context
  learning score at L.
- **Throughput**: tokens per second of training and the load average around it (a busy machine, not
  the model, made the first head-to-head runs take 1 s a step instead of 0.1 s).

Learning rate: chosen per method on a sweep seed that is not reported (``sweep_seed``), scored on a
development split that is neither training nor evaluation data (``data.stdlib_splits``): among the rates
whose run passes the positive control, the lowest development perplexity at L; if none passes, the
highest control accuracy. A winner at an edge of the grid extends it by a factor of two (twice at most). Every method sees the same batches for a given seed, so differences pair by seed.
"""

from __future__ import annotations

import copy
import math
import os
import time
from pathlib import Path

import torch

from .. import data, evaluate, probes, tasks
from ..attention import POSITION_METHODS
from ..stats import clopper_pearson, paired_family, paired_interval, t_interval
from .common import (MIXER_METHODS, MIXER_VARIANTS, PROBES, copy_by_distance, distance_range, gate_half_lives, make_model, rate_interval, over_seeds, paired_seed_interval, positive_control,  # noqa: F401
                     probe_batch, rank, retrieval, rounded, save_checkpoint, score_lengths, task_mixture,
                     train_recorded, training_tokens)
from .context_extension import extension_recipe
from .head_to_head import hybrid_plans

_COMMON = dict(methods=list(POSITION_METHODS), decay="linear", weight_decay=0.01, max_bytes=4_000_000,
               mixture={"copy": 0.35, "recall": 0.15}, block=8, pairs=4, tasks_first=True, window_mean=True,
               sweep_seed=100, control_threshold=0.95)
PRESETS = {
    "tiny": dict(_COMMON, dim=32, layers=1, heads=2, train_len=48, factors=[1, 2], steps=6, batch=4, warmup=2,
                 curriculum_steps=2, seeds=[0], lr_grid=[1e-3, 3e-3], methods=["rope", "alibi"],
                 max_bytes=400_000, eval_tokens=256, probe_rows=4, curve_bin=8),
    # a chapter's live run (under 3 minutes on 2 cores): one learning rate, no sweep
    "ci": dict(_COMMON, dim=96, layers=3, heads=4, train_len=64, factors=[1, 2, 4], steps=1500, batch=16, warmup=50,
               curriculum_steps=300, seeds=[0], lr_grid=[1e-3], methods=["rope", "alibi"], eval_tokens=8192,
               probe_rows=64, curve_bin=8),
    "full": dict(_COMMON, dim=96, layers=3, heads=4, train_len=128, factors=[1, 2, 4, 8, 16], steps=3000,
                 batch=16, warmup=100, curriculum_steps=500, seeds=[0, 1, 2, 3, 4], lr_grid=[5e-4, 1e-3, 2e-3],
                 eval_tokens=65536, probe_rows=128, curve_bin=16),
    # chapter 9: NoPE beside RoPE and ALiBi, 4 layers, with position probes (trained and untrained) and the
    # first-token ratios of every head; NoPE's rate swept (its 3-layer best was the lowest rate to pass the
    # control), RoPE and ALiBi at the rate the "full" sweep chose for them
    "nope": dict(_COMMON, dim=96, layers=4, heads=4, train_len=128, factors=[1, 2, 4, 8], steps=3000,
                 batch=16, warmup=100, curriculum_steps=500, seeds=[0, 1, 2, 3, 4],
                 lr_grid={"none": [2.5e-4, 5e-4, 1e-3], "rope": [1e-3], "alibi": [1e-3]},
                 methods=["none", "rope", "alibi"], eval_tokens=65536, probe_rows=128, curve_bin=16,
                 position_probes=64, rope_extensions=False),
    # for a CUDA device, about ten times the scale (review P3-M1): 164M tokens a run, half of them text,
    # from the pinned packages' sources (about 90 MB of training files; the 4.7 MB standard library would
    # be repeated some 17 times over by the text rows alone)
    "gpu": dict(_COMMON, dim=384, layers=6, heads=6, train_len=512, factors=[1, 2, 4, 8], steps=10000,
                batch=32, warmup=500, curriculum_steps=1500, seeds=[0, 1, 2, 3, 4], lr_grid=[2.5e-4, 5e-4, 1e-3],
                max_bytes=110_000_000, corpus="packages", eval_tokens=262144, probe_rows=256, curve_bin=64),
}

# chapter 15: the families' layer patterns (``head_to_head.hybrid_plans``) on the same mixture, at the
# fractions of L that shipped models use for their windows and chunks (Gemma 3: 1,024 of 32k-128k, L/32 to
# L/128; gpt-oss: 128 of 131k): L/8 for every family and L/32 for the two local-global ones. A method is
# "<family>, W <window>"; "local RoPE only" is the negative control (no layer sees past the window, four
# layers reach about 4W back). Same batches per seed as the "nope" preset, so its RoPE, NoPE and ALiBi
# runs pair with these by seed; one rate (1e-3, what the 4-layer RoPE and ALiBi runs used), not swept.
HYBRID_FAMILIES = {16: ("local RoPE only", "local RoPE + global NoPE", "local RoPE + global RoPE base 1e6",
                        "chunked RoPE + NoPE with temperature", "local and full RoPE with sinks"),
                   4: ("local RoPE + global NoPE", "local RoPE + global RoPE base 1e6")}
WINDOW_MARK = ", W "


def hybrid_method(family: str, window: int) -> str:
    return f"{family}{WINDOW_MARK}{window}"


PRESETS["hybrid"] = dict(
    PRESETS["nope"], lr_grid=[1e-3], position_probes=0, distance_edges=[8, 16, 32, 64, 119],
    methods=[hybrid_method(family, window) for window, families in HYBRID_FAMILIES.items() for family in families])
# chapter "position without an encoding" (issue 28): the layers of common.MIXER_METHODS on the same mixture,
# batches and readings as the "nope" preset's RoPE, NoPE and ALiBi runs (which pair with these by seed)
PRESETS["mixers"] = dict(PRESETS["nope"], lr_grid=[1e-3], position_probes=0, distance_edges=[8, 16, 32, 64, 119],
                         methods=list(MIXER_METHODS))
# issue 40: the layers that never copied, with the changes their authors' blocks and the audit suggest
PRESETS["mixers-search"] = dict(PRESETS["mixers"], methods=list(MIXER_VARIANTS[:4]))
# issue 40: T5's bias passed the control on 2 of 5 seeds at the rate its sweep chose (1e-3, 0.980 on the sweep
# seed); the next step of its search is the sweep's lower rate, where the sweep seed copied 0.999
PRESETS["t5-lower-rate"] = dict(PRESETS["full"], methods=["t5"], lr_grid=[5e-4])
# issue 40: the next step for the methods and plans at chance, one run each on the sweep seed (run with
# --seeds 100): the hybrid plans at chance, at the lower rate that trains NoPE (the 4-layer NoPE passed on 3
# of 5 seeds at 1e-3, the 3-layer one on 5 of 5 at 5e-4; in two of the three plans the one layer that
# reaches every copy's source is a NoPE layer); the absolute tables and the decay layer (partly learned at
# 3,000 steps) trained twice as long, the schedule stretched alike
PRESETS["hybrid-search"] = dict(PRESETS["hybrid"], lr_grid=[5e-4], methods=[
    hybrid_method("chunked RoPE + NoPE with temperature", 16), *(hybrid_method(family, 4) for family in HYBRID_FAMILIES[4])])
_TWICE = dict(steps=6000, warmup=200, curriculum_steps=1000)
PRESETS["tables-longer"] = dict(PRESETS["full"], **_TWICE, lr_grid=[5e-4], methods=["sinusoidal", "learned"])
PRESETS["decay-longer"] = dict(PRESETS["mixers"], **_TWICE, methods=["decay + conv + gate"])
# Kimi Linear's pattern (1 of 5 at 1e-3): its one attention layer has no position, as in the hybrid plans above
PRESETS["kimi-lower-rate"] = dict(PRESETS["mixers"], lr_grid=[5e-4], methods=["decay 3:1 attention"])
# review P6-M1: does a width-4 convolution help RoPE and ALiBi as it helps no encoding? The same preset
PRESETS["conv-controls"] = dict(PRESETS["mixers"], methods=["rope + conv", "alibi + conv"])
PRESETS["mixers-tiny"] = dict(PRESETS["tiny"], layers=2, lr_grid=[1e-3], methods=list(MIXER_METHODS))
PRESETS["hybrid-tiny"] = dict(PRESETS["tiny"], layers=2, lr_grid=[1e-3], distance_edges=[8, 16, 32],
                              methods=[hybrid_method("local RoPE + global NoPE", 8), hybrid_method("local RoPE only", 8)])

ROPE_EXTENSIONS = ("YaRN", "dynamic NTK")


def build(method: str, config: dict, **options):
    """The study's model: a position method, or a hybrid plan named ``"<family>, W <window>"``."""
    if WINDOW_MARK in method:
        family, _, window = method.rpartition(WINDOW_MARK)
        plan = hybrid_plans(dict(config, window=int(window)))[family]
        return make_model("none", config, data.VOCAB_SIZE, config["train_len"], plan=plan, **options)
    return make_model(method, config, data.VOCAB_SIZE, config["train_len"], **options)


# ---- which run comes next: the sweep on the sweep seed, then the reported seeds at each winner ----------

def _sweep_runs(runs: list[dict], config: dict, method: str) -> dict[float, dict]:
    return {run["lr"]: run for run in runs if run["method"] == method and run["seed"] == config["sweep_seed"]}


MAX_EXTENSIONS = 2  # times a sweep may step past an edge of lr_grid


def lr_grid(config: dict, method: str) -> list[float]:
    """The rates to sweep for ``method``: ``config["lr_grid"]``, a list for every method or a dict of
    lists by method (a method given one rate is not swept)."""
    grid = config["lr_grid"]
    return list(grid[method] if isinstance(grid, dict) else grid)


def _winner(config: dict, sweep: dict, rates: list[float]) -> float:
    passed = [lr for lr in rates if sweep[lr]["development"]["control"] >= config["control_threshold"]]
    if passed:
        return min(passed, key=lambda lr: sweep[lr]["development"]["perplexity"])
    return max(rates, key=lambda lr: sweep[lr]["development"]["control"])


def sweep_rates(config: dict, runs: list[dict], method: str) -> list[float]:
    """The learning rates tried for ``method``: ``lr_grid``, extended by a factor of two past whichever
    edge wins (at most ``MAX_EXTENSIONS`` times), so that the winner sits inside what was tried; each
    extension waits until every rate before it has run. (A method that passes the control at no rate
    and does best at the lowest is tried lower, for instance.)"""
    rates, sweep = sorted(lr_grid(config, method)), _sweep_runs(runs, config, method)
    for _ in range(MAX_EXTENSIONS):
        if any(lr not in sweep for lr in rates):
            break
        best = _winner(config, sweep, rates)
        if best == rates[0]:
            rates.insert(0, rates[0] / 2)
        elif best == rates[-1]:
            rates.append(rates[-1] * 2)
        else:
            break
    return rates


def best_lr(config: dict, runs: list[dict], method: str) -> float | None:
    """The sweep's winner for ``method`` (see the module docstring and ``sweep_rates``); ``None`` until
    every rate has run. A grid of one rate needs no sweep."""
    if len(lr_grid(config, method)) == 1:
        return lr_grid(config, method)[0]
    rates, sweep = sweep_rates(config, runs, method), _sweep_runs(runs, config, method)
    if any(lr not in sweep for lr in rates):
        return None
    return _winner(config, sweep, rates)


def next_run(config: dict, runs: list[dict]) -> dict | None:
    done = {(run["method"], run["seed"], run["lr"]) for run in runs}
    for method in config["methods"]:
        if len(lr_grid(config, method)) == 1:
            continue
        for lr in sweep_rates(config, runs, method):
            if (method, config["sweep_seed"], lr) not in done:
                return {"method": method, "seed": config["sweep_seed"], "lr": lr}
    for seed in config["seeds"]:
        for method in config["methods"]:
            lr = best_lr(config, runs, method)
            if (method, seed, lr) not in done:
                return {"method": method, "seed": seed, "lr": lr}
    return None


# ---- one run -------------------------------------------------------------------------------------------

def run(config: dict, key: dict, checkpoint_dir: Path | None) -> dict:
    method, seed, lr = key["method"], key["seed"], key["lr"]
    train_bytes, development, validation = data.stdlib_splits(config["max_bytes"],
                                                              corpus=config.get("corpus", "stdlib"))
    L = config["train_len"]
    torch.manual_seed(seed)
    model = build(method, config)
    initial = copy.deepcopy(model) if config.get("position_probes") else None  # the untrained control
    load_before = os.getloadavg()[0]
    result = train_recorded(model, task_mixture(train_bytes, config, config["batch"], L), config, lr=lr, seed=seed)
    result["train_tokens"] = training_tokens(config, L)
    result["epochs"] = round(result["train_tokens"] / train_bytes.numel(), 3)  # passes over the training text, at most
    result["tokens_per_second"] = round(result["train_tokens"] / result["train_seconds"])
    result["load_average"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    if rank() != 0:
        return result
    start = time.perf_counter()
    if seed == config["sweep_seed"]:  # the sweep: development data only
        control = positive_control(model, development, config)
        losses = evaluate.token_losses(model, development, L, n_windows=config["eval_tokens"] // L, bos=tasks.BOS)
        result["development"] = {"control": control["accuracy"],
                                 "perplexity": round(float(losses.double().mean().exp()), 5)}
        return result
    if checkpoint_dir is not None:
        save_checkpoint(model, checkpoint_dir / f"context_use_{method}_seed{seed}_lr{lr:g}.pt",
                        {"method": method, "seed": seed, "lr": lr})
    factors = [f for f in config["factors"] if method != "learned" or f == 1]  # no table rows beyond L
    lengths = [f * L for f in factors]
    result["positive_control"] = positive_control(model, validation, config)
    result["retrieval"] = retrieval(model, validation, config, factors)
    if config.get("distance_edges"):
        result["copy_by_distance"] = copy_by_distance(model, validation, config)
    result.update(score_lengths(model, validation, config, lengths, curve_length=lengths[-1], truncate=L,
                                bos=tasks.BOS, context_use=True))
    if initial is not None:
        result["probes"] = position_readings(model, initial, validation, config)
    if method in MIXER_METHODS + MIXER_VARIANTS:  # each learned gate's effective window, on text (BOS first)
        starts = evaluate.window_starts(validation.numel(), L, 64)
        text = validation[starts[:, None] + torch.arange(L - 1)]
        gates = gate_half_lives(model, torch.cat([torch.full((len(text), 1), tasks.BOS), text], dim=1))
        if gates:
            result["gates"] = gates
    if method == "rope" and config.get("rope_extensions", True):
        weights = model.state_dict()
        result["rope_extensions"] = {}
        for name in ROPE_EXTENSIONS:
            entry = {}
            for factor in factors[1:]:
                scaled = build(method, config, rope_scaling=extension_recipe(name, float(factor), L))
                scaled.load_state_dict(weights)
                entry[str(factor * L)] = {
                    "retrieval": retrieval(scaled, validation, config, [factor], truncate=False),
                    "perplexity": score_lengths(scaled, validation, config, [factor * L],
                                                bos=tasks.BOS)["perplexity"][str(factor * L)]}
            result["rope_extensions"][name] = entry
    result["evaluation_seconds"] = time.perf_counter() - start
    return result


def position_readings(model, initial, validation: torch.Tensor, config: dict) -> dict:
    """Chapter 9's readings on ``position_probes`` windows of L (BOS first, as in training): linear and
    MLP probes of position at every layer for the trained model and for ``initial`` (the same model
    before training), each head's first-token ratio (``probes.first_token_ratio``), and the perplexity
    at L with the BOS token left out (the first byte of text at position 0)."""
    L = config["train_len"]
    starts = evaluate.window_starts(validation.numel(), L, config["position_probes"])
    text = validation[starts[:, None] + torch.arange(L - 1)]
    windows = torch.cat([torch.full((len(text), 1), tasks.BOS), text], dim=1)
    losses = evaluate.token_losses(model, validation, L, n_windows=config["eval_tokens"] // L)
    return {"trained": probes.position_probes(model, windows, skip=1),
            "untrained": probes.position_probes(initial, windows, skip=1),
            "first_token_ratio": [rounded(layer, 3) for layer in probes.first_token_ratio(model, windows)],
            "untrained_first_token_ratio": [rounded(layer, 3)
                                            for layer in probes.first_token_ratio(initial, windows)],
            "perplexity_without_bos": round(float(losses.double().mean().exp()), 5),
            "stream": bos_stream(model, validation, config)}


STREAM_FACTOR, STREAMS = 4, 8  # chapter 17's reading of the chapter 9 models: 8 streams of 4L, BOS first


def bos_stream(model, validation: torch.Tensor, config: dict) -> dict:
    """Mean loss beyond L of ``STREAMS`` streams of ``STREAM_FACTOR * L`` tokens read after a BOS token, four
    ways: ``dense`` (all at once), ``recomputed`` (each token from BOS and its last L - 1 tokens),
    ``rolling, BOS kept`` (a KV cache of BOS and the last L - 1 tokens, StreamingLLM's sink) and
    ``rolling, no BOS`` (the last L tokens: BOS evicted once the stream passes L)."""
    L = config["train_len"]
    length, bos = STREAM_FACTOR * L, tasks.BOS
    where = dict(n_windows=STREAMS, span=length)
    readings = {
        "dense": evaluate.token_losses(model, validation, length, bos=bos, batch_size=4, **where),
        "recomputed": evaluate.truncated_token_losses(model, validation, length, L, stride=1, bos=bos,
                                                      batch_size=64, **where),
        "rolling, BOS kept": evaluate.streaming_token_losses(model, validation, length, sink_tokens=1,
                                                             window=L - 1, bos=bos, **where),
        "rolling, no BOS": evaluate.streaming_token_losses(model, validation, length, sink_tokens=0,
                                                           window=L, bos=bos, **where)}
    return {name: round(float(losses[:, L:].double().mean()), 5) for name, losses in readings.items()}


# ---- reading a record ----------------------------------------------------------------------------------

def seed_runs(record: dict, only_passing: bool = False) -> list[dict]:
    """The reported runs: each method at its chosen learning rate, on the reported seeds; with
    ``only_passing``, only the runs whose positive control reached ``control_threshold`` (the runs whose
    numbers beyond L may be read; a reader that uses them says so, since it selects the better seeds)."""
    config, runs = record["config"], record["runs"]
    chosen = {method: best_lr(config, runs, method) for method in config["methods"]}
    return [run for run in runs if run["seed"] != config["sweep_seed"] and run["lr"] == chosen[run["method"]]
            and (not only_passing or run["positive_control"]["accuracy"] >= config["control_threshold"])]


def controls(record: dict) -> dict:
    """``{method: {"passed": seeds passing, "seeds": seeds run, "interval": Clopper-Pearson 95% interval of
    the passing rate, "accuracy": [per seed]}}`` of the positive control at ``control_threshold``."""
    threshold, out = record["config"]["control_threshold"], {}
    for method in record["config"]["methods"]:
        values = over_seeds(record, "positive_control", "accuracy", method=method, runs=seed_runs(record))
        passed = sum(v >= threshold for v in values.values())
        out[method] = {"passed": passed, "seeds": len(values),
                       "interval": clopper_pearson(passed, len(values)) if values else None,
                       "accuracy": [values[s] for s in sorted(values)]}
    return out


TRAINED_SEEDS = 4  # the book's bar: a method counts as trained when its control passes on 4 of 5 seeds


def control_label(name: str, control: dict, bar: int = TRAINED_SEEDS) -> str:
    """``name`` for a method trained to its control (``control["passed"]`` at least ``bar``), else
    ``"name (k of n)"`` with the k of its n seeds that pass: a table row printed, not read."""
    if control["passed"] >= bar:
        return name
    return f"{name} ({control['passed']} of {control['seeds']})"


def retrieval_table(record: dict, part: str = "copy", measure: str = "token_accuracy",
                    only_passing: bool = False) -> dict:
    """``{method: {length: (mean, low, high) or None}}``: the 95% t-interval over seeds of ``measure``
    (cut to [0, 1]) for the retrieval ``part`` (``"copy"``, ``"copy, truncated"``, ``"recall"``) at each length, over the
    runs of ``seed_runs(record, only_passing)``."""
    config, runs = record["config"], seed_runs(record, only_passing)
    lengths = [f * config["train_len"] for f in config["factors"]]
    out = {}
    for method in config["methods"]:
        out[method] = {}
        for n in lengths:
            values = over_seeds(record, "retrieval", part, str(n), measure, method=method, runs=runs)
            out[method][n] = rate_interval(values)
    return out


def paired_retrieval(record: dict, method_a: str, method_b: str, length: int, part: str = "copy",
                     measure: str = "token_accuracy") -> tuple[float, float, float]:
    """95% t-interval of the per-seed difference a - b of a retrieval measure at ``length``."""
    path = ("retrieval", part, str(length), measure)
    return paired_seed_interval(record, path, path, method_a=method_a, method_b=method_b, runs=seed_runs(record))


TRUNCATED = ", truncated"


def perplexity_table(record: dict, rows, lengths, only_passing: bool = False) -> dict:
    """``{row: {length: (mean, low, high) or None}}``: the 95% t-interval over seeds of each row's
    perplexity, a row being a method or ``"<method>, truncated"`` (the same model reading at most L
    tokens at once; at L, the model itself); ``None`` where no run has it (learned beyond L). Runs as
    in ``seed_runs(record, only_passing)``."""
    L, runs, out = record["config"]["train_len"], seed_runs(record, only_passing), {}
    for row in rows:
        method = row[: -len(TRUNCATED)] if row.endswith(TRUNCATED) else row
        part = "truncated" if row.endswith(TRUNCATED) else "perplexity"
        out[row] = {}
        for n in lengths:
            values = over_seeds(record, part if n > L else "perplexity", str(n), "perplexity", method=method, runs=runs)
            out[row][n] = t_interval(list(values.values())) if values else None
    return out


def long_short_table(record: dict, measure: str = "mean") -> dict:
    """``{method: {length: (mean, low, high)}}``: the t-interval over seeds of a long-short difference
    measure (``"mean"`` LSD in nats, or ``"key_fraction"``) at each length beyond L."""
    config, runs, out = record["config"], seed_runs(record), {}
    for method in config["methods"]:
        out[method] = {}
        for factor in config["factors"][1:]:
            n = factor * config["train_len"]
            values = over_seeds(record, "long_short", str(n), measure, method=method, runs=runs)
            out[method][n] = t_interval(list(values.values())) if values else None
    return out


def sweep_results(record: dict, method: str) -> dict:
    """``{lr: {"control": accuracy, "perplexity": at L}}``: ``method``'s sweep runs, scored on the
    development split."""
    return {lr: run["development"] for lr, run in sorted(_sweep_runs(record["runs"], record["config"], method).items())}


def sweep_table(record: dict) -> dict:
    """``{method: {lr: "control / perplexity"}}`` of the sweep seed on the development split, the chosen
    rate marked ``*`` (a rate a method did not try is absent)."""
    out = {}
    for method in record["config"]["methods"]:
        chosen = best_lr(record["config"], record["runs"], method)
        out[method] = {lr: f"{dev['control']:.3f} / {dev['perplexity']:.2f}" + ("*" if lr == chosen else "")
                       for lr, dev in sweep_results(record, method).items()}
    return out


def retrieval_path(part: str, length: int, measure: str = "token_accuracy") -> tuple:
    """Where a run keeps a retrieval measure: ``part`` is ``"copy"``, ``"copy, truncated"``, ``"recall"``,
    ``"passkey"``..., or ``"copy, <recipe>"`` for RoPE read with a recipe of ``ROPE_EXTENSIONS``."""
    n = str(length)
    task, _, recipe = part.partition(", ")
    if recipe in ROPE_EXTENSIONS:
        return ("rope_extensions", recipe, n, "retrieval", task, n, measure)
    return ("retrieval", part, n, measure)


def extension_table(record: dict, part: str = "copy", measure: str = "token_accuracy",
                    only_passing: bool = False) -> dict:
    """``{reading: {length: (mean, low, high)}}`` for RoPE beyond L: unchanged, truncated, and with each
    recipe of ``ROPE_EXTENSIONS`` (the t-interval over seeds of the retrieval ``measure`` of ``part``;
    runs as in ``seed_runs(record, only_passing)``)."""
    config, runs = record["config"], seed_runs(record, only_passing)
    lengths = [f * config["train_len"] for f in config["factors"][1:]]
    readings = ["", ", truncated", *(f", {name}" for name in ROPE_EXTENSIONS)]
    out = {}
    for reading in readings:
        out[f"rope{reading}"] = {}
        for n in lengths:
            values = over_seeds(record, *retrieval_path(part + reading, n, measure), method="rope", runs=runs)
            out[f"rope{reading}"][n] = rate_interval(values)
    return out


def compare(record: dict, tests: dict, level: float = 0.05, only_passing: bool = False) -> dict:
    """A family of paired comparisons with Holm's correction over the whole family.

    ``tests``: ``{label: ((method_a, path_a), (method_b, path_b))}``, paths as for ``over_seeds``.
    Returns ``{label: {"interval": 95% t-interval of a - b over seeds, "p": paired t-test p-value,
    "holm": True where the difference stays significant at family-wise ``level``}}``. Seeds pair across
    methods; with ``only_passing``, a seed counts only where both runs pass the positive control."""
    runs = seed_runs(record, only_passing)
    return paired_family({label: (over_seeds(record, *path_a, method=method_a, runs=runs),
                                  over_seeds(record, *path_b, method=method_b, runs=runs))
                          for label, ((method_a, path_a), (method_b, path_b)) in tests.items()}, level)


RETRIEVAL_PAIRS = (("none", "rope"), ("alibi", "rope"), ("none", "alibi"))


def retrieval_family(record: dict, methods) -> dict:
    """Chapter 10's family of paired copy comparisons, for ``compare``: each of ``methods`` against its
    truncated reading at every length beyond L, and each pair of ``RETRIEVAL_PAIRS`` at 2L and 4L.
    Chapter 20 tests the same family, so that Holm's correction runs over the same tests."""
    config = record["config"]
    lengths = [f * config["train_len"] for f in config["factors"][1:]]
    family = {f"{m} - truncated, {n}": ((m, retrieval_path("copy", n)), (m, retrieval_path("copy, truncated", n)))
              for m in methods for n in lengths}
    family.update({f"{a} - {b}, {n}": ((a, retrieval_path("copy", n)), (b, retrieval_path("copy", n)))
                   for a, b in RETRIEVAL_PAIRS for n in lengths[:2]})
    return family


def beyond_l_family(record: dict, method: str, only_passing: bool = False) -> tuple[dict, dict]:
    """``method`` read as a family of its own (chapter 16): ``(rows, results)``. ``rows`` is
    ``{"copy": ..., "copy, truncated": ...}``, its rows of ``retrieval_table``; ``results`` is ``compare``
    over its copy against its truncated reading at every length beyond L (does it read beyond L?) and,
    with two lengths or more beyond L, its copy at the first against the last (does it fade?), Holm's
    correction over them all. ``only_passing``: the seeds whose run passes its control, as in ``compare``."""
    config = record["config"]
    lengths = [f * config["train_len"] for f in config["factors"][1:]]
    rows = {part: retrieval_table(record, part, only_passing=only_passing)[method]
            for part in ("copy", "copy, truncated")}
    L, at = config["train_len"], retrieval_path
    tests = {f"copy - truncated, {n // L}L": ((method, at("copy", n)), (method, at("copy, truncated", n)))
             for n in lengths}
    if len(lengths) > 1:
        first, last = lengths[0], lengths[-1]
        tests[f"copy {first // L}L - copy {last // L}L"] = ((method, at("copy", first)), (method, at("copy", last)))
    return rows, compare(record, tests, only_passing=only_passing)


def throughput(record: dict, min_load: float = 0.0, max_load: float = float("inf")) -> str:
    """``"23,100 (21,800-24,500), 12 runs"``: the median and range of the training tokens per second of
    the runs whose highest load average (before or after training) lies in ``[min_load, max_load)``;
    the load is what separates a fast run from a slow one on a shared machine."""
    speeds = sorted(run["tokens_per_second"] for run in record["runs"]
                    if min_load <= max(run["load_average"]) < max_load)
    if not speeds:
        return "no runs"
    return f"{speeds[len(speeds) // 2]:,} ({speeds[0]:,}-{speeds[-1]:,}), {len(speeds)} runs"


def mean_curve(record: dict, method: str, truncated: bool = False) -> list[float] | None:
    """The per-position loss of ``method`` over a window of the longest length, in bins of ``curve_bin``
    tokens, averaged over its reported seeds (nats); with ``truncated``, the same bytes read through the
    last L tokens. ``None`` for a method without one (a learned table beyond its length)."""
    key = "truncated_curve" if truncated else "curve"
    curves = [run[key] for run in seed_runs(record) if run["method"] == method and run.get(key)]
    longest = record["config"]["train_len"] * max(record["config"]["factors"])
    curves = [c for c in curves if len(c) * record["config"]["curve_bin"] == longest]
    if not curves:
        return None
    return [sum(values) / len(curves) for values in zip(*curves)]


# ---- chapter 9: position probes and the first token (the "nope" preset) --------------------------------

def probe_table(record: dict, part: str = "trained", probe: str = "linear", target: str = "position") -> dict:
    """``{method: [(mean, low, high) per layer]}``: the 95% t-interval over seeds of the held-out probe R²
    (``part`` ``"trained"`` or ``"untrained"``, ``probe`` ``"linear"`` or ``"mlp"``, ``target`` a key of
    ``posenc.probes.TARGETS``) at each layer, layer 0 being the embeddings. The upper end is cut at 1, the
    ceiling of R² (a held-out R² has no floor: it is negative for a probe worse than the mean)."""
    out = {}
    for method in record["config"]["methods"]:
        runs = [run for run in seed_runs(record) if run["method"] == method and "probes" in run]
        if runs:
            layers = zip(*(run["probes"][part][target][probe] for run in runs))
            out[method] = [(mean, low, min(high, 1.0)) for mean, low, high in map(t_interval, map(list, layers))]
    return out


def probe_gain(record: dict, method: str, probe: str = "linear", target: str = "position") -> list:
    """Per layer, the 95% t-interval of the per-seed R² of the trained model minus that of the same model
    before training (the untrained control, same seed): what training added."""
    runs = [run for run in seed_runs(record) if run["method"] == method and "probes" in run]
    out = []
    for layer in range(len(runs[0]["probes"]["trained"][target][probe])):
        trained = {run["seed"]: run["probes"]["trained"][target][probe][layer] for run in runs}
        untrained = {run["seed"]: run["probes"]["untrained"][target][probe][layer] for run in runs}
        out.append(paired_interval(trained, untrained))
    return out


def first_token_ratios(record: dict, method: str, part: str = "first_token_ratio") -> list[list[list[float]]]:
    """``[layer][head]`` -> the per-seed first-token ratios (``probes.first_token_ratio``: 1 for even
    attention, far above 1 for a sink), in seed order; ``part="untrained_first_token_ratio"`` for the
    models before training."""
    runs = sorted((run for run in seed_runs(record) if run["method"] == method and "probes" in run),
                  key=lambda run: run["seed"])
    layers = runs[0]["probes"][part]
    return [[[run["probes"][part][layer][head] for run in runs] for head in range(len(layers[layer]))]
            for layer in range(len(layers))]


def sink_head_counts(record: dict, method: str, threshold: float = 10.0,
                     part: str = "first_token_ratio") -> list[list[int]]:
    """``[layer][seed]``: how many heads of each layer have a first-token ratio above ``threshold``, per
    seed (in seed order). Heads of a NoPE or RoPE layer are built alike, so head h of one seed has nothing
    in common with head h of another: a count per seed compares models, a range per head index does not
    (ALiBi's heads differ by slope, so for ALiBi the head index does mean the same head)."""
    return [[sum(head[seed] > threshold for head in heads) for seed in range(len(heads[0]))]
            for heads in first_token_ratios(record, method, part)]


def bos_dependence(record: dict) -> dict:
    """``{method: (mean, low, high)}``: the 95% t-interval over seeds of the per cent change in perplexity
    at L when the BOS token is left out (``100 * (without / with - 1)``)."""
    L, out = str(record["config"]["train_len"]), {}
    for method in record["config"]["methods"]:
        runs = [run for run in seed_runs(record) if run["method"] == method and "probes" in run]
        if runs:
            out[method] = t_interval([100 * (run["probes"]["perplexity_without_bos"]
                                             / run["perplexity"][L]["perplexity"] - 1) for run in runs])
    return out


def bos_stream_table(record: dict) -> dict:
    """``{method: {reading: (mean, low, high)}}``: the 95% t-interval over seeds of each ``bos_stream``
    reading's perplexity beyond L (``exp`` of the mean loss per token)."""
    out = {}
    for method in record["config"]["methods"]:
        runs = [run for run in seed_runs(record) if run["method"] == method and "stream" in run.get("probes", {})]
        if runs:
            out[method] = {reading: t_interval([math.exp(run["probes"]["stream"][reading]) for run in runs])
                           for reading in runs[0]["probes"]["stream"]}
    return out


def bos_stream_paired(record: dict, method: str, a: str, b: str) -> tuple[float, float, float]:
    """95% t-interval over seeds of the per cent difference in perplexity beyond L between two
    ``bos_stream`` readings of the same model on the same streams, ``100 * (a / b - 1)``."""
    runs = [run for run in seed_runs(record) if run["method"] == method and "stream" in run.get("probes", {})]
    stream = {run["seed"]: run["probes"]["stream"] for run in runs}
    return t_interval([100 * (math.exp(s[a] - s[b]) - 1) for s in stream.values()])


# ---- chapter 15: the families' plans by source distance (the "hybrid" preset) ---------------------------

def with_references(record: dict, references: dict, methods) -> dict:
    """``record`` with the reported runs of ``methods`` from ``references`` (a record of the same mixture,
    batches and learning rate, e.g. the "nope" preset's RoPE, NoPE and ALiBi beside the "hybrid" preset),
    so that the readers pair them by seed. Raises ``ValueError`` if the two differ in anything but their
    methods and readings."""
    readings = ("methods", "lr_grid", "position_probes", "distance_edges", "seeds")
    differ = sorted(key for key in set(record["config"]) | set(references["config"]) if key not in readings
                    and record["config"].get(key) != references["config"].get(key))
    if differ:
        raise ValueError(f"the records differ in {differ}: their runs do not pair")
    chosen = [run for run in seed_runs(references) if run["method"] in methods]
    if any(run["lr"] not in lr_grid(record["config"], run["method"]) for run in chosen):
        raise ValueError("a reference run's learning rate is not in record's lr_grid")
    config = dict(record["config"], methods=[*methods, *record["config"]["methods"]])
    return dict(record, config=config, runs=[*chosen, *record["runs"]])


def distance_table(record: dict, measure: str = "token_accuracy") -> dict:
    """``{method: {column: (mean, low, high) or None}}``: copy accuracy by source distance, the 95%
    t-interval over seeds (cut to [0, 1]). Columns: the bins of ``copy_by_distance`` within L
    (``"8-16"``...), then each length ``f * L`` beyond L (an int: the source between fL/2 and fL back)."""
    config, runs = record["config"], seed_runs(record)
    edges = config["distance_edges"]
    bins = [f"{low + (i > 0)}-{high}" for i, (low, high) in enumerate(zip(edges, edges[1:]))]
    beyond = [f * config["train_len"] for f in config["factors"][1:]]
    out = {}
    for method in config["methods"]:
        out[method] = {column: rate_interval(over_seeds(record, "copy_by_distance", column, measure,
                                                         method=method, runs=runs)) for column in bins}
        out[method].update({n: rate_interval(over_seeds(record, "retrieval", "copy", str(n), measure,
                                                         method=method, runs=runs)) for n in beyond})
    return out


def distance_path(column) -> tuple:
    """Where a run keeps the copy accuracy of a ``distance_table`` column (for ``compare``)."""
    if isinstance(column, int):
        return ("retrieval", "copy", str(column), "token_accuracy")
    return ("copy_by_distance", column, "token_accuracy")
