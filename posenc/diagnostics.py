"""Diagnostic tasks of the papers on position without an encoding: flip-flop, selective copy, counting.

Each returns ``(tokens, targets)``, two LongTensors ``[batch, length]`` in bytes, BOS first, with targets
-100 except at the answers (so next-token cross-entropy trains exactly the task, and
``evaluate.task_scores`` scores it):

- ``flip_flop`` (Liu et al. 2023, arXiv 2306.00946): instructions ``w`` (write), ``r`` (read) and ``i``
  (ignore), each followed by a bit; after every ``r`` the bit is the last one written. Sequences start
  with a write and end with a read, and reads and writes are equally likely, as in the paper. The ignore
  rate sets how far back the last write lies: the paper trains at 0.8 and tests out of distribution on
  sparse (0.98) and dense (0.1) sequences. A model must find the *most recent* write, which a learned
  forget gate can do by closing at writes.
- ``selective_copy`` (Gu and Dao 2023, the Mamba paper): a few data symbols scattered among noise (``.``),
  then ``|`` and the data symbols again, in order. Order among the data matters, distance does not.
- ``counting`` (in the spirit of the counting tasks of CoPE, Golovneva et al. 2024, not their exact task): segments of symbols separated by ``|``;
  after ``?`` and a symbol, the answer is how many times that symbol occurs in the last segment, a digit.
  Positions that count *symbols* rather than tokens solve it directly.
"""

from __future__ import annotations

import torch

from ._validate import check_int
from .tasks import BOS

IGNORE = -100
WRITE, READ, SKIP, ZERO, ONE = (ord(c) for c in "wri01")
NOISE, SEPARATOR, QUERY = ord("."), ord("|"), ord("?")
SYMBOLS = tuple(ord(c) for c in "abcdefghijklmnopqrstuvwxyz")
DIGITS = tuple(ord(c) for c in "0123456789")


def _check_rate(name: str, value: float) -> float:
    if not 0 <= value < 1:
        raise ValueError(f"{name} must be in [0, 1), got {value!r}")
    return float(value)


def flip_flop(batch_size: int, length: int, *, p_ignore: float = 0.8, p_read: float | None = None,
              generator: torch.Generator | None = None):
    """``[BOS, op, bit, op, bit, ...]`` of ``length`` tokens (odd: BOS and whole instructions, at least
    two); the first instruction is a write and the last a read, the others are read / ignore / write with
    probabilities ``p_read`` (default ``(1 - p_ignore) / 2``, as many reads as writes), ``p_ignore`` and
    the rest. Scored: the bit after every read (the last written bit)."""
    length = check_int("length", length, minimum=5)
    if length % 2 == 0:
        raise ValueError(f"length must be odd (BOS, then instruction-bit pairs), got {length}")
    p_ignore = _check_rate("p_ignore", p_ignore)
    p_read = _check_rate("p_read", (1 - p_ignore) / 2 if p_read is None else p_read)
    if p_read + p_ignore >= 1:
        raise ValueError(f"p_read + p_ignore must be < 1 (writes need a chance), got {p_read + p_ignore}")
    n = (length - 1) // 2
    draw = torch.rand(batch_size, n, generator=generator)
    ops = torch.where(draw < p_read, READ, torch.where(draw < p_read + p_ignore, SKIP, WRITE))
    ops[:, 0], ops[:, -1] = WRITE, READ
    bits = torch.randint(0, 2, (batch_size, n), generator=generator)
    written = torch.where(ops == WRITE, bits, -1)
    index = torch.arange(n).expand(batch_size, n)
    last_write = torch.where(ops == WRITE, index, 0).cummax(1).values  # the latest write at or before each step
    bits = torch.where(ops == READ, written.gather(1, last_write), bits)
    tokens = torch.full((batch_size, length), BOS)
    tokens[:, 1::2], tokens[:, 2::2] = ops, ZERO + bits
    targets = torch.full_like(tokens, IGNORE)
    targets[:, 1::2] = torch.where(ops == READ, ZERO + bits, IGNORE)  # predicted at the read op, the bit follows
    return tokens, targets


def selective_copy(batch_size: int, length: int, *, data: int = 8, alphabet: int = 16,
                   generator: torch.Generator | None = None):
    """``[BOS, noise with `data` symbols among it, |, the symbols in order]`` of ``length`` tokens; the
    symbols come from the first ``alphabet`` letters (repeats allowed). Scored: the copied symbols."""
    data, alphabet = check_int("data", data), check_int("alphabet", alphabet)
    if alphabet > len(SYMBOLS):
        raise ValueError(f"alphabet must be at most {len(SYMBOLS)}, got {alphabet}")
    length = check_int("length", length, minimum=2 * data + 2)
    span = length - data - 2  # the noisy part between BOS and the separator
    symbols = torch.tensor(SYMBOLS[:alphabet])[torch.randint(0, alphabet, (batch_size, data), generator=generator)]
    places = torch.rand(batch_size, span, generator=generator).argsort(1)[:, :data].sort(1).values
    tokens = torch.full((batch_size, length), NOISE)
    tokens[:, 0], tokens[:, span + 1] = BOS, SEPARATOR
    tokens.scatter_(1, 1 + places, symbols)
    tokens[:, span + 2:] = symbols
    targets = torch.full_like(tokens, IGNORE)
    targets[:, span + 1: length - 1] = symbols  # predicted from the separator on
    return tokens, targets


def counting(batch_size: int, length: int, *, alphabet: int = 4, segment: tuple[int, int] = (4, 9),
             generator: torch.Generator | None = None):
    """Segments of ``segment`` symbols (an inclusive range of lengths) from the first ``alphabet`` letters,
    each followed by ``|``, as many as fit after BOS (noise ``.`` fills the rest of the start); then ``?``,
    one of the letters, and how many times it occurs in the last segment (a digit: up to 9). Scored: the
    count."""
    alphabet = check_int("alphabet", alphabet)
    low, high = check_int("segment", segment[0]), check_int("segment", segment[1])
    if high > 9 or low > high:
        raise ValueError(f"segment must be (low, high) with low <= high <= 9 (the count is one digit), got {segment}")
    length = check_int("length", length, minimum=high + 5)
    letters = torch.tensor(SYMBOLS[:alphabet])
    tokens = torch.full((batch_size, length), NOISE)
    targets = torch.full_like(tokens, IGNORE)
    tokens[:, 0] = BOS
    room = length - 4  # BOS, then ?, the symbol asked about and its count at the end
    for row in range(batch_size):
        segments, used = [], 0
        while True:
            size = int(torch.randint(low, high + 1, (1,), generator=generator))
            if used + size + 1 > room:
                break
            segments.append(letters[torch.randint(0, alphabet, (size,), generator=generator)])
            used += size + 1
        if not segments:
            raise ValueError(f"length={length} leaves no room for one segment of up to {high} symbols")
        body = torch.cat([torch.cat([seg, torch.tensor([SEPARATOR])]) for seg in segments])
        asked = letters[int(torch.randint(0, alphabet, (1,), generator=generator))]
        count = DIGITS[int((segments[-1] == asked).sum())]
        tokens[row, length - 3 - len(body): length - 3] = body  # noise (.) fills the start
        tokens[row, length - 3:] = torch.tensor([QUERY, int(asked), count])
        targets[row, length - 2] = count
    return tokens, targets
