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
                  position_generator: torch.Generator | None = None, teacher_forced: bool = False) -> dict:
    """Free-running greedy scores (``score_answers``) of ``model`` on ``samples`` sequences of length n.
    With ``teacher_forced``, also ``"teacher_forced"``: the same scores when every answer token is
    predicted from the true answer before it (``teacher_forced_answers``), on the same sequences.

    ``max_position``: evaluate at randomized positions from ``0 .. max_position-1`` (a model trained with
    ``RandomizedPositions``; pass the inner model), drawn from ``position_generator`` (default
    ``generator``; give it its own so that every model sees the same sequences from ``generator``).
    Exact match and token accuracy are means over all samples.
    """
    samples, batch_size = check_int("samples", samples), check_int("batch_size", batch_size)
    device = next(model.parameters()).device
    position_generator = generator if position_generator is None else position_generator
    predicted, forced, answers = [], [], []
    for start in range(0, samples, batch_size):
        rows = min(batch_size, samples - start)
        tokens, _ = task_batch(task, rows, n, alphabet=alphabet, distinct=distinct, generator=generator)
        positions = None
        if max_position is not None:
            positions = random_positions(rows, 2 * n + 1, max_position,
                                         generator=position_generator).to(device)
        predicted.append(greedy_answers(model, tokens[:, :n + 1].to(device), n, positions=positions).cpu())
        if teacher_forced:
            forced.append(teacher_forced_answers(model, tokens.to(device), positions=positions).cpu())
        answers.append(tokens[:, n + 1:])
    scores = score_answers(torch.cat(predicted), torch.cat(answers))
    if teacher_forced:
        scores["teacher_forced"] = score_answers(torch.cat(forced), torch.cat(answers))
    return scores


# ---- long-range tasks for byte-level language models -----------------------------------------------------
# Each task plants a retrieval in a window of real text that starts with BOS, so that it can be mixed
# into language-model training and used as a probe at any length. The planted symbols are bytes the
# corpus does not use (128..255: the standard library's sources are ASCII but for a few dozen bytes), so
# the only way to predict them is to find their earlier occurrence: a clean induction match whose
# source distance the task controls. Every function returns ``(tokens, targets)``, each
# ``[batch, length]``; ``targets`` are -100 except on the task's scored tokens (``score_text=True``
# also scores the text, as language-modelling targets).

BOS = 2  # ASCII STX, "start of text": a byte the corpus never contains (tested), fixed at position 0
COPY_SYMBOLS = (128, 192)  # the copied block's alphabet: 64 byte values, range [low, high)
KEY_SYMBOLS, VALUE_SYMBOLS = (128, 192), (192, 256)  # associative recall: keys and values apart


