"""The book's measured studies, as a command-line tool that writes JSON.

    python -m posenc.experiments head_to_head --preset ci --out results/head_to_head_ci.json
    python -m posenc.experiments length_generalisation --preset full --out results/lg.json --resume
    python -m posenc.experiments context_extension --preset full --out results/ce.json
    torchrun --nproc_per_node=2 -m posenc.experiments head_to_head --preset tiny --out /tmp/h.json

Every result file records the configuration, seeds, package versions, hardware and wall time, and is
rewritten after each finished run, so ``--resume`` continues an interrupted study where it stopped.
Under ``torchrun`` every process trains (DistributedDataParallel, gloo on CPU, nccl on GPU) and process
0 evaluates and writes.

The chapters read the records with ``summarise`` (perplexity per method and length, mean and standard
deviation over seeds; ``bits=True`` for bits per byte), ``task_table`` (the synthetic tasks) and
``print_table`` / ``print_task_table``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from . import __version__, data
from .attention import POSITION_METHODS
from .model import TransformerLM
from .train import TrainConfig, default_device, perplexity, task_accuracy, train_model

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


def same_config(study: str, previous: dict, config: dict) -> bool:
    """Whether a result file's ``previous`` configuration equals ``config``, counting a key listed in
    ``RECORDED_LATER`` that ``previous`` lacks as the value the code used before it was recorded."""
    filled = dict(previous)
    for key, value_then in RECORDED_LATER.get(study, {}).items():
        if key not in filled and key in config:
            filled[key] = value_then(previous)
    return filled == config


def environment() -> dict:
    """Where and with what a result was produced."""
    return {
        "posenc": __version__, "torch": torch.__version__, "python": platform.python_version(),
        "platform": platform.platform(), "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
        "device": str(default_device()),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "world_size": dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1,
    }


def make_model(method: str, config: dict, vocab_size: int, max_len: int) -> TransformerLM:
    return TransformerLM(vocab_size, config["dim"], config["layers"], config["heads"], position=method,
                         max_len=max_len)


def save_checkpoint(model: torch.nn.Module, path: Path, meta: dict) -> None:
    """Weights and plain metadata only, loadable with ``torch.load(path, weights_only=True)``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"state_dict": model.state_dict(), "meta": meta}, path)


def load_checkpoint(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=True)


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


STUDIES = {"head_to_head": run_head_to_head, "length_generalisation": run_length_generalisation,
           "context_extension": run_context_extension}


def _rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def run_study(study: str, preset: str, out: Path, *, resume: bool = False, checkpoint_dir: Path | None = None,
              methods: list[str] | None = None, log=print) -> dict:
    """Run (or continue) a study and write its JSON to ``out`` after every finished run."""
    if study not in STUDIES:
        raise ValueError(f"study must be one of {sorted(STUDIES)}, got {study!r}")
    if preset not in PRESETS[study]:
        raise ValueError(f"preset must be one of {sorted(PRESETS[study])}, got {preset!r}")
    config = dict(PRESETS[study][preset])
    if methods:
        config["methods"] = methods
    record = {"study": study, "preset": preset, "config": config, "environment": environment(), "runs": [],
              "wall_seconds": 0.0, "command": "python -m posenc.experiments " + " ".join(sys.argv[1:])}
    if resume and out.exists():
        previous = json.loads(out.read_text())
        if not same_config(study, previous.get("config", {}), config):
            raise ValueError(f"{out} was written with a different configuration; remove it or drop --resume")
        record["runs"], record["wall_seconds"] = previous["runs"], previous["wall_seconds"]
    done = {(run["method"], run["seed"]) for run in record["runs"]}
    for method in config["methods"]:
        for seed in config["seeds"]:
            if (method, seed) in done:
                log(f"{study}/{preset}: {method} seed {seed} already done, skipped")
                continue
            start = time.perf_counter()
            run = STUDIES[study](config, method, seed, checkpoint_dir)
            record["wall_seconds"] += time.perf_counter() - start
            record["runs"].append(run)
            if _rank() == 0:
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_text(json.dumps(record, indent=1))
                log(f"{study}/{preset}: {method} seed {seed} done in {time.perf_counter() - start:.0f} s")
    return record


def command_line(record: dict) -> str:
    """The command that produced a result record, as ``python -m posenc.experiments ...`` (records
    written by running the file directly store its path instead)."""
    command = record["command"]
    for marker in ("posenc.experiments", "experiments.py"):
        if marker in command:
            command = command.split(marker, 1)[1]
            break
    return "python -m posenc.experiments " + command.strip()


