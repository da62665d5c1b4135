"""Issue 28's diagnostic study: which layers solve the tasks that papers on position without an encoding use.

Every method (the encodings RoPE, ALiBi and none, and the layers of ``common.MIXER_METHODS``: FoX,
stick-breaking, CoPE, a decay layer, decay with one attention layer in four, attention without position
after a short convolution) trains a small byte model on each task of ``posenc.diagnostics`` alone, per seed
with the same batches, then is scored (teacher-forced argmax on the answers, ``evaluate.task_scores``):

- ``flip_flop``: at the training length with the training mix (the positive control: a method that does
  not pass it learned nothing to measure), then sparser (``sparse``: ignores at ``p_sparse``, so the last
  write lies further back, as in Liu et al.'s out-of-distribution test) and longer (2x, 4x).
- ``selective_copy``: at the training length, and longer (more noise between the same number of symbols).
- ``counting``: at the training length, and longer (more segments before the one asked about).

The chapter reads the accuracy per method with intervals over seeds; the learned gates (FoX's forget
gates, the decay layer's decays) are recorded as each head's median effective window, ``1 / (1 - gate)``
tokens, on flip-flop sequences.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from .. import diagnostics, evaluate
from ..decay import DecayLayer
from ..forgetting import ForgettingAttention
from .common import MIXER_METHODS, make_model, rank, rounded, train_recorded

TASKS = ("flip_flop", "selective_copy", "counting")
_COMMON = dict(methods=["rope", "alibi", "none", *MIXER_METHODS], tasks=list(TASKS), decay="linear",
               weight_decay=0.01, lr=1e-3, p_read=0.1, p_ignore=0.8, p_sparse=0.98, data=8, alphabet=16,
               count_alphabet=4)
PRESETS = {
    "tiny": dict(_COMMON, dim=32, layers=2, heads=2, train_len=33, factors=[1, 2], steps=6, batch=4, warmup=2,
                 seeds=[0], eval_rows=8, methods=["rope", "fox"], tasks=["flip_flop", "counting"]),
    "ci": dict(_COMMON, dim=64, layers=2, heads=4, train_len=65, factors=[1, 2], steps=800, batch=32, warmup=50,
               seeds=[0], eval_rows=256, methods=["rope", "fox", "decay"], tasks=["flip_flop"]),
    "full": dict(_COMMON, dim=64, layers=2, heads=4, train_len=65, factors=[1, 2, 4], steps=1500, batch=32,
                 warmup=100, seeds=[0, 1, 2, 3, 4], eval_rows=512),
}


def next_run(config: dict, runs: list[dict]) -> dict | None:
    """Seed by seed, task by task, every method."""
    done = {(run["task"], run["method"], run["seed"]) for run in runs}
    for seed in config["seeds"]:
        for task in config["tasks"]:
            for method in config["methods"]:
                if (task, method, seed) not in done:
                    return {"task": task, "method": method, "seed": seed}
    return None


def task_batch(config: dict, task: str, rows: int, length: int, generator, sparse: bool = False):
    """``(tokens, targets)`` of ``task`` at ``length`` (flip-flop needs an odd length: one less is used)."""
    if task == "flip_flop":
        p_ignore = config["p_sparse"] if sparse else config["p_ignore"]
        p_read = config["p_read"] * (1 - p_ignore) / (1 - config["p_ignore"])  # reads and writes keep their ratio
        return diagnostics.flip_flop(rows, length - 1 + length % 2, p_read=p_read, p_ignore=p_ignore,
                                     generator=generator)
    if task == "selective_copy":
        return diagnostics.selective_copy(rows, length, data=config["data"], alphabet=config["alphabet"],
                                          generator=generator)
    return diagnostics.counting(rows, length, alphabet=config["count_alphabet"], generator=generator)


def scores(model, config: dict, task: str) -> dict:
    """``{reading: token accuracy}``: ``"L"``, ``"2L"``... and, for flip-flop, ``"sparse"`` at L."""
    L, out = config["train_len"], {}
    readings = [(f"{f}L" if f > 1 else "L", f * L, False) for f in config["factors"]]
    if task == "flip_flop":
        readings.append(("sparse", L, True))
    for name, length, sparse in readings:
        generator = torch.Generator().manual_seed(10_000 + length + sparse)  # held out: not a training seed
        tokens, targets = task_batch(config, task, config["eval_rows"], length, generator, sparse)
        accuracy = evaluate.task_scores(model, tokens, targets)["token_accuracy"]
        out[name] = None if accuracy != accuracy else round(accuracy, 5)  # None: no answer to score (NaN)
    return out


@torch.no_grad()
def effective_windows(model, tokens: torch.Tensor) -> list[list[float]] | None:
    """Per layer with a forget gate or a decay, each head's median ``1 / (1 - gate)`` over the tokens of
    ``tokens`` (the number of tokens after which a constant gate would have kept ``1/e`` of a key's
    weight, roughly); ``None`` for a model without such layers."""
    model.eval()
    x, out = model.token_embedding(tokens), []
    for block in model.blocks:
        h = block.ln_attn(x)
        if block.conv is not None:
            h = block.conv(h)
        if isinstance(block.attn, (ForgettingAttention, DecayLayer)):
            gates = block.attn.forget_gates(h) if isinstance(block.attn, ForgettingAttention) else block.attn.decays(h)
            out.append(rounded((1 / (1 - gates.clamp(max=1 - 1e-6))).flatten(2).transpose(0, 1).flatten(1)
                               .median(-1).values.tolist(), 2))
        x = block(x)
    return out or None


def run(config: dict, key: dict, checkpoint_dir: Path | None) -> dict:
    task, method, seed, L = key["task"], key["method"], key["seed"], config["train_len"]
    torch.manual_seed(seed)
    model = make_model(method, config, 256, 8 * L)

    def batch_fn(generator):
        return task_batch(config, task, config["batch"], L, generator)

    result = train_recorded(model, batch_fn, config, lr=config["lr"], seed=seed)
    if rank() != 0:
        return result
    start = time.perf_counter()
    result["scores"] = scores(model, config, task)
    tokens, _ = task_batch(config, "flip_flop", 16, L, torch.Generator().manual_seed(1))
    windows = effective_windows(model, tokens)
    if windows is not None:
        result["effective_windows"] = windows
    result["evaluation_seconds"] = time.perf_counter() - start
    return result
