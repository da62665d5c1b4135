"""Data for the book's experiments: a real text corpus that exists on every machine, and batching.

The corpus is the source code of Python's own standard library (the ``.py`` files of the running
interpreter), read in sorted order, so every machine with the same Python version gets the same bytes
and nothing is downloaded. Text is tokenised as raw bytes (vocabulary 256).
"""

from __future__ import annotations

import sysconfig
from pathlib import Path

import torch

from ._validate import check_int, check_tensor

VOCAB_SIZE = 256  # byte-level tokens


def stdlib_files() -> list[Path]:
    """The standard library's top-level ``.py`` files, sorted by name (tests and idle excluded)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    return sorted(p for p in root.glob("*.py") if not p.name.startswith(("test", "idle")))


def stdlib_corpus(max_bytes: int = 2_000_000) -> torch.Tensor:
    """Up to ``max_bytes`` bytes of standard-library source as a LongTensor ``[n]`` of byte values."""
    max_bytes = check_int("max_bytes", max_bytes)
    chunks, total = [], 0
    for path in stdlib_files():
        data = path.read_bytes()
        chunks.append(data)
        total += len(data)
        if total >= max_bytes:
            break
    data = b"".join(chunks)[:max_bytes]
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).long()


def encode(text: str) -> torch.Tensor:
    """UTF-8 bytes of ``text`` as a LongTensor ``[n]``."""
    return torch.tensor(list(text.encode("utf-8")), dtype=torch.long)


def decode(tokens) -> str:
    """Inverse of ``encode`` (invalid UTF-8 is replaced)."""
    return bytes(int(t) for t in tokens).decode("utf-8", errors="replace")


def random_windows(data: torch.Tensor, batch_size: int, seq_len: int, *,
                   generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Random language-modelling windows: inputs ``[batch, seq_len]`` and next-token targets, same shape."""
    check_tensor("data", data, min_dim=1)
    batch_size, seq_len = check_int("batch_size", batch_size), check_int("seq_len", seq_len)
    if data.dim() != 1 or data.numel() <= seq_len:
        raise ValueError(f"data must be 1-D and longer than seq_len={seq_len}, got shape {tuple(data.shape)}")
    starts = torch.randint(0, data.numel() - seq_len, (batch_size,), generator=generator)
    index = starts[:, None] + torch.arange(seq_len + 1)
    windows = data[index]
    return windows[:, :-1], windows[:, 1:]
