"""Issue 28's diagnostic study: which layers solve the tasks that papers on position without an encoding use.

Every method (the encodings RoPE, ALiBi and none, and the layers of ``common.MIXER_METHODS``: FoX,
stick-breaking, CoPE, a decay layer, decay with one attention layer in four, attention without position
after a short convolution) trains a small byte model on each task of ``posenc.diagnostics`` alone, per seed
with the same batches, then is scored (teacher-forced argmax on the answers, ``evaluate.task_scores``):

- ``flip_flop``: at the training length with the training mix (the positive control: a method that does
  not pass it learned nothing to measure), then Liu et al.'s out-of-distribution mixes at L (``sparse``:
  ignores at ``p_sparse`` = 0.98, so the last write lies further back; ``dense``: at ``p_dense`` = 0.1)
  and longer (2x, 4x). ``answers`` records how many answers each reading scored.
- ``selective_copy``: at the training length, and longer (more noise between the same number of symbols).
- ``counting``: at the training length, and longer (more segments before the one asked about).

The chapter reads the accuracy per method with intervals over seeds; the learned gates (FoX's forget
gates, the decay layer's decays) are recorded per layer and head as their mean at each kind of
flip-flop token (``w``, ``r``, ``i`` and the bits): a head that finds the last write can close its gate
at writes and keep it open elsewhere.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from .. import diagnostics, evaluate
from ..stats import paired_family
from .common import (MIXER_METHODS, layer_log_gates, make_model, over_seeds, rank, rate_interval, rounded,
                     train_recorded)

TASKS = ("flip_flop", "selective_copy", "counting")
_COMMON = dict(methods=["rope", "alibi", "none", *MIXER_METHODS], tasks=list(TASKS), decay="linear",
               weight_decay=0.01, lr=1e-3, p_ignore=0.8, p_sparse=0.98, p_dense=0.1, data=8, alphabet=16,
               count_alphabet=4)
PRESETS = {
    "tiny": dict(_COMMON, dim=32, layers=2, heads=2, train_len=33, factors=[1, 2], steps=6, batch=4, warmup=2,
                 seeds=[0], eval_rows=8, methods=["rope", "fox"], tasks=["flip_flop", "counting"]),
    "ci": dict(_COMMON, dim=64, layers=2, heads=4, train_len=65, factors=[1, 2], steps=600, batch=32, warmup=50,
               seeds=[0], eval_rows=256, methods=["rope", "fox", "decay"], tasks=["flip_flop"]),
    "full": dict(_COMMON, dim=64, layers=2, heads=4, train_len=65, factors=[1, 2, 4], steps=1500, batch=32,
                 warmup=100, seeds=[0, 1, 2, 3, 4], eval_rows=512),
}
# review P6-m1: stick-breaking as the authors' released 3B model has it (the remainder dropped, not put on
# the query's own value), on the full preset's tasks and seeds
PRESETS["remainder-dropped"] = dict(PRESETS["full"], methods=["stick-breaking, remainder dropped"])


def next_run(config: dict, runs: list[dict]) -> dict | None:
    """Seed by seed, task by task, every method."""
    done = {(run["task"], run["method"], run["seed"]) for run in runs}
    for seed in config["seeds"]:
        for task in config["tasks"]:
            for method in config["methods"]:
                if (task, method, seed) not in done:
                    return {"task": task, "method": method, "seed": seed}
    return None


def task_batch(config: dict, task: str, rows: int, length: int, generator, mix: str = "train"):
    """``(tokens, targets)`` of ``task`` at ``length`` (flip-flop needs an odd length: one less is used;
    ``mix`` is its ignore rate: ``"train"``, ``"sparse"`` or ``"dense"``)."""
    if task == "flip_flop":
        p_ignore = {"train": config["p_ignore"], "sparse": config["p_sparse"], "dense": config["p_dense"]}[mix]
        return diagnostics.flip_flop(rows, length - 1 + length % 2, p_ignore=p_ignore, generator=generator)
    if task == "selective_copy":
        return diagnostics.selective_copy(rows, length, data=config["data"], alphabet=config["alphabet"],
                                          generator=generator)
    return diagnostics.counting(rows, length, alphabet=config["count_alphabet"], generator=generator)


def scores(model, config: dict, task: str) -> tuple[dict, dict]:
    """``({reading: token accuracy}, {reading: answers scored})``: ``"L"``, ``"2L"``... and, for
    flip-flop, ``"sparse"`` and ``"dense"`` at L."""
    L, accuracy, answers = config["train_len"], {}, {}
    readings = [(f"{f}L" if f > 1 else "L", f * L, "train") for f in config["factors"]]
    if task == "flip_flop":
        readings += [("sparse", L, "sparse"), ("dense", L, "dense")]
    for i, (name, length, mix) in enumerate(readings):
        generator = torch.Generator().manual_seed(10_000 + i)  # held out: not a training seed
        tokens, targets = task_batch(config, task, config["eval_rows"], length, generator, mix)
        accuracy[name] = round(evaluate.task_scores(model, tokens, targets)["token_accuracy"], 5)
        answers[name] = int((targets != -100).sum())
    return accuracy, answers


TOKEN_KINDS = {"w": diagnostics.WRITE, "r": diagnostics.READ, "i": diagnostics.SKIP}


def gates_by_token(model, tokens: torch.Tensor) -> list[dict] | None:
    """Per layer with a forget gate or a decay: ``{kind: [mean gate per head]}`` over the flip-flop
    ``tokens`` of each kind (``"w"``, ``"r"``, ``"i"``, and ``"bit"`` for the bits); ``None`` for a
    model without such layers. A gate near 0 at ``w`` closes the past at every write."""
    kinds = {kind: tokens == token for kind, token in TOKEN_KINDS.items()}
    kinds["bit"] = (tokens == diagnostics.ZERO) | (tokens == diagnostics.ONE)
    out = []
    for _, log_gates in layer_log_gates(model, tokens):  # [batch, heads, T]
        gates = log_gates.exp().transpose(0, 1).cpu()  # [heads, batch, T]
        out.append({kind: rounded(gates[:, where].mean(-1).tolist(), 3) for kind, where in kinds.items()})
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
    result["scores"], result["answers"] = scores(model, config, task)
    if task == "flip_flop":  # the gates are read on flip-flop tokens: only its models have seen them
        tokens, _ = task_batch(config, "flip_flop", 64, L, torch.Generator().manual_seed(1))
        gates = gates_by_token(model, tokens)
        if gates is not None:
            result["gates"] = gates
    result["evaluation_seconds"] = time.perf_counter() - start
    return result


# ---- reading the records: controls first, then intervals over seeds and paired comparisons ----------

CONTROL_THRESHOLD = 0.95  # token accuracy on the answers at the training length (and mix)


def task_runs(record: dict, task: str) -> list[dict]:
    """The runs of one task (each method and seed once)."""
    return [run for run in record["runs"] if run["task"] == task]


def _per_seed(record: dict, task: str, method: str, reading: str) -> dict:
    return over_seeds(record, "scores", reading, method=method, runs=task_runs(record, task))


def loss_gap(record: dict, method: str, other: dict, other_method: str, task: str) -> dict:
    """``{seed: largest |difference|}`` between the training losses logged for ``method`` in ``record``
    and ``other_method`` in ``other`` on ``task``, seed by seed (the seeds of both; the same batches):
    how far apart two variants trained. Near 0 means the change they differ by hardly acted."""
    def histories(r: dict, m: str) -> dict:
        return {run["seed"]: run["history"] for run in task_runs(r, task) if run["method"] == m}
    mine, theirs = histories(record, method), histories(other, other_method)
    out = {}
    for seed in sorted(mine.keys() & theirs.keys()):
        if [step for step, _ in mine[seed]] != [step for step, _ in theirs[seed]]:
            raise ValueError(f"seed {seed}: the two runs logged their losses at different steps")
        out[seed] = max(abs(a - b) for (_, a), (_, b) in zip(mine[seed], theirs[seed]))
    return out


def controls(record: dict, threshold: float = CONTROL_THRESHOLD) -> dict:
    """``{task: {method: {"passed", "seeds", "accuracy": [per seed]}}}``: the positive control of every
    task, accuracy at the training length (and, for flip-flop, the training mix) at least ``threshold``."""
    out = {}
    for task in record["config"]["tasks"]:
        out[task] = {}
        for method in record["config"]["methods"]:
            values = _per_seed(record, task, method, "L")
            out[task][method] = {"passed": sum(v >= threshold for v in values.values()), "seeds": len(values),
                                 "accuracy": [values[s] for s in sorted(values)]}
    return out


def table(record: dict, task: str) -> dict:
    """``{method: {reading: (mean, low, high)}}``: the 95% t-interval over seeds of each reading's
    accuracy (cut to [0, 1]), every seed included whether it passed its control or not."""
    out = {}
    for method in record["config"]["methods"]:
        out[method] = {}
        for reading in task_runs(record, task)[0]["scores"]:
            out[method][reading] = rate_interval(_per_seed(record, task, method, reading))
    return out


def compare(record: dict, tests: dict, level: float = 0.05) -> dict:
    """A family of paired comparisons with Holm's correction, as ``context_use.compare``: ``tests`` is
    ``{label: ((task, method_a, reading), (task, method_b, reading))}``; seeds pair across methods."""
    return paired_family({label: (_per_seed(record, *a), _per_seed(record, *b)) for label, (a, b) in tests.items()},
                         level)


def gate_table(record: dict, method: str, task: str = "flip_flop") -> dict:
    """``{layer: {kind: [mean over seeds of each head's mean gate]}}`` of ``method``'s models trained on
    ``task``, read on flip-flop tokens (``gates_by_token``): ``"w"``, ``"r"``, ``"i"``, ``"bit"``. Only
    for ``task="flip_flop"``: a model trained on another task never saw those tokens (the first records
    hold such readings; they are not read, review P6-n5)."""
    if task != "flip_flop":
        raise ValueError(f"task must be 'flip_flop': the gates are read on flip-flop tokens, which a model "
                         f"trained on {task!r} never saw")
    runs = [run for run in task_runs(record, task) if run["method"] == method]
    out = {}
    for layer in range(len(runs[0]["gates"])):
        out[layer] = {kind: [sum(run["gates"][layer][kind][h] for run in runs) / len(runs) for h in
                             range(len(heads))] for kind, heads in runs[0]["gates"][layer].items()}
    return out
