"""The book's measured studies, as a command-line tool that writes JSON.

    python -m posenc.experiments context_extension --preset full --out ce.json --resume --threads 1
    python -m posenc.experiments head_to_head --preset ci --out h.json
    python -m posenc.experiments head_to_head --preset gpu --out h_gpu.json --resume   # on a CUDA device
    python -m posenc.experiments context_extension --preset full --seeds 3 4 --out part2.json
    python -m posenc.experiments merge part1.json part2.json --out ce.json
    torchrun --nproc_per_node=2 -m posenc.experiments head_to_head --preset tiny --out /tmp/h.json

The studies live in ``posenc.studies`` (one module each: ``context_extension`` for chapter 7,
``context_use`` and ``head_to_head`` for chapter 10, ``length_generalisation`` for chapter 11...). Presets: ``tiny`` (tests), ``ci`` (a
chapter's live run), ``full`` (the committed results; hours on a CPU) and ``gpu`` (10x or more the full
scale, the same code on a CUDA device).

Every result file records the configuration, the runs, the corpus (Python version, file lists and
SHA-256 of the training and validation bytes), package versions, hardware and wall time, and is
rewritten after each finished run, so ``--resume`` continues an interrupted study where it stopped.
Under ``torchrun`` every process trains (DistributedDataParallel, gloo on CPU, nccl on GPU) and process
0 evaluates, writes, and shares each run with the others.

The chapters load the committed records with ``load_result`` and read them with each study's readers
(``table``, ``paired``) and, from here, ``over_seeds``, ``seed_interval``, ``paired_seed_interval`` and ``format_interval``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shlex
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from . import __version__, data, studies
from .studies.common import (format_interval, load_checkpoint, make_model, over_seeds, paired_seed_interval,
                             rank as _rank, save_checkpoint, seed_interval)
from .train import default_device

STUDIES = studies.STUDIES
# Each preset fixes everything about a study except the seeds' outcomes.
PRESETS = {name: study.PRESETS for name, study in STUDIES.items()}


def same_config(previous: dict, config: dict) -> bool:
    """Whether a result file's ``previous`` configuration equals ``config`` (``--resume`` refuses to
    continue a study with different settings)."""
    return previous == config


def code_version() -> dict:
    """The commit of the posenc checkout that runs (``git rev-parse HEAD``) and whether its tracked files
    differ from it (``dirty``); ``{"commit": None}`` when posenc is not run from a git checkout."""
    import subprocess

    root = Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                                check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, check=True).stdout.strip() != ""
    except (OSError, subprocess.CalledProcessError):
        return {"commit": None}
    return {"commit": commit, "dirty": dirty}


def environment() -> dict:
    """Where and with what a result was produced (``code``: the commit, see ``code_version``)."""
    return {
        "posenc": __version__, "code": code_version(), "torch": torch.__version__, "python": platform.python_version(),
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
              "wall_seconds": 0.0, "command": "python -m posenc.experiments " + shlex.join(sys.argv[1:])}
    if "max_bytes" in config:
        record["corpus"] = data.corpus_fingerprint(config["max_bytes"], 0.1, config.get("corpus", "stdlib"))
    if resume and out.exists():
        previous = json.loads(out.read_text())
        if not same_config(previous.get("config", {}), config):
            raise ValueError(f"{out} was written with a different configuration; remove it or drop --resume")
        record["runs"], record["wall_seconds"] = previous["runs"], previous["wall_seconds"]
        if record["runs"]:
            log(f"{study}/{preset}: {len(record['runs'])} runs already done, skipped")
    while (key := module.next_run(config, record["runs"])) is not None:
        busy = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
        if busy > (os.cpu_count() or 1):
            log(f"warning: load average {busy:.1f} on {os.cpu_count()} cores; other processes will slow this run "
                "(the first head-to-head runs took 1 s a step for 0.1 s of work this way)")
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
    """One record from parts of the same study run separately (``--seeds`` or ``--methods``, say, in
    several processes or on several machines): the configurations must be equal except for ``seeds`` and
    ``methods``, and no run may appear twice. The runs are joined in seed order, ``seeds`` becomes the
    seeds that have runs and ``methods`` the methods (in the preset's order), wall times are added, and
    each part's command, environment and seeds are kept under ``"parts"``."""
    if len(records) < 2:
        raise ValueError("merge needs at least two records")
    first = records[0]
    for other in records[1:]:
        if (other["study"], other["preset"]) != (first["study"], first["preset"]):
            raise ValueError("records come from different studies or presets")
        if {k: v for k, v in other["config"].items() if k not in ("seeds", "methods")} != \
                {k: v for k, v in first["config"].items() if k not in ("seeds", "methods")}:
            raise ValueError("records were written with different configurations")
        if other.get("corpus") != first.get("corpus"):
            raise ValueError("records were written from different corpora")
    runs = sorted((run for record in records for run in record["runs"]), key=lambda run: run["seed"])
    keys = [tuple((k, run[k]) for k in ("task", "method", "seed", "lr") if k in run) for run in runs]
    if len(set(keys)) != len(keys):
        raise ValueError("records share runs (the same task, method, seed and learning rate)")
    seeds = sorted({run["seed"] for run in runs})
    config = {**first["config"], "seeds": seeds}
    if "methods" in first["config"]:
        present = {run["method"] for run in runs}
        preset_order = PRESETS.get(first["study"], {}).get(first["preset"], {}).get("methods", [])
        listed = [m for record in records for m in record["config"]["methods"]]
        config["methods"] = [m for m in dict.fromkeys([*preset_order, *listed]) if m in present]
    return {**first, "config": config, "runs": runs,
            "wall_seconds": sum(record["wall_seconds"] for record in records),
            "command": " + ".join(record["command"] for record in records),
            "parts": [{"command": record["command"], "environment": record["environment"],
                       "wall_seconds": record["wall_seconds"],
                       "seeds": sorted({run["seed"] for run in record["runs"]})}
                      for record in records]}


def command_line(record: dict, methods=None) -> str:
    """The command that produced a result record, as ``python -m posenc.experiments ...`` (records
    written by running the file directly store its path instead).

    Method names with spaces (``--methods "local RoPE only"``) are quoted for a shell; records written
    before the command was stored quoted get the quotes back from ``methods`` (default: the record's
    ``config["methods"]``), so the printed command runs as shown.
    """
    command = record["command"]
    for marker in ("posenc.experiments", "experiments.py"):
        if marker in command:
            command = command.split(marker, 1)[1]
            break
    names = record.get("config", {}).get("methods", []) if methods is None else methods
    for name in sorted((n for n in names if n != shlex.quote(n)), key=len, reverse=True):
        if shlex.quote(name) not in command:
            command = command.replace(f" {name}", f" {shlex.quote(name)}")
    return "python -m posenc.experiments " + command.strip()


def load_result(name: str) -> dict:
    """The committed result record ``posenc/results/<name>.json`` (shipped with the package)."""
    from importlib import resources
    path = resources.files("posenc").joinpath(f"results/{name}.json")
    if not path.is_file():
        names = sorted(p.name[:-5] for p in resources.files("posenc").joinpath("results").iterdir())
        raise ValueError(f"name must be a committed result, one of {names}, got {name!r}")
    return json.loads(path.read_text())


def bits_per_byte(perplexity: float) -> float:
    """Bits per byte of a byte-level perplexity: ``log2(perplexity)`` (perplexity = 2 ** bits)."""
    if not perplexity >= 1:
        raise ValueError(f"perplexity must be >= 1, got {perplexity}")
    return math.log2(perplexity)


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
    presets = sorted({name for study in STUDIES.values() for name in study.PRESETS})
    parser.add_argument("--preset", default="ci", choices=presets,
                        help="a preset of the study (run_study checks that the study has it)")
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
