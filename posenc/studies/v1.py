"""The first versions of the book's studies (2025), kept so that the chapters written from them run.

Superseded by ``context_extension``, ``head_to_head`` and ``length_generalisation`` in this package,
which follow the book's measurement protocol; registered as ``*_v1`` and removed once chapters 7, 10 and
12 are rewritten from the new results.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from .. import data
from ..attention import POSITION_METHODS
from ..model import TransformerLM
from ..train import TrainConfig, perplexity, task_accuracy, train_model
from .common import make_model, rank as _rank, save_checkpoint
import json

# Each preset fixes everything about a study except the seeds' outcomes.
PRESETS = {
    "head_to_head": {
        "tiny": dict(dim=32, layers=1, heads=2, train_len=32, factors=[1, 2], steps=6, batch=4, seeds=[0],
                     methods=["none", "rope"], max_bytes=400_000, eval_tokens=2048, warmup=2),
        "ci": dict(dim=64, layers=2, heads=4, train_len=64, factors=[1, 2, 4, 8], steps=100, batch=16,
                   seeds=[0, 1, 2], methods=list(POSITION_METHODS), max_bytes=2_000_000, eval_tokens=8192,
                   warmup=10),
        "full": dict(dim=96, layers=3, heads=4, train_len=128, factors=[1, 2, 4, 8, 16], steps=1000, batch=16,
                     seeds=[0, 1, 2], methods=list(POSITION_METHODS), max_bytes=4_000_000, eval_tokens=65536,
                     warmup=100),
    },
    "length_generalisation": {
        "tiny": dict(dim=32, layers=1, heads=2, train_max=4, test_lengths=[4, 8], steps=6, batch=8, seeds=[0],
                     methods=["none", "rope"], tasks=["copy"], warmup=2, lr=1e-3),
        "ci": dict(dim=64, layers=2, heads=4, train_max=8, test_lengths=[8, 12, 16, 24, 32], steps=1000, batch=32,
                   seeds=[0], methods=list(POSITION_METHODS), tasks=["copy"], warmup=100, lr=1e-3),
        "full": dict(dim=64, layers=2, heads=4, train_max=8, test_lengths=[8, 12, 16, 24, 32], steps=2500,
                     batch=32, seeds=[0, 1, 2], methods=list(POSITION_METHODS), tasks=["copy", "reverse"],
                     warmup=250, lr=1e-3),
    },
    # chapter 7: one RoPE model per seed, zero-shot context extension, then a short fine-tune at 2L
    "context_extension": {
        "tiny": dict(dim=32, layers=1, heads=2, train_len=16, steps=6, batch=4, seeds=[0], methods=["rope"],
                     max_bytes=400_000, eval_tokens=1024, warmup=2, factors=[2, 4],
                     fine_tune=["PI", "YaRN"], fine_tune_steps=4, fine_tune_batch=2, fine_tune_lr=1e-3,
                     fine_tune_warmup=1),
        "ci": dict(dim=96, layers=3, heads=4, train_len=128, steps=500, batch=16, seeds=[0], methods=["rope"],
                   max_bytes=4_000_000, eval_tokens=16384, warmup=50, factors=[2, 4],
                   fine_tune=["PI", "YaRN"], fine_tune_steps=150, fine_tune_batch=8, fine_tune_lr=1e-3,
                   fine_tune_warmup=10),
        "full": dict(dim=96, layers=3, heads=4, train_len=128, steps=500, batch=16, seeds=[0, 1, 2],
                     methods=["rope"], max_bytes=4_000_000, eval_tokens=16384, warmup=50, factors=[2, 4],
                     fine_tune=["PI", "YaRN"], fine_tune_steps=150, fine_tune_batch=8, fine_tune_lr=1e-3,
                     fine_tune_warmup=10),
    },
}

# Settings that were hard-coded before result files recorded them in ``config``, as functions of the
# rest of the configuration (the values the code used then). ``--resume`` fills a missing key with its
# value here, so a result written before the key existed (such as the committed chapter 7 study)
# still resumes.
RECORDED_LATER = {
    "context_extension": {"fine_tune_lr": lambda config: 1e-3,
                          "fine_tune_warmup": lambda config: max(1, config["fine_tune_steps"] // 15)},
}


def run_head_to_head(config: dict, method: str, seed: int, checkpoint_dir: Path | None) -> dict:
    """Train one byte-level LM at ``train_len``; perplexity on validation windows at each factor."""
    train_bytes, validation_bytes = data.stdlib_split(config["max_bytes"])
    torch.manual_seed(seed)
    model = make_model(method, config, data.VOCAB_SIZE, config["train_len"])
    train_config = TrainConfig(steps=config["steps"], warmup=config["warmup"], seed=seed,
                               log_every=max(1, config["steps"] // 20))

    def batch_fn(generator):
        return data.random_windows(train_bytes, config["batch"], config["train_len"], generator=generator)

    start = time.perf_counter()
    history = train_model(model, batch_fn, train_config)
    train_seconds = time.perf_counter() - start
    result = {"method": method, "seed": seed, "train_seconds": train_seconds, "history": history,
              "perplexity": {}}
    if _rank() == 0:
        for factor in config["factors"]:
            length = factor * config["train_len"]
            if method == "learned" and length > config["train_len"]:
                result["perplexity"][str(length)] = None  # no table rows beyond the training length
                continue
            windows = max(1, config["eval_tokens"] // length)
            result["perplexity"][str(length)] = perplexity(model, validation_bytes, length, max_windows=windows)
        if checkpoint_dir is not None:
            save_checkpoint(model, checkpoint_dir / f"head_to_head_{method}_seed{seed}.pt",
                            {"method": method, "seed": seed, "config": json.dumps(config)})
    return result


def run_length_generalisation(config: dict, method: str, seed: int, checkpoint_dir: Path | None) -> dict:
    """Train on copy/reverse with lengths 1..train_max; exact match and token accuracy at each test length."""
    result = {"method": method, "seed": seed, "exact_match": {}, "token_accuracy": {}, "train_seconds": 0.0}
    for task in config["tasks"]:
        torch.manual_seed(seed)
        model = make_model(method, config, data.TASK_VOCAB + 1, max_len=2 * config["train_max"] + 1)
        train_config = TrainConfig(steps=config["steps"], warmup=config["warmup"], seed=seed, lr=config["lr"],
                                   log_every=max(1, config["steps"] // 20))
        start = time.perf_counter()
        train_model(model, lambda g: data.task_batch(task, config["batch"], (1, config["train_max"]), generator=g),
                    train_config)
        result["train_seconds"] += time.perf_counter() - start
        exact, per_token = {}, {}
        if _rank() == 0:
            for n in config["test_lengths"]:
                if method == "learned" and n > config["train_max"]:  # beyond the learned table
                    exact[str(n)] = per_token[str(n)] = None
                    continue
                scores = task_accuracy(model, lambda g, n=n: data.task_batch(task, 64, n, generator=g))
                exact[str(n)], per_token[str(n)] = scores["exact_match"], scores["token_accuracy"]
        result["exact_match"][task], result["token_accuracy"][task] = exact, per_token
    return result


CONTEXT_RECIPES = ("none", "PI", "NTK-aware", "dynamic NTK", "YaRN", "Llama 3")


def rope_recipe(name: str, factor: float, original_length: int) -> dict | None:
    """The ``rope_scaling`` dict of a context-extension recipe (chapter 7) for a model trained at
    ``original_length``, stretched by ``factor``; ``None`` for no scaling."""
    original = {"original_max_position_embeddings": original_length}
    recipes = {"none": None,
               "PI": {"rope_type": "linear", "factor": factor},
               "NTK-aware": {"rope_type": "ntk", "factor": factor},
               "dynamic NTK": {"rope_type": "dynamic", "factor": factor, **original},
               "YaRN": {"rope_type": "yarn", "factor": factor, **original},
               "Llama 3": {"rope_type": "llama3", "factor": factor, "low_freq_factor": 1.0,
                           "high_freq_factor": 4.0, **original}}
    if name not in recipes:
        raise ValueError(f"recipe must be one of {list(recipes)}, got {name!r}")
    return recipes[name]


def run_context_extension(config: dict, method: str, seed: int, checkpoint_dir: Path | None) -> dict:
    """Train a RoPE LM at ``train_len``; zero-shot perplexity with every recipe at factor x L (and at L
    with the same scaling); then fine-tune with PI and YaRN at 2L and evaluate at L, 2L and 4L."""
    if method != "rope":
        raise ValueError(f"context_extension studies RoPE only, got method {method!r}")
    train_bytes, validation_bytes = data.stdlib_split(config["max_bytes"])
    L = config["train_len"]

    def build(scaling):
        torch.manual_seed(seed)
        return TransformerLM(data.VOCAB_SIZE, config["dim"], config["layers"], config["heads"], position="rope",
                             rope_scaling=scaling)

    def ppl(model, length):
        return perplexity(model, validation_bytes, length, max_windows=max(1, config["eval_tokens"] // length))

    base = build(None)
    start = time.perf_counter()
    train_model(base, lambda g: data.random_windows(train_bytes, config["batch"], L, generator=g),
                TrainConfig(steps=config["steps"], warmup=config["warmup"], seed=seed,
                            log_every=max(1, config["steps"] // 20)))
    weights = base.state_dict()
    result = {"method": method, "seed": seed, "zero_shot": {}, "fine_tuned": {}, "train_seconds": 0.0}

    def with_recipe(name, factor):
        model = build(rope_recipe(name, float(factor), L))
        model.load_state_dict(weights)
        return model.eval()

    for name in CONTEXT_RECIPES:
        scores = {}
        for factor in config["factors"]:
            model = with_recipe(name, factor)
            scores[f"{factor * L}"] = ppl(model, factor * L)
            scores[f"{L} with factor {factor}"] = ppl(model, L)
        result["zero_shot"][name] = scores
    for name in config["fine_tune"]:
        model = with_recipe(name, 2)
        train_model(model, lambda g: data.random_windows(train_bytes, config["fine_tune_batch"], 2 * L, generator=g),
                    TrainConfig(steps=config["fine_tune_steps"], warmup=config["fine_tune_warmup"],
                                lr=config["fine_tune_lr"], seed=seed + 5))
        result["fine_tuned"][name] = {str(n): ppl(model, n) for n in (L, 2 * L, 4 * L)}
    result["train_seconds"] = time.perf_counter() - start
    return result


class _Legacy:
    """A v1 runner behind the interface of the new study modules (``PRESETS``, ``next_run``, ``run``)."""

    def __init__(self, presets: dict, runner, recorded_later: dict | None = None):
        self.PRESETS, self._runner, self.RECORDED_LATER = presets, runner, recorded_later or {}

    @staticmethod
    def next_run(config: dict, runs: list[dict]) -> dict | None:
        done = {(run["method"], run["seed"]) for run in runs}
        for method in config["methods"]:
            for seed in config["seeds"]:
                if (method, seed) not in done:
                    return {"method": method, "seed": seed}
        return None

    def run(self, config: dict, key: dict, checkpoint_dir: Path | None) -> dict:
        return self._runner(config, key["method"], key["seed"], checkpoint_dir)


STUDIES = {
    "head_to_head_v1": _Legacy(PRESETS["head_to_head"], run_head_to_head),
    "length_generalisation_v1": _Legacy(PRESETS["length_generalisation"], run_length_generalisation),
    "context_extension_v1": _Legacy(PRESETS["context_extension"], run_context_extension,
                                    RECORDED_LATER["context_extension"]),
}
