"""The streaming study: attention sinks, StreamingLLM's rolling cache, and learned sinks (gpt-oss).

Three models are trained at length L with the same batches per seed: RoPE, RoPE with a learned sink
logit per head in every layer (gpt-oss's sinks), and ALiBi. Each is then measured two ways.

- **Where attention goes.** ``first_token_attention``: the mean weight each layer puts on the first
  token of windows of length L (a first-token attention sink takes far more than its share; a sink on
  another token, a delimiter say, would not show here).
- **A stream many times L.** Windows of ``stream_factor * L`` tokens are scored four ways, every token
  predicted once:
  ``dense`` (the model reads the whole stream at once; RoPE is then far outside its training lengths),
  ``recomputed`` (each token re-reads its last L tokens from scratch: sliding-window attention with
  re-computation, the expensive reference), ``rolling, sinks`` (a KV cache keeping the first
  ``sink_tokens`` tokens and the last ``L - sink_tokens``, positions assigned within the cache, as
  StreamingLLM does) and ``rolling, no sinks`` (the same cache keeping only the last L tokens: plain
  eviction). The per-position loss curves are kept too.

Learning rate: chapter 10's head-to-head study chose 6e-3 for RoPE and ALiBi at this size; all three
models use it.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from .. import data, evaluate
from ..plan import LayerSpec
from ..stats import paired_interval, t_interval
from .common import (_rounded_summary, make_model, next_run_by_seed, over_seeds, rank, rounded,
                     train_recorded, training_batches)

METHODS = ("rope", "rope with learned sinks", "alibi")
READINGS = ("dense", "recomputed", "rolling, sinks", "rolling, no sinks")

_COMMON = dict(methods=list(METHODS), decay="linear", weight_decay=0.01, passkey_rate=0.0, max_bytes=4_000_000,
               sink_tokens=4, lr=6e-3)
PRESETS = {
    "tiny": dict(_COMMON, dim=32, layers=2, heads=2, train_len=32, steps=6, batch=4, warmup=2, seeds=[0],
                 methods=["rope", "rope with learned sinks"], max_bytes=400_000, stream_factor=2, streams=2,
                 attention_windows=2, curve_bin=8),
    "full": dict(_COMMON, dim=96, layers=3, heads=4, train_len=128, steps=2000, batch=16, warmup=100,
                 seeds=[0, 1, 2, 3, 4], stream_factor=32, streams=16, attention_windows=64, curve_bin=128),
}


def build(method: str, config: dict):
    """The study's ``TransformerLM`` for ``method`` (one of ``METHODS``)."""
    if method == "rope with learned sinks":
        plan = [LayerSpec("rope", sinks=True)] * config["layers"]
        return make_model("none", config, data.VOCAB_SIZE, config["train_len"], plan=plan)
    return make_model(method, config, data.VOCAB_SIZE, config["train_len"])


next_run = next_run_by_seed  # seed by seed, every method


def stream_losses(model, validation: torch.Tensor, config: dict) -> dict[str, torch.Tensor]:
    """``{reading: [streams, stream_len] losses}`` for the four readings of the module docstring."""
    L, sinks = config["train_len"], config["sink_tokens"]
    length = L * config["stream_factor"]
    windows = dict(n_windows=config["streams"], span=length)
    return {
        "dense": evaluate.token_losses(model, validation, length, batch_size=4, **windows),
        "recomputed": evaluate.truncated_token_losses(model, validation, length, L, stride=1, batch_size=64,
                                                      **windows),
        "rolling, sinks": evaluate.streaming_token_losses(model, validation, length, sink_tokens=sinks,
                                                          window=L - sinks, **windows),
        "rolling, no sinks": evaluate.streaming_token_losses(model, validation, length, sink_tokens=0, window=L,
                                                             **windows),
    }


def run(config: dict, key: dict, checkpoint_dir: Path | None) -> dict:
    method, seed = key["method"], key["seed"]
    train_bytes, validation = data.stdlib_split(config["max_bytes"], corpus=config.get("corpus", "stdlib"))
    L = config["train_len"]
    torch.manual_seed(seed)
    model = build(method, config)
    start = time.perf_counter()
    result = train_recorded(model, training_batches(train_bytes, config, config["batch"], L), config,
                            lr=config["lr"], seed=seed)
    if rank() != 0:
        return result
    starts = evaluate.window_starts(validation.numel(), L, config["attention_windows"])
    tokens = validation[starts[:, None] + torch.arange(L)]
    result["first_token_attention"] = rounded(evaluate.first_token_attention(model, tokens))
    if method == "rope with learned sinks":
        sinks = [block.attn.sinks.detach().cpu() for block in model.blocks]
        result["sink_logits"] = [rounded(s.tolist(), 3) for s in sinks]
    losses = stream_losses(model, validation, config)
    result["stream"] = {
        name: {"summary": _rounded_summary(value, dict(config, factors=[config["stream_factor"]])),
               "curve": rounded(evaluate.position_curve(value, config["curve_bin"]))}
        for name, value in losses.items()}
    result["seconds"] = time.perf_counter() - start
    return result


