"""The book's measured studies, as a command-line tool that writes JSON.

    python -m posenc.experiments context_extension --preset full --out ce.json --resume --threads 1
    python -m posenc.experiments head_to_head --preset ci --out h.json
    python -m posenc.experiments head_to_head --preset gpu --out h_gpu.json --resume   # on a CUDA device
    python -m posenc.experiments context_extension --preset full --seeds 3 4 --out part2.json
    python -m posenc.experiments merge part1.json part2.json --out ce.json
    torchrun --nproc_per_node=2 -m posenc.experiments head_to_head --preset tiny --out /tmp/h.json

The studies live in ``posenc.studies`` (one module each: ``context_extension`` for chapter 7,
``head_to_head`` and ``length_generalisation`` for chapter 10; the ``*_v1`` studies are the book's
first versions, kept until those chapters are rewritten). Presets: ``tiny`` (tests), ``ci`` (a
chapter's live run), ``full`` (the committed results; hours on a CPU) and ``gpu`` (10x or more the full
scale, the same code on a CUDA device).

Every result file records the configuration, the runs, the corpus (Python version, file lists and
SHA-256 of the training and validation bytes), package versions, hardware and wall time, and is
rewritten after each finished run, so ``--resume`` continues an interrupted study where it stopped.
Under ``torchrun`` every process trains (DistributedDataParallel, gloo on CPU, nccl on GPU) and process
0 evaluates, writes, and shares each run with the others.

The chapters read the v1 records with ``summarise`` (perplexity per method and length, mean and
standard deviation over seeds; ``bits=True`` for bits per byte), ``task_table`` (the synthetic tasks)
and ``print_table`` / ``print_task_table``.
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

from . import __version__, data, studies
from .studies.common import (format_interval, load_checkpoint, make_model, over_seeds, paired_seed_interval,
                             rank as _rank, save_checkpoint, seed_interval)
from .studies.v1 import CONTEXT_RECIPES, rope_recipe
from .train import default_device

STUDIES = studies.STUDIES
# Each preset fixes everything about a study except the seeds' outcomes.
PRESETS = {name: study.PRESETS for name, study in STUDIES.items()}


def same_config(study: str, previous: dict, config: dict) -> bool:
    """Whether a result file's ``previous`` configuration equals ``config``, counting a key listed in the
    study's ``RECORDED_LATER`` (settings recorded only in later versions, as functions of the rest of
    the configuration) that ``previous`` lacks as the value the code used before it was recorded."""
    filled = dict(previous)
    for key, value_then in getattr(STUDIES[study], "RECORDED_LATER", {}).items():
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


def _describe(key: dict) -> str:
    return " ".join(f"{name} {value}" for name, value in key.items())


def run_study(study: str, preset: str, out: Path, *, resume: bool = False, checkpoint_dir: Path | None = None,
              methods: list[str] | None = None, seeds: list[int] | None = None, log=print) -> dict:
    """Run (or continue) a study and write its JSON to ``out`` after every finished run.

    The study module decides the runs (``next_run`` looks at the runs done so far, so a learning-rate
    sweep can pick its winner before the remaining seeds); this function records them.
    """
    if study not in STUDIES:
        raise ValueError(f"study must be one of {sorted(STUDIES)}, got {study!r}")
    if preset not in PRESETS[study]:
        raise ValueError(f"preset must be one of {sorted(PRESETS[study])}, got {preset!r}")
    module = STUDIES[study]
    config = dict(PRESETS[study][preset])
    if methods:
        known = {method for settings in PRESETS[study].values() for method in settings.get("methods", [])}
        unknown = [method for method in methods if method not in known]
        if unknown:
            raise ValueError(f"methods {unknown} are not in study {study!r}; known: {sorted(known)}")
        config["methods"] = methods
    if seeds:
        config["seeds"] = seeds  # a part of the study, to be joined with ``merge_records``
    record = {"study": study, "preset": preset, "config": config, "environment": environment(), "runs": [],
              "wall_seconds": 0.0, "command": "python -m posenc.experiments " + " ".join(sys.argv[1:])}
    if "max_bytes" in config:
        record["corpus"] = data.corpus_fingerprint(config["max_bytes"], 0.1)
    if resume and out.exists():
        previous = json.loads(out.read_text())
        if not same_config(study, previous.get("config", {}), config):
            raise ValueError(f"{out} was written with a different configuration; remove it or drop --resume")
        record["runs"], record["wall_seconds"] = previous["runs"], previous["wall_seconds"]
        if record["runs"]:
            log(f"{study}/{preset}: {len(record['runs'])} runs already done, skipped")
    while (key := module.next_run(config, record["runs"])) is not None:
        start = time.perf_counter()
        run = {**key, **module.run(config, key, checkpoint_dir)}
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            shared = [run]  # process 0's evaluated run, so every process plans the same next run
            dist.broadcast_object_list(shared, src=0)
            run = shared[0]
        record["wall_seconds"] += time.perf_counter() - start
        record["runs"].append(run)
        if _rank() == 0:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(record, indent=1))
            log(f"{study}/{preset}: {_describe(key)} done in {time.perf_counter() - start:.0f} s")
    return record


def merge_records(records: list[dict]) -> dict:
    """One record from parts of the same study run separately (``--seeds``, say, in two processes or on
    two machines): the configurations must be equal except for ``seeds``, and no run may appear twice.
    The runs are joined in seed order, ``seeds`` becomes the seeds that have runs, wall times are
    added, and each part's command, environment and seeds are kept under ``"parts"``."""
    if len(records) < 2:
        raise ValueError("merge needs at least two records")
    first = records[0]
    for other in records[1:]:
        if (other["study"], other["preset"]) != (first["study"], first["preset"]):
            raise ValueError("records come from different studies or presets")
        if {k: v for k, v in other["config"].items() if k != "seeds"} != \
                {k: v for k, v in first["config"].items() if k != "seeds"}:
            raise ValueError("records were written with different configurations")
        if other.get("corpus") != first.get("corpus"):
            raise ValueError("records were written from different corpora")
    runs = sorted((run for record in records for run in record["runs"]), key=lambda run: run["seed"])
    keys = [tuple((k, run[k]) for k in ("method", "seed", "lr") if k in run) for run in runs]
    if len(set(keys)) != len(keys):
        raise ValueError("records share runs (the same method, seed and learning rate)")
    seeds = sorted({run["seed"] for run in runs})
    return {**first, "config": {**first["config"], "seeds": seeds}, "runs": runs,
            "wall_seconds": sum(record["wall_seconds"] for record in records),
            "command": " + ".join(record["command"] for record in records),
            "parts": [{"command": record["command"], "environment": record["environment"],
                       "wall_seconds": record["wall_seconds"],
                       "seeds": sorted({run["seed"] for run in record["runs"]})}
                      for record in records]}


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


