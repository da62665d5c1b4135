"""Seeded training and evaluation for the book's experiments.

``train_model`` runs AdamW (which parameters decay: see ``TrainConfig``) with linear warmup
and cosine decay on batches from any ``batch_fn``;
``perplexity`` evaluates a language model on non-overlapping windows of any length; ``exact_match``
scores a synthetic task. CPU by default, CUDA when available; inside ``torchrun`` the model is wrapped
in DistributedDataParallel and every process draws its own batches.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F

from ._validate import check_int
from .evaluate import argmax_hits


@dataclass
class TrainConfig:
    """Optimisation settings of ``train_model``.

    ``lr`` is the peak learning rate, reached after ``warmup`` linear steps and decayed by a cosine to
    ``min_lr_ratio * lr`` at step ``steps`` (``learning_rate`` gives the value at any step).
    ``weight_decay`` is AdamW's decoupled decay. ``decay`` says which parameters it applies to:
    ``"linear"`` decays the weight matrices of ``nn.Linear`` layers only (the tied token embedding is
    one of them), and exempts LayerNorm gains, biases and position parameters (a learned position table,
    T5's bias table), the usual practice, which gives every position method the same decayed set;
    ``"all"`` decays every parameter, as the book's first (v1) studies did.
    ``window_mean``: the loss is the mean over windows of each window's mean token loss, so that a task
    window with a few scored tokens weighs as much as a text window with all of them scored (a mixture's
    fractions are then fractions of the loss); otherwise the mean over all scored tokens.
    """

    steps: int = 1000
    lr: float = 3e-3
    warmup: int = 100
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.01
    decay: str = "all"
    grad_clip: float = 1.0
    seed: int = 0
    log_every: int = 50
    progress: bool = False
    window_mean: bool = False

    def to_dict(self) -> dict:
        return asdict(self)


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def learning_rate(step: int, config: TrainConfig) -> float:
    """Linear warmup to ``lr`` over ``warmup`` steps, then cosine decay to ``min_lr_ratio * lr``."""
    if step < config.warmup:
        return config.lr * (step + 1) / config.warmup
    progress = (step - config.warmup) / max(1, config.steps - config.warmup)
    cosine = 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))
    return config.lr * (config.min_lr_ratio + (1 - config.min_lr_ratio) * cosine)


def parameter_groups(model: torch.nn.Module, config: TrainConfig) -> list[dict]:
    """AdamW parameter groups: the parameters ``config.decay`` selects get ``config.weight_decay``,
    the others none (see ``TrainConfig``)."""
    if config.decay == "all":
        return [{"params": list(model.parameters()), "weight_decay": config.weight_decay}]
    if config.decay != "linear":
        raise ValueError(f"decay must be 'all' or 'linear', got {config.decay!r}")
    linear = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Linear)}
    decayed = [p for p in model.parameters() if id(p) in linear]
    kept = [p for p in model.parameters() if id(p) not in linear]
    return [{"params": decayed, "weight_decay": config.weight_decay}, {"params": kept, "weight_decay": 0.0}]


def next_token_loss(logits: torch.Tensor, targets: torch.Tensor, *, window_mean: bool = False) -> torch.Tensor:
    """Cross-entropy of ``logits [batch, seq, vocab]`` against ``targets [batch, seq]`` (-100: not
    scored): the mean over scored tokens, or with ``window_mean`` the mean over windows with a scored
    token of their mean token loss."""
    if not window_mean:
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100)
    losses = F.cross_entropy(logits.transpose(1, 2), targets, ignore_index=-100, reduction="none")
    counts = (targets != -100).sum(dim=1)
    return (losses.sum(dim=1)[counts > 0] / counts[counts > 0]).mean()


def _rank_and_world() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def train_model(model: torch.nn.Module, batch_fn, config: TrainConfig, *, device=None) -> list[tuple[int, float]]:
    """Train ``model`` in place; return the loss history ``[[step, loss], ...]`` every ``log_every`` steps.

    Args:
        model: maps tokens ``[batch, seq]`` to logits ``[batch, seq, vocab]``.
        batch_fn: ``batch_fn(generator) -> (tokens, targets)``, targets of -100 are not scored.
        config: optimisation settings; ``config.seed`` fixes the batches (offset by the process rank
            under ``torchrun``, so that processes see different data).
        device: defaults to CUDA when available, else CPU.
    """
    check_int("steps", config.steps)
    device = torch.device(device) if device is not None else default_device()
    rank, world = _rank_and_world()
    model.to(device).train()
    trained = model
    if world > 1:
        trained = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.AdamW(parameter_groups(model, config), lr=config.lr)
    generator = torch.Generator().manual_seed(config.seed + 1000 * rank)
    steps = range(config.steps)
    if config.progress and rank == 0:
        from tqdm.auto import tqdm

        steps = tqdm(steps, desc="training", leave=False)
    history, running = [], 0.0
    for step in steps:
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, config)
        tokens, targets = batch_fn(generator)
        logits = trained(tokens.to(device))
        loss = next_token_loss(logits, targets.to(device), window_mean=config.window_mean)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if config.grad_clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        optimizer.step()
        running += loss.item()
        if (step + 1) % config.log_every == 0 or step + 1 == config.steps:
            count = (step % config.log_every) + 1
            history.append([step + 1, running / count])
            running = 0.0
    model.eval()
    return history


@torch.no_grad()
def perplexity(model: torch.nn.Module, data: torch.Tensor, seq_len: int, *, max_windows: int | None = None,
               batch_size: int = 8, device=None) -> float:
    """Perplexity of a causal LM on non-overlapping windows of ``seq_len`` tokens of ``data``.

    Window k is ``data[k*seq_len : (k+1)*seq_len]`` with next-token targets shifted by one; every token of
    every window is scored (so each window starts without context, the standard setting for comparing
    length extrapolation, as in Press et al.'s non-overlapping evaluation).

    Returns:
        ``exp(mean cross-entropy)`` over all scored tokens.
    """
    seq_len = check_int("seq_len", seq_len)
    device = torch.device(device) if device is not None else next(model.parameters()).device
    n_windows = (data.numel() - 1) // seq_len
    if max_windows is not None:
        n_windows = min(n_windows, max_windows)
    if n_windows < 1:
        raise ValueError(f"data has {data.numel()} tokens: not enough for one window of {seq_len} + 1")
    model.eval()
    total, count = 0.0, 0
    for start in range(0, n_windows, batch_size):
        index = torch.arange(start, min(start + batch_size, n_windows))[:, None] * seq_len + torch.arange(seq_len + 1)
        windows = data[index].to(device)
        logits = model(windows[:, :-1])
        total += F.cross_entropy(logits.flatten(0, 1).float(), windows[:, 1:].flatten(), reduction="sum").item()
        count += windows[:, 1:].numel()
    return math.exp(total / count)


@torch.no_grad()
def task_accuracy(model: torch.nn.Module, batch_fn, *, batches: int = 4, seed: int = 1234,
                  device=None) -> dict[str, float]:
    """Score a synthetic task with teacher forcing: ``{"exact_match": ..., "token_accuracy": ...}``.

    ``exact_match`` is the fraction of sequences whose every scored target (targets != -100) is the
    model's argmax; ``token_accuracy`` the fraction of scored targets that are. Chance token accuracy on a
    task over v symbols is 1/v; exact match on n answer tokens needs all n right. The batches run on the
    model's own device (``device`` is accepted for compatibility and not needed).
    """
    generator = torch.Generator().manual_seed(seed)
    sequences_right = sequences = tokens_right = tokens_scored = 0
    for _ in range(batches):
        tokens, targets = batch_fn(generator)
        right, scored = argmax_hits(model, tokens, targets, batch_size=max(1, tokens.shape[0]))
        sequences_right += int((right | ~scored).all(dim=1).sum())
        sequences += tokens.shape[0]
        tokens_right += int(right.sum())
        tokens_scored += int(scored.sum())
    return {"exact_match": sequences_right / sequences, "token_accuracy": tokens_right / max(1, tokens_scored)}


def exact_match(model: torch.nn.Module, batch_fn, *, batches: int = 4, seed: int = 1234, device=None) -> float:
    """Fraction of sequences whose every scored target (targets != -100) is the model's argmax."""
    return task_accuracy(model, batch_fn, batches=batches, seed=seed, device=device)["exact_match"]