def bos_windows(data: torch.Tensor, batch_size: int, length: int, *,
                generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Random text windows that start with ``BOS``: inputs ``[BOS, x_0 .. x_{length-2}]`` and
    next-token targets ``[x_0 .. x_{length-1}]``, each ``[batch_size, length]``."""
    batch_size, length = check_int("batch_size", batch_size), check_int("length", length, minimum=2)
    if data.dim() != 1 or data.numel() < length:
        raise ValueError(f"data must be 1-D with at least length={length} tokens, got {tuple(data.shape)}")
    starts = torch.randint(0, data.numel() - length + 1, (batch_size,), generator=generator)
    targets = data[starts[:, None] + torch.arange(length)]
    tokens = torch.cat([torch.full((batch_size, 1), BOS), targets[:, :-1]], dim=1)
    return tokens, targets


def _draw(spec, batch_size: int, generator) -> torch.Tensor:
    """``[batch_size]`` ints: ``spec`` itself (an int, or a LongTensor ``[batch_size]`` of per-row values),
    or uniform draws from an inclusive range ``(low, high)``."""
    if isinstance(spec, torch.Tensor):
        if spec.shape != (batch_size,):
            raise ValueError(f"per-row values must be a tensor [batch_size] = [{batch_size}], got {tuple(spec.shape)}")
        return spec.long()
    if isinstance(spec, (tuple, list)):
        low, high = int(spec[0]), int(spec[1])
        if low > high:
            raise ValueError(f"a range must have low <= high, got {spec!r}")
        return torch.randint(low, high + 1, (batch_size,), generator=generator)
    return torch.full((batch_size,), int(spec))


def _bounds(spec, drawn: torch.Tensor) -> tuple[int, int]:
    """The smallest and largest value ``spec`` can give: a range's ends, else those of ``drawn``."""
    if isinstance(spec, (tuple, list)):
        return int(spec[0]), int(spec[1])
    return int(drawn.min()), int(drawn.max())


def _distinct(batch_size: int, n: int, symbols: tuple[int, int], generator) -> torch.Tensor:
    """``[batch_size, n]`` symbols from ``range(*symbols)``, no repeats within a row."""
    low, high = symbols
    if n > high - low:
        raise ValueError(f"n={n} distinct symbols need an alphabet of at least n, got {high - low}")
    return torch.rand(batch_size, high - low, generator=generator).argsort(dim=1)[:, :n] + low


def _task_targets(tokens: torch.Tensor, text_targets: torch.Tensor, scored: torch.Tensor,
                  score_text: bool) -> torch.Tensor:
    """Next-token targets of ``tokens`` (the last from ``text_targets``): -100 where not ``scored``,
    unless ``score_text``, which keeps the text's targets too."""
    targets = torch.cat([tokens[:, 1:], text_targets[:, -1:]], dim=1)
    return torch.where(scored | (score_text & (targets < 128)), targets, torch.full_like(targets, -100))


def copy_task(data: torch.Tensor, batch_size: int, length: int, *, distance, block: int = 16, source=None,
              score_text: bool = False, generator: torch.Generator | None = None):
    """Induction at a controlled distance: a block of ``block`` distinct symbols (``COPY_SYMBOLS``) is
    planted in a BOS text window and planted again ``distance`` tokens later; the repeat's tokens after
    its first are scored (the first cannot be known before the repeat starts).

    ``distance`` is an int, an inclusive range ``(low, high)`` drawn per row, or a LongTensor
    ``[batch_size]``; it needs ``block <= distance <= length - block - 1``. ``source`` (the same kinds)
    is where the block starts; by default a uniformly random place that leaves room for the repeat, so
    that the repeat is not always at the end of the window.
    """
    block = check_int("block", block, minimum=2)
    tokens, text_targets = bos_windows(data, batch_size, length, generator=generator)
    distances = _draw(distance, batch_size, generator)
    low, high = _bounds(distance, distances)
    if low < block or high > length - block - 1:
        raise ValueError(f"distance must be in [block, length - block - 1] = [{block}, {length - block - 1}], "
                         f"got {distance!r}")
    room = length - block - distances  # sources 1 .. room keep the repeat inside the window
    if source is None:
        sources = 1 + (torch.rand(batch_size, generator=generator) * room).long()
    else:
        sources = _draw(source, batch_size, generator)
        if sources.min() < 1 or (sources > room).any():
            raise ValueError(f"source must be in [1, length - block - distance], got {source!r}")
    symbols = _distinct(batch_size, block, COPY_SYMBOLS, generator)
    offsets = torch.arange(block)
    source, repeat = sources[:, None] + offsets, (sources + distances)[:, None] + offsets
    tokens.scatter_(1, source, symbols)
    tokens.scatter_(1, repeat, symbols)
    scored = torch.zeros_like(tokens, dtype=torch.bool).scatter_(1, repeat[:, :-1], True)
    return tokens, _task_targets(tokens, text_targets, scored, score_text)


def recall_task(data: torch.Tensor, batch_size: int, length: int, *, pairs: int = 8, span=None, end=None,
                score_text: bool = False, generator: torch.Generator | None = None):
    """Multi-query associative recall (MQAR, Arora et al. 2023) in text: ``pairs`` key-value pairs
    (distinct keys from ``KEY_SYMBOLS``, values from ``VALUE_SYMBOLS``) are planted at random,
    non-overlapping places among the ``span`` tokens before the queries; the queries, every key again in
    random order and each followed by its value, end at ``end`` (default: the end of the window; text
    follows them otherwise). The values after the queries are scored.

    ``end`` and ``span`` are ints, inclusive ranges drawn per row, or LongTensors ``[batch_size]``;
    ``span`` (default: everything between BOS and the queries) must lie in
    ``[2 * pairs, end - 1 - 2 * pairs]``. A query's source lies at most ``span + 2 * pairs`` back.
    """
    pairs = check_int("pairs", pairs)
    tokens, text_targets = bos_windows(data, batch_size, length, generator=generator)
    end = length if end is None else end
    ends = _draw(end, batch_size, generator)
    low, high = _bounds(end, ends)
    if low < 1 + 4 * pairs or high > length:
        raise ValueError(f"end must be in [1 + 4 * pairs, length] = [{1 + 4 * pairs}, {length}], got {end!r}")
    queries_at = ends - 2 * pairs  # [batch]
    spans = queries_at - 1 if span is None else _draw(span, batch_size, generator)
    if span is not None:
        low, high = _bounds(span, spans)
        if low < 2 * pairs or (spans > queries_at - 1).any():
            raise ValueError(f"span must be in [2 * pairs, end - 1 - 2 * pairs] = [{2 * pairs}, "
                             f"{int(queries_at.min()) - 1}], got {span!r}")
    keys = _distinct(batch_size, pairs, KEY_SYMBOLS, generator)
    values = torch.randint(*VALUE_SYMBOLS, (batch_size, pairs), generator=generator)
    slots = torch.rand(batch_size, int(spans.max()) // 2, generator=generator)
    slots[torch.arange(slots.shape[1]) >= (spans // 2)[:, None]] = 2.0  # slots outside a row's span last
    where = queries_at[:, None] - 2 * (slots.argsort(dim=1)[:, :pairs] + 1)  # each pair's key position
    tokens.scatter_(1, where, keys)
    tokens.scatter_(1, where + 1, values)
    order = torch.rand(batch_size, pairs, generator=generator).argsort(dim=1)
    asked = queries_at[:, None] + 2 * torch.arange(pairs)  # each query key's position
    tokens.scatter_(1, asked, keys.gather(1, order))
    tokens.scatter_(1, asked + 1, values.gather(1, order))
    scored = torch.zeros_like(tokens, dtype=torch.bool).scatter_(1, asked, True)  # a query predicts its value
    return tokens, _task_targets(tokens, text_targets, scored, score_text)


PASSKEY_TEXT = "\npass_key = "  # the needle is this, the key and a newline; the question repeats it exactly


def passkey_task(data: torch.Tensor, batch_size: int, length: int, *, distance, key_digits: int = 5,
                 generator: torch.Generator | None = None):
    """A passkey in text whose question repeats the needle's words exactly, so that retrieval is a clean
    induction match: the needle ``PASSKEY_TEXT + key + "\\n"`` is planted in a BOS text window and the
    window ends with ``PASSKEY_TEXT`` and the key, whose digits are scored. ``pass_key`` never occurs in
    the corpus (tested), so the 12-byte prefix points at the needle alone.

    ``distance`` (an int, an inclusive range drawn per row, or a LongTensor ``[batch_size]``) is how far
    the question's first byte lies after the needle's first byte; it must leave room for the needle
    after BOS: ``needle <= distance <= length - 1 - len(PASSKEY_TEXT) - key_digits``.
    """
    key_digits = check_int("key_digits", key_digits)
    prefix = torch.tensor(list(PASSKEY_TEXT.encode()))
    needle_length, question = len(prefix) + key_digits + 1, len(prefix) + key_digits
    tokens, text_targets = bos_windows(data, batch_size, length, generator=generator)
    distances = _draw(distance, batch_size, generator)
    low, high = _bounds(distance, distances)
    if low < needle_length or high > length - 1 - question:
        raise ValueError(f"distance must be in [{needle_length}, {length - 1 - question}], got {distance!r}")
    keys = torch.randint(ord("0"), ord("9") + 1, (batch_size, key_digits), generator=generator)
    needle = torch.cat([prefix.expand(batch_size, -1), keys, torch.full((batch_size, 1), ord("\n"))], dim=1)
    asked = length - question
    offsets = (asked - distances)[:, None] + torch.arange(needle_length)
    tokens.scatter_(1, offsets, needle)
    tokens[:, asked:] = needle[:, :question]
    scored = torch.zeros_like(tokens, dtype=torch.bool)
    scored[:, length - key_digits - 1:length - 1] = True  # the question's last byte predicts the first digit
    targets = torch.cat([tokens[:, 1:], text_targets[:, -1:]], dim=1)
    return tokens, torch.where(scored, targets, torch.full_like(targets, -100))


def render(tokens: torch.Tensor) -> str:
    """A row of bytes ``[T]`` as one line a reader can scan: ``BOS`` as ``␂``, a newline as ``⏎``, a tab as
    ``⇥``, other control bytes as ``·``, and bytes 128-255 (the task symbols; in the corpus's UTF-8 text
    they are rare) as ``{hh}``, their value in hex."""
    out = []
    for value in tokens.tolist():
        if value == BOS:
            out.append("\u2402")
        elif value == 10:
            out.append("\u23ce")
        elif value == 9:
            out.append("\u21e5")
        elif value >= 128:
            out.append(f"{{{value:02x}}}")
        elif value < 32 or value == 127:
            out.append("\u00b7")
        else:
            out.append(chr(value))
    return "".join(out)


# ---- a task in which attention sinks form: Bigram-Backcopy (Guo et al. 2024) ---------------------------

def bigram_transitions(vocab: int, triggers: int, *, successors: int = 4, trigger_rate: float = 0.15,
                       seed: int = 0) -> torch.Tensor:
    """A random bigram table ``[vocab, vocab]`` (rows sum to 1) for ``bigram_backcopy``: every token is
    followed by one of ``successors`` non-trigger tokens of its own (random weights), or by one of the
    ``triggers`` trigger tokens ``0 .. triggers-1`` (``trigger_rate`` in all, shared evenly)."""
    vocab, triggers, successors = check_int("vocab", vocab), check_int("triggers", triggers), check_int(
        "successors", successors)
    if triggers + successors > vocab:
        raise ValueError(f"triggers + successors must be <= vocab={vocab}, got {triggers} + {successors}")
    if not 0 < trigger_rate < 1:
        raise ValueError(f"trigger_rate must be in (0, 1), got {trigger_rate}")
    generator = torch.Generator().manual_seed(seed)
    table = torch.zeros(vocab, vocab, dtype=torch.float64)
    for token in range(vocab):
        following = torch.randperm(vocab - triggers, generator=generator)[:successors] + triggers
        weights = torch.rand(successors, generator=generator, dtype=torch.float64) + 0.2
        table[token, following] = (1 - trigger_rate) * weights / weights.sum()
    table[:, :triggers] = trigger_rate / triggers
    return table


def bigram_backcopy(batch_size: int, length: int, transitions: torch.Tensor, *, triggers: int,
                    generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Sequences of the Bigram-Backcopy task (Guo et al. 2024, "Active-dormant attention heads"): a BOS
    token (id ``vocab``, one past the table), then tokens drawn from the bigram table ``transitions``,
    except that the token after a trigger (ids ``0 .. triggers-1``) repeats the token before the trigger.

    A model predicts most tokens from the current one alone (the bigram, stored in its weights) and needs
    attention only after a trigger, to look one token back. At every other query an attention head has
    nothing to read, and the softmax must still put its weight somewhere: in trained models that is the
    BOS token, an attention sink.

    Returns ``(tokens, targets)``, each ``[batch_size, length]``: ``tokens[:, 0]`` is BOS and
    ``targets[:, t]`` is the token after ``tokens[:, t]``; a target is a copy where ``tokens < triggers``.
    """
    batch_size, length = check_int("batch_size", batch_size), check_int("length", length, minimum=2)
    vocab = transitions.shape[0]
    if transitions.shape != (vocab, vocab):
        raise ValueError(f"transitions must be square [vocab, vocab], got {tuple(transitions.shape)}")
    cumulative = transitions.double().cumsum(1)
    x = torch.empty(batch_size, length + 1, dtype=torch.long)
    x[:, 0] = vocab  # BOS
    x[:, 1] = torch.randint(triggers, vocab, (batch_size,), generator=generator)
    for t in range(2, length + 1):
        drawn = torch.rand(batch_size, 1, generator=generator, dtype=torch.float64)
        following = torch.searchsorted(cumulative[x[:, t - 1]], drawn)[:, 0].clamp(max=vocab - 1)
        x[:, t] = torch.where(x[:, t - 1] < triggers, x[:, t - 2], following)
    return x[:, :-1], x[:, 1:]
