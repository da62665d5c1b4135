"""A byte-level passkey probe: does a language model retrieve a fact planted far back in its context?

A random number (the key) is planted at a chosen depth of real text, and the model is asked for it at
the end (Mohtashami & Jaggi's passkey test, written as Python so that it reads like the code the book's
models learn from):

    ...filler code...
    pass_key = 49303
    ...filler code...
    assert pass_key == 49303        <- the model must produce these digits

``passkey_scores`` scores retrieval at one length and depth (exactly, and digit by digit),
``passkey_grid`` over a length x depth grid, and ``effective_length`` summarises a grid as the longest length at which
retrieval holds.

Models trained on text alone do not learn to copy from far back: the book's byte-level models trained
on a few million bytes of it show no induction (their loss on a repeated random string does not fall on
the repeat) and retrieve nothing at any length. Scale is not what they lacked: a model of the same
width copies a planted block from anywhere within L (RoPE, 0.98 of the block's tokens on held-out text
after 1,500 steps of tasks and 1,500 of tasks mixed with text) once the task is trained directly, over
short spans first (``posenc.tasks``: copy, associative recall, and ``passkey_task``, whose question repeats the
needle exactly; ``posenc.studies.common.task_mixture``). ``with_passkeys`` and ``passkey_batch`` here
are the first studies' way of mixing this probe into training (a 25% mix for 2,000 steps did not teach
it), kept so that their committed results can be read.
"""

from __future__ import annotations

import torch

from ._validate import check_int
from .data import encode

PASSKEY_NEEDLE = "\npass_key = {key}\n"
PASSKEY_QUESTION = "\nassert pass_key == "


def passkey_overhead(key_digits: int = 5) -> int:
    """Tokens (bytes) of a passkey sequence that are not filler: needle, question and answer."""
    key = "0" * check_int("key_digits", key_digits)
    return len(PASSKEY_NEEDLE.format(key=key).encode()) + len(PASSKEY_QUESTION.encode()) + key_digits


def random_key(key_digits: int, generator: torch.Generator | None = None) -> str:
    """``key_digits`` random decimal digits."""
    return "".join(str(int(d)) for d in torch.randint(0, 10, (check_int("key_digits", key_digits),),
                                                       generator=generator))


def passkey_sequence(filler: torch.Tensor, length: int, depth: float, key: str) -> tuple[torch.Tensor, int]:
    """One passkey test of exactly ``length`` tokens, and where its answer starts.

    The sequence is filler text with the needle (``PASSKEY_NEEDLE`` with ``key``) inserted after
    ``round(depth * n_filler)`` filler tokens, then ``PASSKEY_QUESTION``, then the key (the answer).

    Args:
        filler: 1-D token ids, at least ``length - passkey_overhead(len(key))`` long (its start is used).
        length: total tokens, answer included.
        depth: where the needle goes, 0 (start) to 1 (just before the question).
        key: the digits to retrieve.

    Returns:
        ``(tokens[length], answer_start)``: ``tokens[answer_start:]`` is the key.
    """
    length = check_int("length", length)
    if not 0 <= depth <= 1:
        raise ValueError(f"depth must be in [0, 1], got {depth}")
    if not key.isdigit():
        raise ValueError(f"key must be digits, got {key!r}")
    needle, question, answer = encode(PASSKEY_NEEDLE.format(key=key)), encode(PASSKEY_QUESTION), encode(key)
    n_filler = length - len(needle) - len(question) - len(answer)
    if n_filler < 0:
        raise ValueError(f"length must be >= {length - n_filler} for a {len(key)}-digit key, got {length}")
    if filler.numel() < n_filler:
        raise ValueError(f"filler has {filler.numel()} tokens, {n_filler} needed")
    cut = round(depth * n_filler)
    tokens = torch.cat([filler[:cut], needle, filler[cut:n_filler], question, answer])
    return tokens, length - len(answer)


