"""Synthetic sequence tasks for length generalisation, scored by free-running greedy decoding.

A sequence is ``[x_1 .. x_n, SEP, y_1 .. y_n]``: the model reads n symbols from an alphabet of
``alphabet`` symbols (token ids ``0 .. alphabet-1``; the separator is token ``alphabet``, so a model needs
``vocab_size(alphabet)`` tokens), then writes the answer. Targets are -100 (not scored) everywhere but
the answer, so next-token cross-entropy trains exactly the task.

What a variant tests. Copy and reverse have two routes to the answer:

- the **content route** (an induction head): to write the next answer token, find the previous answer
  token in the input and output its successor (copy) or predecessor (reverse). It needs only "one token
  back" and works at any length, but only if every input symbol is unique;
- the **position route**: answer token i is the input token at index i (copy) or n+1-i (reverse), which
  the model must find by position (counting from the separator or from the start).

So ``distinct=True`` (symbols drawn without replacement; needs n <= alphabet) is the *control* for the
content route: a model can solve it at any length without knowing where anything is. A **small alphabet**
(``alphabet=2``, binary strings) is the task that needs position: the previous answer token occurs about
n/2 times in the input, so a one-token lookup is ambiguous; what is left is position, or matching a long
enough stretch of preceding answer tokens (about log2 n of them for a unique match), which itself needs
the model to tell neighbours apart. The reasoning "duplicate-free or large alphabet, so that position is
needed" gets it backwards: uniqueness is what makes content matching work.

Scoring (``evaluate_task``) generates each answer from the model's own earlier outputs (no teacher
forcing) and reports exact match (whole answer right), token accuracy and accuracy by answer index.
Whole-answer exact match under greedy decoding equals the teacher-forced "every answer argmax right":
if every step is right, the model has read the true answer so far at each step; at the first wrong step
both fail. Token accuracy and per-index accuracy do differ: after one mistake, free-running decoding
continues from its own wrong output.

``RandomizedPositions`` wraps a model with Ruoss et al.'s (2023) randomized positional encodings.
"""

from __future__ import annotations

import torch
from torch import nn

from ._validate import check_choice, check_int

TASKS = ("copy", "reverse")


def vocab_size(alphabet: int) -> int:
    """Tokens a model needs for ``alphabet`` symbols: the symbols and the separator."""
    return check_int("alphabet", alphabet) + 1


def task_length(length, generator: torch.Generator | None = None) -> int:
    """n itself, or one n drawn uniformly from an inclusive range ``(low, high)``."""
    if isinstance(length, (tuple, list)):
        if len(length) != 2:
            raise ValueError(f"length must be n or (low, high), got {length!r}")
        low, high = check_int("length", length[0]), check_int("length", length[1])
        if low > high:
            raise ValueError(f"length range must have low <= high, got {length!r}")
        return int(torch.randint(low, high + 1, (1,), generator=generator))
    return check_int("length", length)


def sample_symbols(batch_size: int, n: int, *, alphabet: int, distinct: bool = False,
                   generator: torch.Generator | None = None) -> torch.Tensor:
    """Input strings ``[batch_size, n]`` over ``0 .. alphabet-1``, without repeats when ``distinct``."""
    batch_size, n, alphabet = check_int("batch_size", batch_size), check_int("n", n), check_int("alphabet", alphabet)
    if not distinct:
        return torch.randint(0, alphabet, (batch_size, n), generator=generator)
    if n > alphabet:
        raise ValueError(f"distinct symbols need n <= alphabet, got n={n}, alphabet={alphabet}")
    return torch.rand(batch_size, alphabet, generator=generator).argsort(dim=1)[:, :n]


def answer_of(task: str, symbols: torch.Tensor) -> torch.Tensor:
    """The answer to ``symbols`` ``[batch, n]``: the same string (copy) or reversed (reverse)."""
    check_choice("task", task, TASKS)
    return symbols if task == "copy" else symbols.flip(1)


