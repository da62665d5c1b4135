"""What every study shares: the model it builds, checkpoints, the process rank, and one evaluation of a
language model at several lengths (perplexity with intervals, the truncated baseline, per-position
loss, passkey retrieval)."""

from __future__ import annotations

import math
import time
from pathlib import Path

import torch
import torch.distributed as dist

from .. import data, evaluate, tasks
from ..mixers import DecayLayer, ForgettingAttention
from ..passkey import effective_length, passkey_grid, with_passkeys
from ..model import TransformerLM
from ..plan import LayerSpec, every_nth
from ..train import TrainConfig, train_model
from ..stats import paired_interval, t_interval


def rank() -> int:
    """This process's rank under ``torchrun`` (0 otherwise): only rank 0 evaluates and writes."""
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def make_model(method: str, config: dict, vocab_size: int, max_len: int, **options) -> TransformerLM:
    """The study's ``TransformerLM`` for ``method`` (sizes from ``config``; ``options`` passed on); a method
    of ``MIXER_METHODS`` or ``MIXER_VARIANTS`` is its ``mixer_plan``."""
    if method in MIXER_METHODS + MIXER_VARIANTS:
        plan = mixer_plan(method, config["layers"], config["train_len"])
        model = TransformerLM(vocab_size, config["dim"], config["layers"], config["heads"], position="none",
                              max_len=max_len, plan=plan, **options)
        if method == "fox, forget bias 4":  # after TransformerLM's init, which zeroes every Linear bias
            for block in model.blocks:
                torch.nn.init.constant_(block.attn.forget.bias, FOX_FORGET_BIAS)
        if method == "stick-breaking, remainder dropped":  # no LayerSpec field: set on the built layers
            for block in model.blocks:
                block.attn.remainder = "drop"
        return model
    return TransformerLM(vocab_size, config["dim"], config["layers"], config["heads"], position=method,
                         max_len=max_len, **options)


# issue 28's methods beside the encodings: layers that carry order themselves (posenc.mixers), as plans
MIXER_METHODS = ("fox", "stick-breaking", "cope", "decay", "decay 3:1 attention", "none + conv")
# issue 40's search for recipes under which the layers that never copied learn to: not in any preset's list
MIXER_VARIANTS = ("fox + conv + gate", "fox, forget bias 4", "stick-breaking + conv", "decay + conv + gate",
                  "rope + conv", "alibi + conv",  # these two: the convolution's confound (review P6-M1)
                  "stick-breaking, remainder dropped")  # the released 3B model's convention (review P6-m1)
FOX_FORGET_BIAS = 4.0  # f = sigmoid(4) = 0.982 at init: weight halves every 38 tokens, not every token


def mixer_plan(method: str, layers: int, train_len: int) -> list[LayerSpec]:
    """The plan of a ``MIXER_METHODS`` method: FoX, stick-breaking, CoPE (``train_len`` contextual
    positions) or a decay layer in every layer, none with a convolution; three decay layers, each after a
    width-4 convolution, to one attention layer without position (``"decay 3:1 attention"``, Kimi Linear's
    pattern; shipped models convolve the projected q, k, v instead, without a residual); or attention
    without position after a width-4 convolution in every layer (``"none + conv"``, a Canon-A layer: the
    convolution's own control)."""
    if method == "decay 3:1 attention":
        return every_nth(LayerSpec("none"), 4, otherwise=LayerSpec(mixer="decay", conv=4), n_layers=layers)
    spec = {"fox": LayerSpec(mixer="forgetting"), "stick-breaking": LayerSpec(mixer="stick_breaking"),
            "cope": LayerSpec(mixer="cope", cope_positions=train_len), "decay": LayerSpec(mixer="decay"),
            "none + conv": LayerSpec("none", conv=4),
            # issue 40's search: the layers with a width-4 convolution before them (FoX's "Pro" block shifts
            # its keys and values by a token; Canon layers, GLA and Kimi Linear convolve) and an output gate
            "fox + conv + gate": LayerSpec(mixer="forgetting", conv=4, gate=True),
            "fox, forget bias 4": LayerSpec(mixer="forgetting"),
            "stick-breaking + conv": LayerSpec(mixer="stick_breaking", conv=4),
            "stick-breaking, remainder dropped": LayerSpec(mixer="stick_breaking"),
            "decay + conv + gate": LayerSpec(mixer="decay", conv=4, gate=True),
            "rope + conv": LayerSpec("rope", conv=4), "alibi + conv": LayerSpec("alibi", conv=4)}[method]
    return [spec] * layers


