"""Evaluation tools for language models at and beyond their training length.

The book's studies (chapters 7, 10, 12, 15 and 17) score every model with the same tools:

- ``token_losses``: next-token loss of every token of windows spread over the *whole* evaluation data
  (not its first files), ``[windows, length]``. ``perplexity_summary`` turns it into a perplexity with a
  bootstrap interval over windows; ``position_curve`` into mean loss by token index (per-position loss).
- ``truncated_token_losses``: the same windows, but each token is predicted from at most ``context``
  earlier tokens (sliding-window evaluation). It is the baseline every "uses context beyond L" claim
  must beat: a model that reads only its last L tokens.
- ``streaming_token_losses``: the same windows decoded one token at a time through a rolling KV cache
  (StreamingLLM: the first ``sink_tokens`` tokens and the last ``window``, positions within the cache);
- ``first_token_attention``: how much attention each layer puts on the first token (attention sinks);
- the passkey probe lives beside them in ``posenc.passkey``.

Windows are ``length + 1`` consecutive tokens (inputs and their next-token targets); every window starts
without earlier context, as in Press et al.'s non-overlapping evaluation.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ._validate import check_int, check_tensor
from .stats import bootstrap_interval


def window_starts(n_tokens: int, length: int, n_windows: int | None = None, *,
                  span: int | None = None) -> torch.Tensor:
    """Start offsets of ``n_windows`` non-overlapping windows of ``length`` inputs spread evenly over
    ``n_tokens`` tokens.

    The data holds ``fit = (n_tokens - 1) // length`` back-to-back windows (each needs ``length + 1``
    tokens: the last target is the next window's first input). ``n_windows=None`` (or more than fit)
    takes all of them; otherwise every ``fit / n_windows``-th one, so that the first and the last parts
    of the data are both scored.

    With ``span`` (a multiple of ``length``), the windows are cut from ``n_windows * length // span``
    spans of ``span`` tokens spread the same way, each span split into ``span // length`` back-to-back
    windows. Called with the same ``span`` and ``n_windows * length``, every length scores exactly the
    same tokens, so perplexities at different lengths compare the same text.

    Returns:
        LongTensor ``[k]`` of start offsets, increasing.
    """
    n_tokens, length = check_int("n_tokens", n_tokens), check_int("length", length)
    if span is not None:
        span = check_int("span", span)
        if span % length:
            raise ValueError(f"span must be a multiple of length={length}, got {span}")
        n_spans = None if n_windows is None else max(1, check_int("n_windows", n_windows) * length // span)
        starts = window_starts(n_tokens, span, n_spans)
        return (starts[:, None] + torch.arange(0, span, length)).flatten()
    fit = (n_tokens - 1) // length
    if fit < 1:
        raise ValueError(f"{n_tokens} tokens hold no window of length {length} (+1 for the last target)")
    count = fit if n_windows is None else min(check_int("n_windows", n_windows), fit)
    return torch.arange(count) * fit // count * length


def _windows(data: torch.Tensor, starts: torch.Tensor, length: int) -> torch.Tensor:
    return data[starts[:, None] + torch.arange(length + 1)]


def _next_token_losses(model: torch.nn.Module, windows: torch.Tensor, bos: int | None = None) -> torch.Tensor:
    """Loss (nats) of predicting ``windows[:, 1:]`` from ``windows[:, :-1]``: ``[batch, length]``.

    With ``bos``, the model reads ``[bos, windows[:, :-2]]`` and predicts ``windows[:, :-1]`` instead:
    the same number of positions, the first one given to the BOS token (the window's last token unused).
    """
    device = next(model.parameters()).device
    windows = windows.to(device)
    if bos is None:
        inputs, targets = windows[:, :-1], windows[:, 1:]
    else:
        inputs = torch.cat([torch.full_like(windows[:, :1], bos), windows[:, :-2]], dim=1)
        targets = windows[:, :-1]
    logits = model(inputs).float()
    losses = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")
    return losses.cpu()


def _check_data(data: torch.Tensor) -> torch.Tensor:
    check_tensor("data", data, min_dim=1)
    if data.dim() != 1 or data.is_floating_point():
        raise ValueError(f"data must be a 1-D integer tensor of token ids, got {data.dtype} "
                         f"{tuple(data.shape)}")
    return data


@torch.no_grad()
def token_losses(model: torch.nn.Module, data: torch.Tensor, length: int, *, n_windows: int | None = None,
                 span: int | None = None, batch_size: int = 8, bos: int | None = None) -> torch.Tensor:
    """Next-token loss of every token in windows spread over ``data`` (see ``window_starts``).

    Args:
        model: maps tokens ``[batch, seq]`` to logits ``[batch, seq, vocab]``.
        data: 1-D token ids (a validation split).
        length: tokens per window (the evaluation length).
        n_windows: how many windows (``None``: all that fit).
        span: cut the windows from spans of this many tokens (see ``window_starts``), so that
            several lengths score the same text.
        batch_size: windows per forward pass.
        bos: a token the model reads first (``posenc.tasks.BOS`` for models trained with one); entry
            ``[w, t]`` is then the loss of token ``t`` of window ``w`` given ``bos`` and tokens ``0..t-1``.

    Returns:
        float32 ``[windows, length]``: entry ``[w, t]`` is the loss (nats) of predicting token ``t + 1``
        of window ``w`` from tokens ``0..t``. ``exp(mean)`` is the perplexity.
    """
    data, length = _check_data(data), check_int("length", length)
    starts = window_starts(data.numel(), length, n_windows, span=span)
    model.eval()
    return torch.cat([_next_token_losses(model, _windows(data, starts[i:i + batch_size], length), bos)
                      for i in range(0, len(starts), check_int("batch_size", batch_size))])


def _gram_keys(data: torch.Tensor, order: int, vocab: int) -> torch.Tensor:
    """Every run of ``order`` consecutive tokens of 1-D ``data`` as one integer (base ``vocab``, oldest token
    most significant): ``[len(data) - order + 1]``."""
    keys = torch.zeros(data.numel() - order + 1, dtype=torch.int64)
    for i in range(order):
        keys = keys * vocab + data[i:data.numel() - order + 1 + i]
    return keys


def _gram_counts(table: tuple[torch.Tensor, torch.Tensor], queries: torch.Tensor) -> torch.Tensor:
    """How often each of ``queries`` (int64 keys) occurs in ``table`` (``(sorted keys, their counts)``)."""
    values, counts = table
    where = torch.searchsorted(values, queries).clamp(max=values.numel() - 1)
    return torch.where(values[where] == queries, counts[where], 0)


def ngram_token_losses(train: torch.Tensor, data: torch.Tensor, length: int, n: int, *,
                       n_windows: int | None = None, span: int | None = None, bos: int | None = None,
                       smoothing: float = 0.01, vocab: int = 256) -> torch.Tensor:
    """``token_losses`` of an n-gram table instead of a model: the reference a text perplexity needs.

    Each token is predicted from the ``n - 1`` tokens before it in its window (fewer at the window's start:
    a window is read on its own, as a model reads it), with add-``smoothing`` estimates from the counts in
    ``train``: ``p(x | c) = (count(c, x) + smoothing) / (count(c) + smoothing * vocab)``. Windows and
    alignment are ``token_losses``'s (same ``length``, ``n_windows``, ``span``); with ``bos``, entry
    ``[w, t]`` is token ``t`` predicted from the tokens before it in the window (the BOS itself is not
    counted: ``train`` has none).

    Returns:
        float32 ``[windows, length]``, aligned with ``token_losses(model, data, length, ...)``.
    """
    data, train, length = _check_data(data), _check_data(train), check_int("length", length)
    n = check_int("n", n)
    if n > 7 or vocab ** n >= 2 ** 63:
        raise ValueError(f"n must be at most 7 with a vocabulary of {vocab} (keys are int64), got {n}")
    windows = _windows(data, window_starts(data.numel(), length, n_windows, span=span), length)
    sequence = windows[:, :-1] if bos is not None else windows  # the tokens a window reads and predicts
    first = 0 if bos is not None else 1  # the index in ``sequence`` of the first predicted token
    losses = torch.empty(windows.shape[0], length, dtype=torch.float64)
    for t in range(length):
        target = first + t
        k = min(n - 1, target)  # context tokens available within the window
        grams = sequence[:, target - k:target + 1]  # [windows, k + 1]
        gram_keys = _gram_keys_rows(grams, vocab)
        context_keys = _gram_keys_rows(grams[:, :-1], vocab)
        joint = _gram_counts(_gram_table(train, k + 1, vocab), gram_keys).double()
        context = (_gram_counts(_gram_table(train, k, vocab), context_keys).double() if k
                   else torch.full_like(joint, float(train.numel())))
        losses[:, t] = -torch.log((joint + smoothing) / (context + smoothing * vocab))
    return losses.float()


def _gram_keys_rows(grams: torch.Tensor, vocab: int) -> torch.Tensor:
    """Each row of ``[rows, order]`` token ids as one integer, like ``_gram_keys``."""
    keys = torch.zeros(grams.shape[0], dtype=torch.int64)
    for i in range(grams.shape[1]):
        keys = keys * vocab + grams[:, i]
    return keys


_TABLES: dict = {}


def _gram_table(train: torch.Tensor, order: int, vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(sorted distinct keys, their counts)`` of the runs of ``order`` tokens of ``train``, kept for the
    last training tensor seen (every position of a window asks for the same few tables)."""
    key = (id(train), train.numel(), order, vocab)
    if key not in _TABLES:
        if any(cached[:2] != key[:2] for cached in _TABLES):
            _TABLES.clear()
        _TABLES[key] = torch.unique(_gram_keys(train, order, vocab), return_counts=True)
    return _TABLES[key]


def _segment_starts(length: int, context: int, stride: int) -> torch.Tensor:
    starts = list(range(0, length - context + 1, stride))
    if starts[-1] != length - context:
        starts.append(length - context)  # the last segment ends exactly at the window's end
    return torch.tensor(starts)


@torch.no_grad()
def truncated_token_losses(model: torch.nn.Module, data: torch.Tensor, length: int, context: int, *,
                           n_windows: int | None = None, span: int | None = None,
                           stride: int | None = None, batch_size: int = 8, bos: int | None = None) -> torch.Tensor:
    """``token_losses`` on the same windows, each token predicted from at most ``context`` tokens.

    The truncated-context baseline (sliding-window evaluation): the window is cut into segments of
    ``context`` tokens starting every ``stride`` tokens (default ``context // 4``), the model reads each
    segment from scratch, and token ``t`` is scored in the earliest segment that contains it, the one
    that gives it the most context. The first ``context`` tokens are scored exactly as by
    ``token_losses``; every later token sees between ``context - stride + 1`` and ``context`` tokens.
    Any model evaluated this way never reads more than ``context`` tokens at once, so it is the
    baseline for a claim that a model *uses* context beyond ``context``. With ``bos``, every segment
    starts with it, as every window did in training (see ``token_losses``).

    Returns:
        float32 ``[windows, length]``, aligned with ``token_losses(model, data, length, ...)``.
    """
    data, length = _check_data(data), check_int("length", length)
    context = check_int("context", context)
    if context >= length:
        return token_losses(model, data, length, n_windows=n_windows, span=span, batch_size=batch_size, bos=bos)
    stride = max(1, context // 4) if stride is None else check_int("stride", stride)
    if stride > context:
        raise ValueError(f"stride must be <= context={context}, got {stride}")
    starts = window_starts(data.numel(), length, n_windows, span=span)
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
        losses = torch.cat([_next_token_losses(model, piece, bos) for piece in pieces])
        losses = losses.view(windows.shape[0], len(segment_starts), context)
        out.append(losses[:, segment_of, index_in_segment])
    return torch.cat(out)


def perplexity_summary(losses: torch.Tensor, *, group: int = 1, level: float = 0.95, n_resamples: int = 2000,
                       seed: int = 0) -> dict:
    """Perplexity of ``[windows, length]`` token losses with a bootstrap interval.

    The bootstrap resamples groups of ``group`` consecutive windows (the windows cut from one span, see
    ``window_starts``, which are neighbours in the text and so not independent) with replacement.

    Returns:
        ``{"perplexity", "low", "high", "windows", "tokens"}``: ``exp`` of the mean loss, and ``exp`` of
        the percentile-bootstrap interval of the mean (all groups hold the same number of tokens, so the
        mean of group means is the mean over tokens).
    """
    check_tensor("losses", losses, min_dim=2)
    group = check_int("group", group)
    if losses.shape[0] % group:
        raise ValueError(f"{losses.shape[0]} windows do not split into groups of {group}")
    per_group = losses.double().view(losses.shape[0] // group, -1).mean(dim=1)
    low, high = bootstrap_interval(per_group, level=level, n_resamples=n_resamples, seed=seed)
    return {"perplexity": math.exp(float(per_group.mean())), "low": math.exp(low), "high": math.exp(high),
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


@torch.no_grad()
def streaming_token_losses(model: torch.nn.Module, data: torch.Tensor, length: int, *, sink_tokens: int,
                           window: int, n_windows: int | None = None, span: int | None = None,
                           bos: int | None = None) -> torch.Tensor:
    """``token_losses`` on the same windows, decoded one token at a time through a rolling KV cache.

    The model (a causal ``TransformerLM``) keeps the first ``sink_tokens`` tokens and the last ``window``
    of every window in its cache (``model.new_cache(sink_tokens=..., window=...)``) and never sees a
    position beyond ``sink_tokens + window - 1``; ``sink_tokens=0`` is plain eviction of the oldest
    tokens. All windows are decoded together as one batch. With ``bos``, every window is read after that
    token, as ``token_losses`` reads it (with ``sink_tokens >= 1`` the cache keeps it).

    Returns:
        float32 ``[windows, length]``, aligned with ``token_losses(model, data, length, ...)``.
    """
    data, length = _check_data(data), check_int("length", length)
    starts = window_starts(data.numel(), length, n_windows, span=span)
    device = next(model.parameters()).device
    windows = _windows(data, starts, length).to(device)
    if bos is not None:  # read [bos, x_0 .. x_{length-2}], predict x_0 .. x_{length-1}
        windows = torch.cat([torch.full_like(windows[:, :1], bos), windows[:, :-1]], dim=1)
    return rolling_cache_losses(model, windows, sink_tokens=sink_tokens, window=window)


@torch.no_grad()
def rolling_cache_losses(model: torch.nn.Module, windows: torch.Tensor, *, sink_tokens: int,
                         window: int) -> torch.Tensor:
    """Token ``t + 1``'s loss for every ``t`` of ``windows`` (``[batch, length + 1]`` token ids, on the model's
    device), each row decoded one token at a time through its own rolling KV cache (the first
    ``sink_tokens`` tokens and the last ``window``). Rows from different documents share one batch: a
    decoding step's cost is mostly reading the weights, so more rows cost little more.

    Returns:
        float32 ``[batch, length]``, on the CPU.
    """
    if check_tensor("windows", windows, min_dim=2).dim() != 2 or windows.shape[1] < 2:
        raise ValueError(f"windows must be [batch, length + 1] with length >= 1, got shape {tuple(windows.shape)}")
    model.eval()
    cache = model.new_cache(sink_tokens=sink_tokens, window=window)
    losses = []
    for t in range(windows.shape[1] - 1):
        logits = model(windows[:, t:t + 1], cache=cache)[:, 0].float()
        losses.append(F.cross_entropy(logits, windows[:, t + 1], reduction="none"))
    return torch.stack(losses, dim=1).cpu()


@torch.no_grad()
def first_token_attention(model: torch.nn.Module, tokens: torch.Tensor, *, skip: int = 16,
                          by_head: bool = False, reduce: bool = True, queries: torch.Tensor | None = None):
    """Mean attention weight on the first token, layer by layer, over heads and queries ``skip ..``.

    ``tokens`` is ``[batch, seq]``; the model is a ``TransformerLM``. Queries before ``skip`` are left
    out: the first few have so few keys that any weight on token 0 is large. For comparison, a query at
    index i that spread its attention evenly would give the first token ``1 / (i + 1)``.

    Returns ``[layer]`` floats; with ``by_head``, ``[layer][head]``; with ``reduce=False``, per layer a
    ``[heads, seq - skip]`` tensor of the weight averaged over the batch only. ``queries`` (bool
    ``[batch, seq]``) restricts the means to the queries it marks (the queries at some kind of token, say).
    """
    check_tensor("tokens", tokens, min_dim=2)
    seq = tokens.shape[1]
    if not 0 <= skip < seq:
        raise ValueError(f"skip must be in [0, seq={seq}), got {skip}")
    if queries is not None and tuple(queries.shape) != tuple(tokens.shape):
        raise ValueError(f"queries must have the shape of tokens {tuple(tokens.shape)}, got {tuple(queries.shape)}")
    device = next(model.parameters()).device
    model.eval()
    shares = []
    x = model.token_embedding(tokens.to(device))
    if model.absolute is not None:
        x = model.absolute(x)
    for block in model.blocks:
        _, weights = block.attn(block.ln_attn(x), need_weights=True)  # [batch, heads, seq, seq]
        first = weights[:, :, skip:, 0].float().cpu()  # [batch, heads, queries]
        if not reduce:
            shares.append(first.mean(0))
        else:
            kept = torch.ones_like(first[:, 0], dtype=torch.bool) if queries is None else queries[:, skip:].cpu()
            per_head = [float(first[:, h][kept].mean()) for h in range(first.shape[1])]
            shares.append(per_head if by_head else sum(per_head) / len(per_head))
        x = block(x)
    return shares


# ---- how much of its context a model uses --------------------------------------------------------------

def long_short_difference(losses: torch.Tensor, truncated: torch.Tensor, *, threshold: float = 2.0) -> dict:
    """LongPPL's long-short difference (Fang et al. 2024) from ``token_losses`` and the aligned
    ``truncated_token_losses`` of the same windows (both ``[windows, length]``, nats).

    Per token, LSD = log p(token | whole window) - log p(token | last ``context`` tokens) = truncated
    loss - full loss: above 0 where the far context helped. Only tokens the truncated reading cut short
    are counted (those where the two readings differ at all: the ones beyond the first ``context``).

    Returns:
        A dict: ``"mean"``, the mean LSD over those tokens; ``"key_fraction"``, the fraction with LSD
        above ``threshold`` (the paper's key tokens by its first condition; LongPPL also requires the
        full-context log-likelihood above a second threshold, not applied here); ``"key_loss"``, the mean
        full-context loss on the key tokens (None when there are none); ``"tokens"``, how many tokens were counted.
    """
    check_tensor("losses", losses, min_dim=2)
    if losses.shape != truncated.shape:
        raise ValueError(f"losses and truncated must have one shape, got {tuple(losses.shape)} and "
                         f"{tuple(truncated.shape)}")
    cut = (losses != truncated).any(dim=0)  # token indices where the truncated reading had less context
    lsd = (truncated - losses)[:, cut].double()
    if lsd.numel() == 0:
        raise ValueError("the truncated reading equals the full one everywhere: no token beyond the context")
    key = lsd > threshold
    return {"mean": float(lsd.mean()), "key_fraction": float(key.double().mean()),
            "key_loss": float(losses[:, cut].double()[key].mean()) if key.any() else None,
            "tokens": int(lsd.numel())}


def in_context_learning_score(losses: torch.Tensor, early: int, late: int) -> float:
    """Olsson et al.'s (2022) in-context-learning score: mean loss at token index ``late`` minus mean
    loss at token index ``early`` (they use tokens 500 and 50); below 0 when later tokens, which have
    more context, are predicted better."""
    check_tensor("losses", losses, min_dim=2)
    early, late = check_int("early", early, minimum=0), check_int("late", late, minimum=0)
    if not early < late < losses.shape[1]:
        raise ValueError(f"need early < late < {losses.shape[1]} positions, got early={early}, late={late}")
    return float(losses[:, late].double().mean() - losses[:, early].double().mean())


@torch.no_grad()
def task_scores(model: torch.nn.Module, tokens: torch.Tensor, targets: torch.Tensor, *,
                context: int | None = None, bos: int | None = None, batch_size: int = 32) -> dict:
    """Teacher-forced retrieval scores on a task batch (``posenc.tasks``): ``{"token_accuracy",
    "exact_match"}``, the fraction of scored targets (targets != -100) that are the model's argmax and of
    rows with all of them right (for a copy, the same as greedy decoding getting the whole block).

    ``context`` (the truncated reading, the negative control): the model reads only the last
    ``context`` tokens of each row (after ``bos``, when given, in place of the first of them); every
    scored target must lie among them.
    """
    if tokens.shape != targets.shape or tokens.dim() != 2:
        raise ValueError(f"tokens and targets must both be [batch, seq], got {tuple(tokens.shape)} and "
                         f"{tuple(targets.shape)}")
    if context is not None and context < tokens.shape[1]:
        context = check_int("context", context)
        if (targets[:, :-context] != -100).any():
            raise ValueError(f"a scored target lies before the last context={context} tokens")
        tokens, targets = tokens[:, -context:].clone(), targets[:, -context:]
        if bos is not None:
            tokens[:, 0] = bos
    right, scored = argmax_hits(model, tokens, targets, batch_size=batch_size)
    return {"token_accuracy": float(right.sum() / scored.sum()),
            "exact_match": float((right | ~scored).all(dim=1).double().mean())}


@torch.no_grad()
def argmax_hits(model: torch.nn.Module, tokens: torch.Tensor, targets: torch.Tensor, *,
                batch_size: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    """``(right, scored)``, two bool tensors ``[batch, seq]``: where a scored target (targets != -100) is
    the model's argmax, and where targets are scored. The model runs in eval mode on its own device, in
    chunks of ``batch_size`` rows."""
    device = next(model.parameters()).device
    model.eval()
    predicted = torch.cat([model(tokens[i:i + batch_size].to(device)).argmax(-1).cpu()
                           for i in range(0, tokens.shape[0], batch_size)])
    scored = targets != -100
    return (predicted == targets) & scored, scored
