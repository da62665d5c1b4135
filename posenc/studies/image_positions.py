"""The image-positions study: 2D RoPE against a learned 2D table and 1D RoPE on the flattened grid.

The task needs to know which patch is *above* which. A grid of ``height x width`` patches, each one of
``colors`` colors, is read by a bidirectional transformer (row by row, as a ViT flattens it); for every
patch not in the first row or column the model predicts two bits, whether it has the color of the patch
above and whether it has the color of the patch to its left (4 classes, chance 9/16 for the most frequent
class with 4 colors). The neighbour to the left is one token back in any layout; the one above is
``width`` tokens back in the flattened sequence, so a 1D position method can only learn "above" for the
widths it was trained on.

Models are trained on ``train_size`` grids and tested on those and on wider, taller and larger grids:

- ``2D RoPE``: half of each head's rotary pairs turn with the row, half with the column
  (``axial_rope_cos_sin``, as Qwen2-VL's vision encoder);
- ``learned 2D``: a learned table of ``train_size`` rows, resampled bicubically to a new grid as ViTs do
  when fine-tuned at a new resolution (``resize_position_table_2d``);
- ``1D RoPE``: positions ``0 .. h*w-1`` in raster order, as for text;
- ``none``: no position at all (the control: a bidirectional model without positions cannot tell any
  patch's neighbours from the others).

Each method's learning rate is the best of ``lr_grid`` on the first seed (by accuracy on the training
size); the other seeds use it.

The class scores come from ``TransformerLM``'s output layer, which is tied to its input embedding: with
``class_head="tied"`` (the default, and what the committed ``full`` run used for every method) class k's
logit is the final hidden state times the embedding of colour k, so "same as above, not left" (class 2)
and colour 2 share one vector. ``class_head="separate"`` in the config gives the task its own
``nn.Linear(dim, 4)`` instead, as a classifier usually has (review P5-m9; not yet run).
"""

from __future__ import annotations

import time
from pathlib import Path

import torch
from torch import nn

from ..absolute import resize_position_table_2d
from ..model import TransformerLM
from ..rope import axial_positions, axial_rope_cos_sin
from ..stats import t_interval
from .common import over_seeds, paired_seed_interval, rank, train_recorded

METHODS = ("2D RoPE", "learned 2D", "1D RoPE", "none")

PRESETS = {
    "tiny": dict(methods=["2D RoPE", "1D RoPE"], dim=32, layers=1, heads=2, colors=4, train_size=[4, 4],
                 test_sizes=[[4, 4], [4, 6]], steps=6, batch=4, warmup=2, lr_grid=[3e-3], seeds=[0],
                 eval_batches=2, decay="linear", weight_decay=0.01),
    "full": dict(methods=list(METHODS), dim=64, layers=2, heads=4, colors=4, train_size=[8, 8],
                 test_sizes=[[8, 8], [8, 12], [12, 8], [12, 12], [16, 16]], steps=1500, batch=32, warmup=100,
                 lr_grid=[1e-3, 3e-3, 1e-2], seeds=[0, 1, 2, 3, 4], eval_batches=16, decay="linear",
                 weight_decay=0.01),
}


def neighbour_batch(batch: int, height: int, width: int, colors: int, generator=None):
    """Random grids and their targets: tokens ``[batch, height*width]`` (colors), targets alike with
    ``2 * same_as_above + same_as_left`` for patches outside the first row and column, -100 elsewhere."""
    grid = torch.randint(0, colors, (batch, height, width), generator=generator)
    above = torch.zeros_like(grid)
    left = torch.zeros_like(grid)
    above[:, 1:] = (grid[:, 1:] == grid[:, :-1]).long()
    left[:, :, 1:] = (grid[:, :, 1:] == grid[:, :, :-1]).long()
    targets = 2 * above + left
    targets[:, 0], targets[:, :, 0] = -100, -100
    return grid.flatten(1), targets.flatten(1)