def save_checkpoint(model: torch.nn.Module, path: Path, meta: dict) -> None:
    """Weights and plain metadata only, loadable with ``torch.load(path, weights_only=True)``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"state_dict": model.state_dict(), "meta": meta}, path)


def load_checkpoint(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=True)


def n_windows(config: dict, length: int) -> int:
    """Evaluation windows at ``length``: ``eval_tokens // length``, cut from spans of the study's longest
    length spread over the split (``evaluate.window_starts``), so every length scores the same text."""
    return max(1, config["eval_tokens"] // length)


def longest(config: dict) -> int:
    """The longest evaluation length of a study: the span every evaluation window is cut from."""
    return config["train_len"] * max(config["factors"])


def rounded(values, digits: int = 4) -> list[float]:
    return [round(float(v), digits) for v in values]


def _rounded_summary(losses: torch.Tensor, config: dict) -> dict:
    """Perplexity with a bootstrap interval over spans (the windows cut from one span move together);
    with ``config["span_losses"]``, also each span's mean loss (``"span_losses"``, nats), so that a
    difference between two readings can be bootstrapped over text as well as over seeds."""
    group = longest(config) // losses.shape[1]
    summary = {name: round(value, 5) if isinstance(value, float) else value
               for name, value in evaluate.perplexity_summary(losses, group=group).items()}
    if config.get("span_losses"):
        summary["span_losses"] = rounded(losses.double().view(losses.shape[0] // group, -1).mean(dim=1), 5)
    return summary


def score_lengths(model: torch.nn.Module, validation: torch.Tensor, config: dict, lengths, *,
                  curve_length: int | None = None, truncate: int | None = None, bos: int | None = None,
                  context_use: bool = False) -> dict:
    """Perplexity (with bootstrap interval) at each length; the per-position curve at ``curve_length``;
    with ``truncate``, the same for the model reading at most ``truncate`` tokens at once.

    Returns ``{"perplexity": {str(n): summary}, "curve": [...]}`` and, with ``truncate``,
    ``"truncated"`` and ``"truncated_curve"`` alike (summaries from ``evaluate.perplexity_summary``).
    ``bos``: every window (and truncated segment) is read after this token. ``context_use`` adds
    ``"long_short"`` (``evaluate.long_short_difference`` at each length beyond ``truncate``) and
    ``"icl"`` (``evaluate.in_context_learning_score`` at ``truncate``: token ``truncate // 8`` against
    the last).
    """
    result = {"perplexity": {}}
    if truncate is not None:
        result["truncated"] = {}
    if context_use:
        result["long_short"] = {}
    for length in lengths:
        losses = evaluate.token_losses(model, validation, length, n_windows=n_windows(config, length),
                                       span=longest(config), bos=bos)
        result["perplexity"][str(length)] = _rounded_summary(losses, config)
        if length == curve_length:
            result["curve"] = rounded(evaluate.position_curve(losses, config["curve_bin"]))
        if context_use and length == truncate:
            result["icl"] = round(evaluate.in_context_learning_score(losses, length // 8, length - 1), 5)
        if truncate is not None and length > truncate:
            short = evaluate.truncated_token_losses(model, validation, length, truncate, bos=bos,
                                                    n_windows=n_windows(config, length), span=longest(config))
            result["truncated"][str(length)] = _rounded_summary(short, config)
            if length == curve_length:
                result["truncated_curve"] = rounded(evaluate.position_curve(short, config["curve_bin"]))
            if context_use:
                result["long_short"][str(length)] = {
                    name: round(value, 5) if isinstance(value, float) else value
                    for name, value in evaluate.long_short_difference(losses, short).items()}
    return result


def passkey(model: torch.nn.Module, validation: torch.Tensor, config: dict, lengths,
            context: int | None = None) -> dict:
    """The passkey grid of ``config`` (depths, keys) at ``lengths`` and its effective length."""
    grid, digits = passkey_grid(model, validation, lengths, config["passkey_depths"], digits=True,
                                n_keys=config["passkey_keys"], context=context)
    return {"grid": grid, "digits": digits, "effective_length": effective_length(grid)}


def next_run_by_seed(config: dict, runs: list[dict]) -> dict | None:
    """Seed by seed, every method: the first seed's table is complete before the second starts."""
    done = {(run["method"], run["seed"]) for run in runs}
    for seed in config["seeds"]:
        for method in config["methods"]:
            if (method, seed) not in done:
                return {"method": method, "seed": seed}
    return None


