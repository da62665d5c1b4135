"""Evaluation tools for language models at and beyond their training length.

The book's studies (chapters 7, 10 and 12) score every model with the same four tools:

- ``token_losses``: next-token loss of every token of windows spread over the *whole* evaluation data
  (not its first files), ``[windows, length]``. ``perplexity_summary`` turns it into a perplexity with a
  bootstrap interval over windows; ``position_curve`` into mean loss by token index (per-position loss).
- ``truncated_token_losses``: the same windows, but each token is predicted from at most ``context``
  earlier tokens (sliding-window evaluation). It is the baseline every "uses context beyond L" claim
  must beat: a model that reads only its last L tokens.
- ``passkey_grid``: a byte-level passkey probe. A random number is planted at a chosen depth of real
  text, and the model is asked for it at the end; exact retrieval over a length x depth grid.
  ``effective_length`` summarises a grid as the longest length at which retrieval holds.

Windows are ``length + 1`` consecutive tokens (inputs and their next-token targets); every window starts
without earlier context, as in Press et al.'s non-overlapping evaluation.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ._validate import check_int, check_tensor
from .data import encode
from .stats import bootstrap_interval


def window_starts(n_tokens: int, length: int, n_windows: int | None = None) -> torch.Tensor:
    """Start offsets of ``n_windows`` non-overlapping windows of ``length`` inputs spread evenly over
    ``n_tokens`` tokens.

    The data holds ``fit = (n_tokens - 1) // length`` back-to-back windows (each needs ``length + 1``
    tokens: the last target is the next window's first input). ``n_windows=None`` (or more than fit)
    takes all of them; otherwise every ``fit / n_windows``-th one, so that the first and the last parts
    of the data are both scored.

    Returns:
        LongTensor ``[k]`` of start offsets, increasing, multiples of ``length``.
    """
    n_tokens, length = check_int("n_tokens", n_tokens), check_int("length", length)
    fit = (n_tokens - 1) // length
    if fit < 1:
        raise ValueError(f"{n_tokens} tokens hold no window of length {length} (+1 for the last target)")
    count = fit if n_windows is None else min(check_int("n_windows", n_windows), fit)
    return torch.arange(count) * fit // count * length


def _windows(data: torch.Tensor, starts: torch.Tensor, length: int) -> torch.Tensor:
    return data[starts[:, None] + torch.arange(length + 1)]


def _next_token_losses(model: torch.nn.Module, windows: torch.Tensor) -> torch.Tensor:
    """Loss (nats) of predicting ``windows[:, 1:]`` from ``windows[:, :-1]``: ``[batch, length]``."""
    device = next(model.parameters()).device
    windows = windows.to(device)
    logits = model(windows[:, :-1]).float()
    losses = F.cross_entropy(logits.transpose(1, 2), windows[:, 1:], reduction="none")
    return losses.cpu()


def _check_data(data: torch.Tensor) -> torch.Tensor:
    check_tensor("data", data, min_dim=1)
    if data.dim() != 1 or data.is_floating_point():
        raise ValueError(f"data must be a 1-D integer tensor of token ids, got {data.dtype} "
                         f"{tuple(data.shape)}")
    return data


@torch.no_grad()
def token_losses(model: torch.nn.Module, data: torch.Tensor, length: int, *, n_windows: int | None = None,
                 batch_size: int = 8) -> torch.Tensor:
    """Next-token loss of every token in windows spread over ``data`` (see ``window_starts``).

    Args:
        model: maps tokens ``[batch, seq]`` to logits ``[batch, seq, vocab]``.
        data: 1-D token ids (a validation split).
        length: tokens per window (the evaluation length).
        n_windows: how many windows (``None``: all that fit).
        batch_size: windows per forward pass.

    Returns:
        float32 ``[windows, length]``: entry ``[w, t]`` is the loss (nats) of predicting token ``t + 1``
        of window ``w`` from tokens ``0..t``. ``exp(mean)`` is the perplexity.
    """
    data, length = _check_data(data), check_int("length", length)
    starts = window_starts(data.numel(), length, n_windows)
    model.eval()
    return torch.cat([_next_token_losses(model, _windows(data, starts[i:i + batch_size], length))
                      for i in range(0, len(starts), check_int("batch_size", batch_size))])


def _segment_starts(length: int, context: int, stride: int) -> torch.Tensor:
    starts = list(range(0, length - context + 1, stride))
    if starts[-1] != length - context:
        starts.append(length - context)  # the last segment ends exactly at the window's end
    return torch.tensor(starts)


@torch.no_grad()
def truncated_token_losses(model: torch.nn.Module, data: torch.Tensor, length: int, context: int, *,
                           n_windows: int | None = None, stride: int | None = None,
                           batch_size: int = 8) -> torch.Tensor:
    """``token_losses`` on the same windows, each token predicted from at most ``context`` tokens.

    The truncated-context baseline (sliding-window evaluation): the window is cut into segments of
    ``context`` tokens starting every ``stride`` tokens (default ``context // 4``), the model reads each
    segment from scratch, and token ``t`` is scored in the earliest segment that contains it, the one
    that gives it the most context. The first ``context`` tokens are scored exactly as by
    ``token_losses``; every later token sees between ``context - stride + 1`` and ``context`` tokens.
    Any model evaluated this way never reads more than ``context`` tokens at once, so it is the
    baseline for a claim that a model *uses* context beyond ``context``.

    Returns:
        float32 ``[windows, length]``, aligned with ``token_losses(model, data, length, ...)``.
    """
    data, length = _check_data(data), check_int("length", length)
    context = check_int("context", context)
    if context >= length:
        return token_losses(model, data, length, n_windows=n_windows, batch_size=batch_size)
    stride = max(1, context // 4) if stride is None else check_int("stride", stride)
    if stride > context:
        raise ValueError(f"stride must be <= context={context}, got {stride}")
    starts = window_starts(data.numel(), length, n_windows)
    segment_starts = _segment_starts(length, context, stride)  # [segments]
    positions = torch.arange(length)
    # token t goes to the first segment s with s + context > t, at index t - s inside it
    segment_of = torch.searchsorted(segment_starts, positions - context + 1, side="left")
    index_in_segment = positions - segment_starts[segment_of]
    segment_index = segment_starts[:, None] + torch.arange(context + 1)  # [segments, context + 1]
    model.eval()
    out = []
    for i in range(0, len(starts), check_int("batch_size", batch_size)):
        windows = _windows(data, starts[i:i + batch_size], length)  # [b, length + 1]
        segments = windows[:, segment_index]  # [b, segments, context + 1]
        pieces = segments.flatten(0, 1).split(batch_size)  # batch_size segments per forward pass
        losses = torch.cat([_next_token_losses(model, piece) for piece in pieces])
        losses = losses.view(windows.shape[0], len(segment_starts), context)
        out.append(losses[:, segment_of, index_in_segment])
    return torch.cat(out)


def perplexity_summary(losses: torch.Tensor, *, level: float = 0.95, n_resamples: int = 2000,
                       seed: int = 0) -> dict:
    """Perplexity of ``[windows, length]`` token losses with a bootstrap interval over windows.

    Returns:
        ``{"perplexity", "low", "high", "windows", "tokens"}``: ``exp`` of the mean loss, and ``exp`` of
        the percentile-bootstrap interval of the mean (windows resampled with replacement; windows have
        equal lengths, so the mean of window means is the mean over tokens).
    """
    check_tensor("losses", losses, min_dim=2)
    per_window = losses.double().mean(dim=1)
    low, high = bootstrap_interval(per_window, level=level, n_resamples=n_resamples, seed=seed)
    return {"perplexity": math.exp(float(per_window.mean())), "low": math.exp(low), "high": math.exp(high),
            "windows": int(losses.shape[0]), "tokens": int(losses.numel())}


def position_curve(losses: torch.Tensor, bin_size: int = 1) -> list[float]:
    """Mean loss by token index: ``[windows, length]`` -> ``length // bin_size`` values (nats).

    Value ``b`` is the mean over windows and over token indices ``b*bin_size .. (b+1)*bin_size - 1``
    (a trailing partial bin is dropped).
    """
    check_tensor("losses", losses, min_dim=2)
    bin_size = check_int("bin_size", bin_size)
    bins = losses.shape[1] // bin_size
    if bins < 1:
        raise ValueError(f"bin_size={bin_size} is longer than the {losses.shape[1]} positions")
    return losses[:, :bins * bin_size].double().mean(dim=0).view(bins, bin_size).mean(dim=1).tolist()


# ---- passkey retrieval --------------------------------------------------------------------------------
# The needle follows Mohtashami & Jaggi's passkey test, written as Python comments so that it reads like
# the code the book's models are trained on.

PASSKEY_NEEDLE = "\n# The pass key is {key}. Remember it. {key} is the pass key.\n"
PASSKEY_QUESTION = "\n# What is the pass key? The pass key is "


def passkey_overhead(key_digits: int = 5) -> int:
    """Tokens (bytes) of a passkey sequence that are not filler: needle, question and answer."""
    key = "0" * check_int("key_digits", key_digits)
    return len(PASSKEY_NEEDLE.format(key=key).encode()) + len(PASSKEY_QUESTION.encode()) + key_digits


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


@torch.no_grad()
def passkey_accuracy(model: torch.nn.Module, filler: torch.Tensor, length: int, depth: float, *,
                     n_keys: int = 16, key_digits: int = 5, seed: int = 0,
                     context: int | None = None) -> float:
    """Fraction of ``n_keys`` random keys the model retrieves exactly at this length and depth.

    Each test uses its own random key and its own filler, taken from evenly spaced places in
    ``filler`` (a validation split), and is scored by greedy retrieval: right only if every digit of
    the key is the model's top prediction. (That is the same as greedy decoding producing the key:
    decoding stays on the key exactly as long as each digit is the argmax given the digits before it.)
    ``context`` (optional) lets the model read only the last ``context`` tokens of each test, the
    truncated-context baseline. Chance is ``10 ** -key_digits``.
    """
    n_keys, key_digits = check_int("n_keys", n_keys), check_int("key_digits", key_digits)
    generator = torch.Generator().manual_seed(seed)
    n_filler = length - passkey_overhead(key_digits)
    if n_filler < 0 or filler.numel() <= n_filler:
        raise ValueError(f"length {length} leaves {n_filler} filler tokens; filler has {filler.numel()}")
    offsets = torch.arange(n_keys) * (filler.numel() - n_filler) // n_keys
    tests, answer_start = [], None
    for offset in offsets.tolist():
        key = "".join(str(int(d)) for d in torch.randint(0, 10, (key_digits,), generator=generator))
        tokens, answer_start = passkey_sequence(filler[offset:], length, depth, key)
        tests.append(tokens)
    tokens = torch.stack(tests)  # [keys, length]
    if context is not None:
        context = check_int("context", context, minimum=key_digits + 1)
        tokens = tokens[:, -(context + 1):] if context < length else tokens
    model.eval()
    device = next(model.parameters()).device
    predicted = model(tokens[:, :-1].to(device)).argmax(-1).cpu()[:, -key_digits:]
    return float((predicted == tokens[:, -key_digits:]).all(dim=1).double().mean())


def passkey_grid(model: torch.nn.Module, filler: torch.Tensor, lengths, depths, **options) -> dict:
    """``passkey_accuracy`` at every length and depth: ``{str(length): {str(depth): accuracy}}``
    (string keys, as they are stored in JSON). ``options`` go to ``passkey_accuracy``."""
    return {str(n): {str(d): passkey_accuracy(model, filler, n, d, **options) for d in depths}
            for n in lengths}


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