def bits_per_byte(perplexity: float) -> float:
    """Bits per byte of a byte-level perplexity: ``log2(perplexity)`` (perplexity = 2 ** bits)."""
    if not perplexity >= 1:
        raise ValueError(f"perplexity must be >= 1, got {perplexity}")
    return math.log2(perplexity)


def _mean_and_spread(values: list) -> tuple[float, float] | None:
    """(mean, sample standard deviation) over seeds; spread 0.0 for one seed; None if any is None."""
    if any(value is None for value in values):
        return None  # the method cannot run there (a learned table beyond its rows)
    values = [float(value) for value in values]
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return statistics.fmean(values), spread


def summarise(record: dict, *, bits: bool = False) -> dict[str, dict[int, tuple[float, float] | None]]:
    """A head_to_head record as ``{method: {length: (mean, std) or None}}`` over its seeds.

    ``std`` is the sample standard deviation over seeds (0.0 for one seed); ``None`` marks a length the
    method cannot run at. With ``bits=True`` each run's perplexity is first converted to bits per byte.
    Methods and lengths keep the order of the record.
    """
    by_method: dict[str, dict[int, list]] = {}
    for run in record["runs"]:
        lengths = by_method.setdefault(run["method"], {})
        for length, value in run["perplexity"].items():
            if bits and value is not None:
                value = bits_per_byte(value)
            lengths.setdefault(int(length), []).append(value)
    return {method: {length: _mean_and_spread(values) for length, values in sorted(lengths.items())}
            for method, lengths in by_method.items()}


def task_table(record: dict, metric: str, task: str) -> dict[str, dict[int, tuple[float, float] | None]]:
    """A length_generalisation record as ``{method: {n: (mean, std) or None}}`` for one ``metric``
    (``"exact_match"`` or ``"token_accuracy"``) and ``task``, over its seeds (as ``summarise``)."""
    by_method: dict[str, dict[int, list]] = {}
    for run in record["runs"]:
        if metric not in run or task not in run[metric]:
            raise ValueError(f"the record has no {metric!r} for task {task!r}")
        lengths = by_method.setdefault(run["method"], {})
        for n, value in run[metric][task].items():
            lengths.setdefault(int(n), []).append(value)
    return {method: {n: _mean_and_spread(values) for n, values in sorted(lengths.items())}
            for method, lengths in by_method.items()}


def format_table(table: dict, train_len: int, *, unit: str = "L", digits: int = 2,
                 missing: str = "cannot run") -> str:
    """A ``summarise`` or ``task_table`` table as text: one row per method, one column per length,
    headed ``kL = n`` (``unit="L"``) or ``n = n (k.kN)`` (``unit="N"``), cells ``mean +- std``."""
    lengths = sorted({length for row in table.values() for length in row})
    if unit == "L":
        header = [f"{n // train_len}L = {n}" for n in lengths]
    elif unit == "N":
        header = [f"n = {n:>2} ({n / train_len:.1f}N)" for n in lengths]
    else:
        raise ValueError(f"unit must be 'L' or 'N', got {unit!r}")
    width = max(15, *(len(h) for h in header))
    lines = [f"{'method':>10} | " + " | ".join(f"{h:>{width}}" for h in header)]
    for method, row in table.items():
        cells = [missing if row.get(n) is None else f"{row[n][0]:.{digits}f} +- {row[n][1]:.{digits}f}"
                 for n in lengths]
        lines.append(f"{method:>10} | " + " | ".join(f"{c:>{width}}" for c in cells))
    return "\n".join(lines)


def print_table(table: dict, train_len: int, **options) -> None:
    """Print a ``summarise`` table with columns headed by multiples of the training length."""
    print(format_table(table, train_len, unit="L", **options))


def print_task_table(table: dict, train_max: int, **options) -> None:
    """Print a ``task_table`` with columns headed by input length and its multiple of ``train_max``."""
    print(format_table(table, train_max, unit="N", **dict({"missing": "--"}, **options)))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m posenc.experiments", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("study", choices=sorted(STUDIES))
    parser.add_argument("--preset", default="ci", choices=["tiny", "ci", "full"])
    parser.add_argument("--out", type=Path, required=True, help="JSON file to write")
    parser.add_argument("--resume", action="store_true", help="skip runs already in --out")
    parser.add_argument("--checkpoints", type=Path, default=None, help="folder for model weights")
    parser.add_argument("--methods", nargs="*", choices=list(POSITION_METHODS), default=None)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        dist.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")
        if torch.cuda.is_available():
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    try:
        run_study(args.study, args.preset, args.out, resume=args.resume, checkpoint_dir=args.checkpoints,
                  methods=args.methods, log=print if _rank() == 0 else (lambda *a: None))
    finally:
        if distributed:
            dist.destroy_process_group()


if __name__ == "__main__":
    main()