class GridModel(nn.Module):
    """A bidirectional ``TransformerLM`` over a flattened grid, with one of ``METHODS`` for position.

    ``forward(tokens[batch, h*w], height, width) -> logits[batch, h*w, 4]``. ``config["class_head"]``:
    ``"tied"`` (default; the output layer is the colour embedding, see the module docstring) or
    ``"separate"`` (an untied ``nn.Linear(dim, 4)``).
    """

    def __init__(self, method: str, config: dict):
        super().__init__()
        if method not in METHODS:
            raise ValueError(f"method must be one of {list(METHODS)}, got {method!r}")
        self.method, self.train_size = method, tuple(config["train_size"])
        position = "rope" if method in ("2D RoPE", "1D RoPE") else "none"
        vocab = max(config["colors"], 4)  # the tied head scores the 4 classes over the first 4 token ids
        self.lm = TransformerLM(vocab, config["dim"], config["layers"], config["heads"], position=position,
                                causal=False)
        class_head = config.get("class_head", "tied")
        if class_head not in ("tied", "separate"):
            raise ValueError(f"config['class_head'] must be 'tied' or 'separate', got {class_head!r}")
        if class_head == "separate":  # built after the tied model: "tied" draws exactly the weights it always did
            self.lm.head = nn.Linear(config["dim"], 4)
        self.head_dim = config["dim"] // config["heads"]
        if method == "learned 2D":
            height, width = self.train_size
            self.table = nn.Parameter(torch.randn(height * width, config["dim"]) * 0.02)

    def forward(self, tokens: torch.Tensor, height: int, width: int) -> torch.Tensor:
        options = {}
        if self.method == "2D RoPE":
            positions = axial_positions(height, width, device=tokens.device)
            options["rope_cos_sin"] = axial_rope_cos_sin(positions, self.head_dim)
        elif self.method == "learned 2D":
            table = self.table
            if (height, width) != self.train_size:
                table = resize_position_table_2d(table, self.train_size, (height, width))
            options["position_embeddings"] = table[None]
        return self.lm(tokens, **options)[..., :4]


def next_run(config: dict, runs: list[dict]) -> dict | None:
    """Every method at every rate of ``lr_grid`` on the first seed, then the other seeds at the best."""
    done = {(run["method"], run["seed"], run["lr"]) for run in runs}
    first = config["seeds"][0]
    for method in config["methods"]:
        for lr in config["lr_grid"]:
            if (method, first, lr) not in done:
                return {"method": method, "seed": first, "lr": lr}
    for seed in config["seeds"][1:]:
        for method in config["methods"]:
            key = {"method": method, "seed": seed, "lr": best_lr(config, runs, method)}
            if (method, seed, key["lr"]) not in done:
                return key
    return None


def _size(height_width) -> str:
    return f"{height_width[0]}x{height_width[1]}"


def best_lr(config: dict, runs: list[dict], method: str) -> float:
    """The rate of ``lr_grid`` with the highest accuracy at the training size on the first seed."""
    scores = {run["lr"]: run["accuracy"][_size(config["train_size"])]["both"] for run in runs
              if run["method"] == method and run["seed"] == config["seeds"][0]}
    return max(scores, key=scores.get)