@torch.no_grad()
def layer_log_gates(model, tokens: torch.Tensor) -> list[tuple[int, torch.Tensor]]:
    """``[(layer index, log gate [batch, heads, T])]`` for every layer of ``model`` whose mixer has a
    data-dependent gate: FoX's forget gates (``ForgettingAttention.log_forget``) and the decay layer's
    decays (``DecayLayer.log_decay``), each computed on that layer's own input. ``tokens``: [batch, T]."""
    model.eval()
    x, out = model.token_embedding(tokens.to(next(model.parameters()).device)), []
    for index, block in enumerate(model.blocks):
        h = block.ln_attn(x)
        if block.conv is not None:
            h = block.conv(h)
        if isinstance(block.attn, ForgettingAttention):
            out.append((index, block.attn.log_forget(h).float()))
        elif isinstance(block.attn, DecayLayer):
            out.append((index, block.attn.log_decay(h).float()))
        x = block(x)
    return out


def gate_half_lives(model, tokens: torch.Tensor, skip: int = 1) -> list[dict]:
    """Each gated layer's effective window per head on ``tokens`` ([batch, T]; the first ``skip``
    positions left out, the BOS token): ``mean_log_gate`` (nats a token; a constant gate ``f`` is
    ALiBi with slope ``-ln f``), ``half_life`` (``ln 2 / -mean_log_gate`` tokens: how far back the
    mean gate halves a key's weight; ``None`` where the mean gate rounds to 1) and the gate's 10th,
    50th and 90th percentiles."""
    out = []
    for index, log_gates in layer_log_gates(model, tokens):
        per_head = log_gates[:, :, skip:].transpose(0, 1).flatten(1).double().cpu()  # [heads, tokens]
        mean = per_head.mean(-1)
        quantiles = per_head.exp().quantile(torch.tensor([0.1, 0.5, 0.9], dtype=torch.float64), dim=-1)
        out.append({"layer": index, "mean_log_gate": rounded(mean.tolist(), 5),
                    "half_life": [round(math.log(2) / -m, 2) if m < -1e-9 else None for m in mean.tolist()],
                    "gate_quantiles": [rounded(q.tolist(), 4) for q in quantiles.T]})
    return out