def task_batch(task: str, batch_size: int, length, *, alphabet: int, distinct: bool = False,
               generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch as (tokens ``[batch, 2n+1]``, targets ``[batch, 2n+1]``).

    ``length`` is n or an inclusive range ``(low, high)`` from which one n per batch is drawn.
    ``targets[:, n + i]`` is answer token i (the separator at index n predicts the first answer token);
    every other target is -100.
    """
    check_choice("task", task, TASKS)
    n = task_length(length, generator)
    symbols = sample_symbols(batch_size, n, alphabet=alphabet, distinct=distinct, generator=generator)
    answer = answer_of(task, symbols)
    separator = torch.full((symbols.shape[0], 1), alphabet)
    tokens = torch.cat([symbols, separator, answer], dim=1)
    targets = torch.full_like(tokens, -100)
    targets[:, n:2 * n] = answer
    return tokens, targets


def random_positions(batch_size: int, seq: int, max_position: int, *,
                     generator: torch.Generator | None = None) -> torch.Tensor:
    """Ruoss et al.'s randomized positions: per sequence, ``seq`` of ``0 .. max_position-1`` drawn without
    replacement and sorted; LongTensor ``[batch_size, seq]`` (needs seq <= max_position)."""
    batch_size, seq = check_int("batch_size", batch_size), check_int("seq", seq)
    if seq > check_int("max_position", max_position):
        raise ValueError(f"seq must be <= max_position, got seq={seq}, max_position={max_position}")
    drawn = torch.rand(batch_size, max_position, generator=generator).argsort(dim=1)[:, :seq]
    return drawn.sort(dim=1).values


class RandomizedPositions(nn.Module):
    """A model run at randomized positions (Ruoss et al. 2023): ``forward(tokens[batch, seq])`` calls
    ``model(tokens, positions=random_positions(batch, seq, max_position))`` with fresh positions each call.

    Train the wrapper; its parameters are the model's. Ruoss et al.'s code draws the positions at
    evaluation too (``range_evaluation`` passes a fresh random key to every call), and so does
    ``evaluate_task(..., max_position=...)`` here. Differences: they draw one set per batch (we draw one
    per sequence) and their models are encoders reading the whole input at once.
    """

    def __init__(self, model: nn.Module, max_position: int, *, seed: int = 0):
        super().__init__()
        self.model, self.max_position = model, check_int("max_position", max_position)
        self.generator = torch.Generator().manual_seed(seed)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = random_positions(tokens.shape[0], tokens.shape[1], self.max_position, generator=self.generator)
        return self.model(tokens, positions=positions.to(tokens.device))


@torch.no_grad()
def greedy_answers(model: nn.Module, prompts: torch.Tensor, n: int, *,
                   positions: torch.Tensor | None = None) -> torch.Tensor:
    """Free-running greedy decoding of n answer tokens after ``prompts`` ``[batch, n+1]`` (input and
    separator), each step reading the model's own earlier outputs; returns ``[batch, n]``.

    Uses the KV cache. ``positions`` ``[batch, 2n+1]`` (or ``[2n+1]``) are those of the whole sequence
    (input, separator, answer), for models run at explicit positions.
    """
    n = check_int("n", n)
    if prompts.dim() != 2 or prompts.shape[1] != n + 1:
        raise ValueError(f"prompts must be [batch, n+1] = [batch, {n + 1}], got {tuple(prompts.shape)}")
    if positions is not None:
        positions = positions.reshape(-1, 2 * n + 1)
    model.eval()
    cache = model.new_cache()
    at = (lambda start, end: None) if positions is None else (lambda start, end: positions[:, start:end])
    logits = model(prompts, cache=cache, positions=at(0, n + 1))[:, -1]
    answers = [logits.argmax(dim=-1, keepdim=True)]
    for step in range(n - 1):
        start = n + 1 + step
        logits = model(answers[-1], cache=cache, positions=at(start, start + 1))[:, -1]
        answers.append(logits.argmax(dim=-1, keepdim=True))
    return torch.cat(answers, dim=1)


@torch.no_grad()
def teacher_forced_answers(model: nn.Module, tokens: torch.Tensor, *,
                           positions: torch.Tensor | None = None) -> torch.Tensor:
    """The model's argmax at each answer slot when it reads the true answer so far: ``[batch, n]`` for
    tokens ``[batch, 2n+1]``."""
    n = (tokens.shape[1] - 1) // 2
    model.eval()
    return model(tokens, positions=positions)[:, n:2 * n].argmax(dim=-1)


def score_answers(predicted: torch.Tensor, answers: torch.Tensor) -> dict:
    """Exact match (fraction of rows all right), token accuracy and accuracy by answer index (a list
    of n) for ``predicted`` and ``answers`` ``[batch, n]``."""
    if predicted.shape != answers.shape:
        raise ValueError(f"predicted and answers must have one shape, got {tuple(predicted.shape)} and "
                         f"{tuple(answers.shape)}")
    right = (predicted == answers).double()
    return {"exact_match": float(right.all(dim=1).double().mean()), "token_accuracy": float(right.mean()),
            "by_position": [float(a) for a in right.mean(dim=0)]}


def evaluate_task(model: nn.Module, task: str, n: int, *, alphabet: int, distinct: bool = False,
                  samples: int = 256, batch_size: int = 128, max_position: int | None = None,
                  generator: torch.Generator | None = None,
                  position_generator: torch.Generator | None = None) -> dict:
    """Free-running greedy scores (``score_answers``) of ``model`` on ``samples`` sequences of length n.

    ``max_position``: evaluate at randomized positions from ``0 .. max_position-1`` (a model trained with
    ``RandomizedPositions``; pass the inner model), drawn from ``position_generator`` (default
    ``generator``; give it its own so that every model sees the same sequences from ``generator``).
    Exact match and token accuracy are means over all samples.
    """
    samples, batch_size = check_int("samples", samples), check_int("batch_size", batch_size)
    device = next(model.parameters()).device
    position_generator = generator if position_generator is None else position_generator
    predicted, answers = [], []
    for start in range(0, samples, batch_size):
        rows = min(batch_size, samples - start)
        tokens, _ = task_batch(task, rows, n, alphabet=alphabet, distinct=distinct, generator=generator)
        positions = None
        if max_position is not None:
            positions = random_positions(rows, 2 * n + 1, max_position,
                                         generator=position_generator).to(device)
        predicted.append(greedy_answers(model, tokens[:, :n + 1].to(device), n, positions=positions).cpu())
        answers.append(tokens[:, n + 1:])
    return score_answers(torch.cat(predicted), torch.cat(answers))