# ---- reading a record (chapter 17): intervals over seeds, paired differences, mean curves ---------------
# (imported here so that the study code above stays as it was when the committed results were made)

def _check_choice(name: str, value: str, choices) -> str:
    if value not in choices:
        raise ValueError(f"{name} must be one of {tuple(choices)}, got {value!r}")
    return value


def uniform_first_token_share(train_len: int, skip: int = 16) -> float:
    """What ``first_token_attention`` would read if every query spread its weight evenly: the mean of
    ``1 / (i + 1)`` over the query indices ``i = skip .. train_len - 1`` (query ``i`` sees ``i + 1``
    keys). A first token far above this is an attention sink; far below it, a token attention avoids."""
    if not 0 <= skip < train_len:
        raise ValueError(f"skip must be in [0, train_len={train_len}), got {skip}")
    return sum(1 / (i + 1) for i in range(skip, train_len)) / (train_len - skip)


def first_token_table(record: dict, methods=None, level: float = 0.95) -> dict:
    """``{method: [(mean, low, high) per layer]}``: the t-interval over seeds of the attention weight on
    the first token, layer by layer (``first_token_attention`` of every run)."""
    out = {}
    for method in methods or record["config"]["methods"]:
        runs = [run for run in record["runs"] if run["method"] == method]
        if not runs:
            raise ValueError(f"no run of method {method!r}")
        layers = len(runs[0]["first_token_attention"])
        out[method] = [t_interval([run["first_token_attention"][layer] for run in runs], level)
                       for layer in range(layers)]
    return out


def sink_logit_table(record: dict, method: str = "rope with learned sinks", level: float = 0.95) -> list:
    """``[(mean, low, high) per layer]``: each seed's mean learned sink logit over the heads of a layer,
    then the t-interval of that over seeds."""
    runs = [run for run in record["runs"] if run["method"] == method and run.get("sink_logits")]
    if not runs:
        raise ValueError(f"no run of method {method!r} has sink_logits")
    layers = len(runs[0]["sink_logits"])
    return [t_interval([sum(run["sink_logits"][layer]) / len(run["sink_logits"][layer]) for run in runs],
                       level) for layer in range(layers)]


def stream_perplexities(record: dict, method: str, reading: str) -> dict:
    """``{seed: perplexity}`` of ``method`` read as ``reading`` (one of ``READINGS``) over the streams."""
    _check_choice("reading", reading, READINGS)
    return over_seeds(record, "stream", reading, "summary", "perplexity", method=method)


def stream_table(record: dict, methods=None, readings=READINGS, level: float = 0.95) -> dict:
    """``{method: {reading: (mean, low, high)}}``: the t-interval over seeds of each method's stream
    perplexity in each reading."""
    out = {}
    for method in methods or record["config"]["methods"]:
        out[method] = {}
        for reading in readings:
            values = stream_perplexities(record, method, reading)
            if not values:
                raise ValueError(f"no run of method {method!r} has the reading {reading!r}")
            out[method][reading] = t_interval(list(values.values()), level)
    return out


def paired(record: dict, a: tuple[str, str], b: tuple[str, str], *, relative: bool = False,
           level: float = 0.95) -> tuple[float, float, float]:
    """t-interval over seeds of the per-seed difference ``a - b`` of stream perplexities, ``a`` and
    ``b`` each ``(method, reading)``; with ``relative``, of ``100 * (a / b - 1)`` (per cent). Every
    method sees the same batches for a seed, and every reading scores the same streams, so the seed
    pairs them."""
    first, second = stream_perplexities(record, *a), stream_perplexities(record, *b)
    if relative:
        second = {seed: value for seed, value in second.items() if seed in first}
        first = {seed: 100 * (value / second[seed] - 1) for seed, value in first.items() if seed in second}
        second = {seed: 0.0 for seed in first}
    return paired_interval(first, second, level)


def mean_curve(record: dict, method: str, reading: str) -> list[float]:
    """The per-position loss curve (nats, bins of ``curve_bin`` tokens) of ``method`` read as
    ``reading``, averaged over seeds."""
    _check_choice("reading", reading, READINGS)
    curves = [run["stream"][reading]["curve"] for run in record["runs"]
              if run["method"] == method and reading in run.get("stream", {})]
    if not curves:
        raise ValueError(f"no run of method {method!r} has a curve for {reading!r}")
    return [sum(values) / len(curves) for values in zip(*curves)]