def _merge_main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m posenc.experiments merge",
                                     description="Join parts of one study (see merge_records).")
    parser.add_argument("parts", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    merged = merge_records([json.loads(path.read_text()) for path in args.parts])
    args.out.write_text(json.dumps(merged, indent=1))
    print(f"{args.out}: {len(merged['runs'])} runs, seeds {merged['config']['seeds']}")


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["merge"]:
        return _merge_main(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m posenc.experiments", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("study", choices=sorted(STUDIES))
    parser.add_argument("--preset", default="ci", choices=["tiny", "ci", "full", "gpu"])
    parser.add_argument("--out", type=Path, required=True, help="JSON file to write")
    parser.add_argument("--resume", action="store_true", help="skip runs already in --out")
    parser.add_argument("--checkpoints", type=Path, default=None, help="folder for model weights")
    parser.add_argument("--methods", nargs="*", default=None,
                        help="run only these methods (any the study's presets name)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--seeds", nargs="*", type=int, default=None,
                        help="run only these seeds (join the parts with: merge A.json B.json --out C.json)")
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
                  methods=args.methods, seeds=args.seeds, log=print if _rank() == 0 else (lambda *a: None))
    finally:
        if distributed:
            dist.destroy_process_group()


if __name__ == "__main__":
    main()