def train_recorded(model: torch.nn.Module, batch_fn, config: dict, *, lr: float, seed: int) -> dict:
    """Train ``model`` with the study's schedule (``steps``, ``warmup``, ``decay``, ``weight_decay`` of
    ``config``, and ``window_mean`` when it has one); return the start of its result: ``train_seconds``,
    ``history`` and ``parameters``."""
    start = time.perf_counter()
    history = train_model(model, batch_fn,
                          TrainConfig(steps=config["steps"], warmup=config["warmup"], lr=lr, seed=seed,
                                      decay=config["decay"], weight_decay=config["weight_decay"],
                                      log_every=max(1, config["steps"] // 20),
                                      window_mean=config.get("window_mean", False)))
    return {"train_seconds": time.perf_counter() - start, "history": history,
            "parameters": sum(p.numel() for p in model.parameters())}


def training_batches(train_bytes: torch.Tensor, config: dict, batch: int, length: int):
    """``batch_fn`` for ``train_model``: random windows of ``length``, a fraction
    ``config["passkey_rate"]`` of them turned into passkey examples (``posenc.passkey.with_passkeys``)."""
    def batch_fn(generator):
        tokens, targets = data.random_windows(train_bytes, batch, length, generator=generator)
        return with_passkeys(tokens, targets, config["passkey_rate"], generator=generator)
    return batch_fn


# ---- reading the rebuilt studies' records: one value per seed, intervals, paired differences ----------

def over_seeds(record: dict, *path, method: str | None = None, runs: list[dict] | None = None) -> dict:
    """``{seed: value}`` with ``value = run[path[0]][path[1]]...`` for each run of ``record`` (or of
    ``runs``), keeping only runs of ``method`` when given. Runs where the path is missing or ``None``
    are left out (a learned table cannot run beyond its length, say).

    Example: ``over_seeds(record, "zero_shot", "YaRN", "perplexity", "s=4", "2048", "perplexity")``.
    """
    values = {}
    for run in record["runs"] if runs is None else runs:
        if method is not None and run.get("method") != method:
            continue
        value = run
        for key in path:
            value = value.get(str(key)) if isinstance(value, dict) else None
            if value is None:
                break
        if value is not None:
            if run["seed"] in values:
                raise ValueError(f"two runs of seed {run['seed']} match; pass runs= (one per seed) or method=")
            values[run["seed"]] = float(value)
    return values


def rate_interval(values: dict) -> tuple[float, float, float] | None:
    """The t-interval of a rate over seeds, cut to [0, 1] (few seeds that disagree give a t-interval
    reaching past the range a rate can take); ``None`` without values."""
    if not values:
        return None
    mean, low, high = t_interval(list(values.values()))
    return mean, max(0.0, low), min(1.0, high)


def seed_interval(record: dict, *path, level: float = 0.95, **selection) -> tuple[float, float, float]:
    """``(mean, low, high)``: the Student-t interval over seeds of ``over_seeds(record, *path, ...)``."""
    values = over_seeds(record, *path, **selection)
    if not values:
        raise ValueError(f"no run has {path}")
    return t_interval(list(values.values()), level)


def paired_seed_interval(record: dict, path_a: tuple, path_b: tuple, *, method_a: str | None = None,
                         method_b: str | None = None, runs: list[dict] | None = None,
                         level: float = 0.95) -> tuple[float, float, float]:
    """``(mean, low, high)`` of the per-seed difference a - b (seeds both have): the paired comparison,
    which removes what the two share through the seed (data order, initialisation)."""
    a = over_seeds(record, *path_a, method=method_a, runs=runs)
    b = over_seeds(record, *path_b, method=method_b, runs=runs)
    return paired_interval(a, b, level)


def ngram_perplexities(config: dict, length: int, orders=(2, 3, 4), *, bos: int | None = None,
                       development: bool = False) -> dict[str, float]:
    """``{"bigram table": perplexity, ...}``: byte n-gram tables (``evaluate.ngram_token_losses``, add-0.01)
    counted on a study's training split and scored on the windows its models are scored on at ``length``
    (``n_windows``, ``longest``, ``bos`` as in ``score_lengths``): the reference beside a text perplexity. A
    model no better than the bigram table predicts text from about one byte back, and cannot show a gain
    from far context. ``development``: the study held out a development split (``data.stdlib_splits``)."""
    corpus = config.get("corpus", "stdlib")
    if development:
        train, _, validation = data.stdlib_splits(config["max_bytes"], corpus=corpus)
    else:
        train, validation = data.stdlib_split(config["max_bytes"], corpus=corpus)
    names = {1: "unigram", 2: "bigram", 3: "trigram"}
    out = {}
    for n in orders:
        losses = evaluate.ngram_token_losses(train, validation, length, n, n_windows=n_windows(config, length),
                                             span=longest(config), bos=bos)
        out[f"{names.get(n, f'{n}-gram')} table"] = math.exp(float(losses.double().mean()))
    return out


def format_interval(interval: tuple[float, float, float], digits: int = 2) -> str:
    """``"6.56 [6.50, 6.62]"``: a mean and its interval, rounded to ``digits`` (the mean alone when the
    interval is a point, as it is for one seed)."""
    mean, low, high = interval
    if low == high == mean:
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def rows_frame(rows: dict, digits: int = 2, *, corner: str | None = None):
    """The table of ``format_rows`` as a pandas ``DataFrame``, for ``posenc.tables.show`` to display as an
    HTML table: one row per key of ``rows``, cells ``mean [low, high]`` rounded to ``digits`` (the mean
    alone for a point), ``--`` where a value is missing; ``corner`` names the columns. The space inside
    the brackets is a no-break space, so that a narrow column breaks a cell only after its mean."""
    from ..tables import frame

    def interval_cell(interval):
        return format_interval(interval, digits).replace(", ", ",\u00a0")

    return frame(rows, interval_cell, corner=corner)


def format_rows(rows: dict, digits: int = 2) -> str:
    """A ``table`` as text, one line per row, cells ``mean [low, high]``."""
    labels = list(next(iter(rows.values())))
    width = max(len(name) for name in rows)
    cell = 8 + 2 * (digits + 4)
    lines = [f"{'':>{width}} | " + " | ".join(f"{label:>{cell}}" for label in labels)]
    for name, values in rows.items():
        cells = [format_interval(v, digits) if v else "--" for v in values.values()]
        lines.append(f"{name:>{width}} | " + " | ".join(f"{c:>{cell}}" for c in cells))
    return "\n".join(lines)


# ---- training on text and long-range tasks (posenc.tasks), with BOS ------------------------------------

def task_span(config: dict, length: int, step: int) -> int:
    """How far into a window the tasks reach at training ``step``: a curriculum of doubling spans over
    ``config["curriculum_phases"]`` phases (default 3) of ``curriculum_steps`` steps each, from
    ``length / 2 ** (phases - 1)`` up to ``length``. Induction forms in a few hundred steps over short
    spans and is then stretched; over the whole window from the start it had not formed after 1,500
    steps (book's own runs, RoPE, width 96, L = 128), and starting from 128 of L = 512 it had not formed
    after 1,500 steps either (chapter 7's first tasks run), which is why L = 512 starts at 32."""
    phases = config.get("curriculum_phases", 3)
    phase = min(phases - 1, step // config["curriculum_steps"]) if config.get("curriculum_steps") else phases - 1
    return max(length // 2 ** (phases - 1 - phase), 2 * config["block"] + 2, 1 + 4 * config["pairs"])


def curriculum_length(config: dict) -> int:
    """Steps in the curriculum: ``curriculum_phases`` (default 3) phases of ``curriculum_steps``."""
    return config.get("curriculum_phases", 3) * config.get("curriculum_steps", 0)


def _log_uniform(low: int, high: int, n: int, generator) -> torch.Tensor:
    """``[n]`` integers in ``[low, high]``, log-uniform: as many below the geometric middle as above."""
    draw = math.log(low) + (math.log(high + 1) - math.log(low)) * torch.rand(n, generator=generator)
    return draw.exp().long().clamp(low, high)


def window_width(config: dict, length: int, step: int) -> int:
    """The training window at ``step``: ``task_span`` while a ``curriculum_windows`` curriculum lasts,
    else ``length``."""
    if config.get("curriculum_windows") and step < curriculum_length(config):
        return task_span(config, length, step)
    return length


def training_tokens(config: dict, length: int) -> int:
    """Tokens a base model reads in training at ``length``: ``batch x window_width`` summed over steps."""
    return config["batch"] * sum(window_width(config, length, step) for step in range(config["steps"]))


def copy_placement(block: int, span: int, n: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Where ``task_mixture`` puts ``n`` training copies within ``span`` tokens: ``(end, distance)``, each
    ``[n]``. The repeat ends at ``end``, log-uniform in ``[2 block + 2, span]``; the source ``distance``
    back is uniform over what fits, ``block .. end - block - 1``. Short copies dominate: far distances
    need a late end (a left skew, as STRING, An et al. 2025, finds in real pretraining data)."""
    end = _log_uniform(2 * block + 2, span, n, generator)
    return end, block + (torch.rand(n, generator=generator) * (end - 2 * block)).long()


def task_mixture(train_bytes: torch.Tensor, config: dict, batch: int, length: int):
    """``batch_fn`` for ``train_model``: windows of ``length`` that all start with ``tasks.BOS``; per
    row, with probabilities ``config["mixture"]["copy"]`` and ``["recall"]``, a copy (``tasks.copy_task``,
    block ``config["block"]``) or an associative recall (``tasks.recall_task``, ``config["pairs"]``
    pairs), the other rows plain text. Tasks lie within the first ``task_span`` tokens (the curriculum),
    and end at a log-uniform place in it, so that short, easy instances are as common at every stage as
    long ones (with uniform ends, induction formed several times more slowly here); a copy's distance is
    uniform over what fits before its end. With ``config["tasks_first"]``, every row is a task while the
    curriculum lasts (the two tasks in the mixture's proportions), and text joins after it. With
    ``config["curriculum_windows"]``, the windows themselves are only ``task_span`` long while the
    curriculum lasts (a sequence-length warm-up: its steps cost less). Task rows score only the task's
    tokens, text rows every token. The function counts its calls to follow the curriculum."""
    calls = [0]
    block, pairs = config["block"], config["pairs"]

    def batch_fn(generator):
        span = task_span(config, length, calls[0])
        copy, recall = config["mixture"]["copy"], config["mixture"]["recall"]
        in_curriculum = calls[0] < curriculum_length(config)
        if config.get("tasks_first") and in_curriculum:
            copy, recall = copy / (copy + recall), recall / (copy + recall)
        width = window_width(config, length, calls[0])
        calls[0] += 1
        draw = torch.rand(batch, generator=generator)
        n_copy = int((draw < copy).sum())
        n_recall = int(((draw >= copy) & (draw < copy + recall)).sum())
        parts = []
        if batch - n_copy - n_recall:
            parts.append(tasks.bos_windows(train_bytes, batch - n_copy - n_recall, width, generator=generator))
        if n_copy:
            end, distance = copy_placement(block, span, n_copy, generator)
            source = end - block - distance
            parts.append(tasks.copy_task(train_bytes, n_copy, width, distance=distance, source=source,
                                         block=block, generator=generator))
        if n_recall:
            parts.append(tasks.recall_task(train_bytes, n_recall, width, pairs=pairs,
                                           end=_log_uniform(1 + 4 * pairs, span, n_recall, generator),
                                           generator=generator))
        return torch.cat([tokens for tokens, _ in parts]), torch.cat([targets for _, targets in parts])
    return batch_fn


# ---- retrieval probes: copy, passkey and associative recall by source distance -------------------------

def distance_range(config: dict, factor: int, task: str = "copy") -> tuple[int, int]:
    """The source distances probed at length ``factor * L`` for ``task`` (``"copy"`` or ``"passkey"``):
    all that fit within L for factor 1, else those beyond half the length (so each length's bucket holds
    distances no shorter length could)."""
    L = config["train_len"]
    if task == "copy":  # the block itself, and the repeat plus BOS
        shortest, room = config["block"], config["block"] + 1
    else:  # the needle (text, 5 digits, newline) before the question, and the question (text, 5 digits) plus BOS
        shortest, room = len(tasks.PASSKEY_TEXT) + 6, len(tasks.PASSKEY_TEXT) + 6
    if factor == 1:
        return shortest, L - room
    return factor * L // 2 + 1, factor * L - room


def probe_batch(config: dict, validation: torch.Tensor, task: str, factor: int, seed: int = 0,
                distances: tuple[int, int] | None = None):
    """``(tokens, targets)``: ``probe_rows`` rows of ``task`` at length ``factor * L``. A copy or a
    passkey has its source at a distance drawn from ``distances`` (inclusive; default ``distance_range``)
    and its answer at the end of the window (so that a truncated reading holds it); an associative recall
    has its pairs anywhere in the window and the queries at its end."""
    n, rows = factor * config["train_len"], config["probe_rows"]
    generator = torch.Generator().manual_seed(seed)
    if task == "recall":
        return tasks.recall_task(validation, rows, n, pairs=config["pairs"], generator=generator)
    low, high = distances or distance_range(config, factor, task)
    distance = torch.randint(low, high + 1, (rows,), generator=generator)
    if task == "passkey":
        return tasks.passkey_task(validation, rows, n, distance=distance, generator=generator)
    block = config["block"]
    return tasks.copy_task(validation, rows, n, distance=distance, source=n - block - distance, block=block,
                           generator=generator)


PROBES = ("copy", "passkey", "recall")


def retrieval(model, validation: torch.Tensor, config: dict, factors, *, truncate: bool = True) -> dict:
    """``{task: {str(n): scores}}`` for each task of ``config["probes"]`` (default ``PROBES``) at each length ``n = f * L`` (scores from
    ``evaluate.task_scores``), and with ``truncate`` the copy and the passkey read through the last L
    tokens beyond L (``"copy, truncated"``, ``"passkey, truncated"``: the negative control)."""
    L, out = config["train_len"], {}
    for task in config.get("probes", PROBES):
        out[task] = {}
        for factor in factors:
            tokens, targets = probe_batch(config, validation, task, factor)
            out[task][str(factor * L)] = evaluate.task_scores(model, tokens, targets)
            if truncate and factor > 1 and task != "recall":
                out.setdefault(task + ", truncated", {})[str(factor * L)] = evaluate.task_scores(
                    model, tokens, targets, context=L, bos=tasks.BOS)
    return out


def copy_by_distance(model, validation: torch.Tensor, config: dict) -> dict:
    """``{"low-high": scores}``: copy at length L with the source ``low`` to ``high`` tokens back, for each
    bin between consecutive ``config["distance_edges"]`` (the first bin from the first edge, each next
    from one past the edge before it); chapter 15 reads it against a plan's windows."""
    edges, out = config["distance_edges"], {}
    for i, (low, high) in enumerate(zip(edges, edges[1:])):
        low += i > 0
        tokens, targets = probe_batch(config, validation, "copy", 1, distances=(low, high))
        out[f"{low}-{high}"] = evaluate.task_scores(model, tokens, targets)
    return out


def positive_control(model, validation: torch.Tensor, config: dict) -> dict:
    """Copy accuracy with the source anywhere within L: ``{"accuracy", "exact_match", "max_distance"}``
    (token accuracy: the fraction of the repeat's predictable tokens that are the model's argmax)."""
    tokens, targets = probe_batch(config, validation, "copy", 1)
    scores = evaluate.task_scores(model, tokens, targets)
    return {"accuracy": scores["token_accuracy"], "exact_match": scores["exact_match"],
            "max_distance": distance_range(config, 1)[1]}