@torch.no_grad()
def accuracy(model: GridModel, config: dict, height: int, width: int, seed: int = 1234) -> dict:
    """Accuracy on the scored patches: both bits, the "above" bit and the "left" bit."""
    generator = torch.Generator().manual_seed(seed)
    device = next(model.parameters()).device
    model.eval()
    right = {"both": 0, "above": 0, "left": 0}
    count = 0
    for _ in range(config["eval_batches"]):
        tokens, targets = neighbour_batch(config["batch"], height, width, config["colors"], generator)
        predicted = model(tokens.to(device), height, width).argmax(-1).cpu()
        scored = targets >= 0
        right["both"] += int((predicted == targets)[scored].sum())
        right["above"] += int((predicted // 2 == targets // 2)[scored].sum())
        right["left"] += int((predicted % 2 == targets % 2)[scored].sum())
        count += int(scored.sum())
    return {name: round(value / count, 4) for name, value in right.items()}


class _GridLoss(nn.Module):
    # train_model calls model(tokens) and takes cross-entropy over its logits; the grid's size rides along.
    def __init__(self, model: GridModel, height: int, width: int):
        super().__init__()
        self.model, self.height, self.width = model, height, width

    def forward(self, tokens):
        return self.model(tokens, self.height, self.width)


def run(config: dict, key: dict, checkpoint_dir: Path | None) -> dict:
    method, seed, lr = key["method"], key["seed"], key["lr"]
    torch.manual_seed(seed)
    model = GridModel(method, config)
    height, width = config["train_size"]

    def batch_fn(generator):
        return neighbour_batch(config["batch"], height, width, config["colors"], generator)

    start = time.perf_counter()
    result = train_recorded(_GridLoss(model, height, width), batch_fn, config, lr=lr, seed=seed)
    if rank() != 0:
        return result
    result["accuracy"] = {_size(size): accuracy(model, config, *size) for size in config["test_sizes"]}
    result["seconds"] = time.perf_counter() - start
    return result


# ---- reading a record (chapter 18): intervals over seeds, paired differences, chance -----------------
# Added after the committed results were produced. Above this line only the class_head option has been added
# since (its default, "tied", is what those runs used).


METRICS = ("both", "above", "left")


def chance_accuracy(colors: int) -> dict:
    """Accuracy of the best guess that ignores the grid: "neither neighbour has my colour".

    Each neighbour has a patch's colour with probability ``1 / colors``, independently, so the guess is
    right on one bit with probability ``1 - 1/colors`` and on both with ``(1 - 1/colors) ** 2`` (9/16
    for 4 colors). Returns ``{"both": ..., "above": ..., "left": ...}``.
    """
    if not isinstance(colors, int) or isinstance(colors, bool) or colors < 2:
        raise ValueError(f"colors must be an int >= 2, got {colors!r}")
    bit = 1 - 1 / colors
    return {"both": bit * bit, "above": bit, "left": bit}


def seed_runs(record: dict) -> list[dict]:
    """The runs of a record at each method's chosen learning rate (``best_lr``): one per method and seed."""
    config, runs = record["config"], record["runs"]
    chosen = {method: best_lr(config, runs, method) for method in config["methods"]}
    return [run for run in runs if run["lr"] == chosen[run["method"]]]


def sweep(record: dict, method: str, metric: str = "both") -> dict:
    """``{lr: accuracy}`` of ``method`` on the first seed at the training size, for every rate tried."""
    config = record["config"]
    size = _size(config["train_size"])
    return {run["lr"]: run["accuracy"][size][_metric(metric)] for run in record["runs"]
            if run["method"] == method and run["seed"] == config["seeds"][0]}


def _metric(metric: str) -> str:
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {list(METRICS)}, got {metric!r}")
    return metric


def accuracy_table(record: dict, metric: str = "both", methods=None, sizes=None) -> dict:
    """``{method: {size: (mean, low, high)}}``: the 95% Student-t interval over seeds of the accuracy
    (``metric``: "both", "above" or "left") of each method at its chosen learning rate, on each test
    size (``"HxW"`` strings; default: every method and size of the record)."""
    config, runs = record["config"], seed_runs(record)
    methods = config["methods"] if methods is None else methods
    sizes = [_size(s) for s in config["test_sizes"]] if sizes is None else sizes
    table = {}
    for method in methods:
        table[method] = {}
        for size in sizes:
            values = over_seeds(record, "accuracy", size, _metric(metric), method=method, runs=runs)
            if not values:
                raise ValueError(f"no run of {method!r} has an accuracy on {size!r}")
            table[method][size] = t_interval(list(values.values()))
    return table


def paired_accuracy(record: dict, a: tuple, b: tuple) -> tuple[float, float, float]:
    """``(mean, low, high)``: the 95% t-interval of the per-seed accuracy difference a - b.

    ``a`` and ``b`` are ``(method, size)`` or ``(method, size, metric)`` (metric "both" by default), each
    method at its chosen learning rate: two methods on one size (a seed gives both the same training
    grids and every model is tested on the same grids), or one method on two sizes or two metrics.
    """
    paths = []
    for cell in (a, b):
        if not isinstance(cell, tuple) or len(cell) not in (2, 3):
            raise TypeError(f"a and b must be (method, size) or (method, size, metric), got {cell!r}")
        method, size, metric = (*cell, "both") if len(cell) == 2 else cell
        paths.append((method, ("accuracy", size, _metric(metric))))
    (method_a, path_a), (method_b, path_b) = paths
    return paired_seed_interval(record, path_a, path_b, method_a=method_a, method_b=method_b,
                                runs=seed_runs(record))