def with_passkeys(tokens: torch.Tensor, targets: torch.Tensor, rate: float, *, key_digits: int = 5,
                  generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Turn a fraction ``rate`` of language-modelling windows into passkey examples (for training).

    Each chosen window keeps its own text as filler, gets a needle at a uniformly random depth, and
    ends with the question and the key; its targets stay next-token targets, so the loss is the usual
    language-modelling loss over the whole window, key included.

    Args:
        tokens, targets: ``[batch, seq]`` inputs and next-token targets (``data.random_windows``).
        rate: probability that a window becomes a passkey example, in [0, 1].
    """
    if not 0 <= rate <= 1:
        raise ValueError(f"rate must be in [0, 1], got {rate}")
    if tokens.shape != targets.shape or tokens.dim() != 2:
        raise ValueError(f"tokens and targets must both be [batch, seq], got {tuple(tokens.shape)} and "
                         f"{tuple(targets.shape)}")
    chosen = torch.rand(tokens.shape[0], generator=generator) < rate
    depths = torch.rand(tokens.shape[0], generator=generator)
    keys = [random_key(key_digits, generator) for _ in range(tokens.shape[0])]
    if not chosen.any():
        return tokens, targets
    window = torch.cat([tokens, targets[:, -1:]], dim=1)  # the seq + 1 tokens behind inputs and targets
    window = window.clone()
    for row in chosen.nonzero().flatten().tolist():
        window[row], _ = passkey_sequence(window[row], window.shape[1], float(depths[row]), keys[row])
    return window[:, :-1], window[:, 1:]


def passkey_batch(data: torch.Tensor, batch_size: int, length: int, *, key_digits: int = 5,
                  generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch of passkey examples for teaching retrieval: ``(tokens, targets)``, each ``[batch, length]``.

    Each example is ``length + 1`` tokens of ``passkey_sequence`` (filler from a random place in ``data``,
    the needle at a uniformly random depth, a random key); only the key's digits are scored (targets
    are -100 elsewhere), so the loss is the retrieval loss alone.
    """
    batch_size, length = check_int("batch_size", batch_size), check_int("length", length)
    rows = []
    for _ in range(batch_size):
        start = int(torch.randint(0, data.numel() - length - 1, (1,), generator=generator))
        depth = float(torch.rand(1, generator=generator))
        rows.append(passkey_sequence(data[start:], length + 1, depth, random_key(key_digits, generator))[0])
    windows = torch.stack(rows)
    targets = windows[:, 1:].clone()
    targets[:, :-key_digits] = -100
    return windows[:, :-1], targets


@torch.no_grad()
def passkey_scores(model: torch.nn.Module, filler: torch.Tensor, length: int, depth: float, *,
                   n_keys: int = 16, key_digits: int = 5, seed: int = 0,
                   context: int | None = None) -> tuple[float, float]:
    """``(exact, digits)``: the fraction of ``n_keys`` random keys retrieved exactly at this length and
    depth, and the fraction of their digits that are right.

    Each test uses its own random key and its own filler, taken from evenly spaced places in
    ``filler`` (a validation split). A key counts as retrieved when every digit is the model's top
    prediction given the digits before it, which is the same as greedy decoding producing the key.
    ``digits`` is teacher-forced (each digit scored given the right ones before it) and shows partial
    retrieval; chance is 0.1 for ``digits`` and ``10 ** -key_digits`` for ``exact``. ``context``
    (optional) lets the model read only the last ``context`` tokens of each test, the truncated-context
    baseline.
    """
    n_keys, key_digits = check_int("n_keys", n_keys), check_int("key_digits", key_digits)
    generator = torch.Generator().manual_seed(seed)
    n_filler = check_int("length", length) - passkey_overhead(key_digits)
    if n_filler < 0 or filler.numel() <= n_filler:
        raise ValueError(f"length {length} leaves {n_filler} filler tokens; filler has {filler.numel()}")
    offsets = torch.arange(n_keys) * (filler.numel() - n_filler) // n_keys
    tests = []
    for offset in offsets.tolist():
        tokens, _ = passkey_sequence(filler[offset:], length, depth, random_key(key_digits, generator))
        tests.append(tokens)
    tokens = torch.stack(tests)  # [keys, length]
    if context is not None:
        context = check_int("context", context, minimum=key_digits + 1)
        tokens = tokens[:, -(context + 1):] if context < length else tokens
    model.eval()
    device = next(model.parameters()).device
    predicted = model(tokens[:, :-1].to(device)).argmax(-1).cpu()[:, -key_digits:]
    right = predicted == tokens[:, -key_digits:]
    return float(right.all(dim=1).double().mean()), float(right.double().mean())


def passkey_accuracy(model: torch.nn.Module, filler: torch.Tensor, length: int, depth: float,
                     **options) -> float:
    """Fraction of keys retrieved exactly (the ``exact`` of ``passkey_scores``, same options)."""
    return passkey_scores(model, filler, length, depth, **options)[0]


def passkey_grid(model: torch.nn.Module, filler: torch.Tensor, lengths, depths, *, digits: bool = False,
                 **options):
    """``passkey_accuracy`` at every length and depth: ``{str(length): {str(depth): accuracy}}``
    (string keys, as they are stored in JSON). ``options`` go to ``passkey_scores``. With
    ``digits=True``, returns ``(exact_grid, digit_grid)`` from the same forward passes."""
    exact, right = {}, {}
    for n in lengths:
        exact[str(n)], right[str(n)] = {}, {}
        for d in depths:
            exact[str(n)][str(d)], right[str(n)][str(d)] = passkey_scores(model, filler, n, d, **options)
    return (exact, right) if digits else exact


def effective_length(grid: dict, threshold: float = 0.5) -> int:
    """The longest length of a ``passkey_grid`` up to which retrieval holds.

    A length passes when its accuracy averaged over depths is at least ``threshold``; the effective
    length is the longest tested length such that it and every shorter tested length pass (0 when
    the shortest fails), in the spirit of RULER's effective context length.
    """
    if not 0 < threshold <= 1:
        raise ValueError(f"threshold must be in (0, 1], got {threshold}")
    best = 0
    for length in sorted(grid, key=int):
        row = list(grid[length].values())
        if not row or sum(row) / len(row) < threshold:
            break
        best = int(length)
    return best
