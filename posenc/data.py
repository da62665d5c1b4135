"""Data for the book's experiments: a real text corpus that exists on every machine, and batching.

The corpus is the source code of Python's own standard library (the ``.py`` files of the running
interpreter), read in sorted order, so every machine with the same Python version gets the same bytes
and nothing is downloaded. Text is tokenised as raw bytes (vocabulary 256).

A larger corpus, for the ``gpu`` presets (hundreds of millions of tokens would repeat the 4.7 MB standard
library dozens of times): ``corpus="packages"``, the ``.py`` files of the pinned packages in
``PACKAGES`` (about 110 MB), fixed by the versions ``requirements.txt`` pins and hashed the same way.

The bytes depend on the Python version: another interpreter (Colab's Python 3.12, say) has other
standard-library files and so trains and scores on a different corpus than the book's committed results
(Python 3.11.7). ``corpus_fingerprint`` records what a run used (Python version, file list, SHA-256 of
the bytes) so results can say which corpus they came from.
"""

from __future__ import annotations

import hashlib
import warnings
import platform
import os
import sysconfig
from pathlib import Path

import torch

from ._validate import check_int, check_tensor

VOCAB_SIZE = 256  # byte-level tokens


def stdlib_files() -> list[Path]:
    """The standard library's top-level ``.py`` files, sorted by name (tests and idle excluded).

    The folder is this Python's standard library, or ``$POSENC_STDLIB`` when set: a copy of another
    version's sources gives the same corpus under any Python (the GPU runs read Python 3.11's, as the
    committed CPU results do).
    """
    root = Path(os.environ.get("POSENC_STDLIB") or sysconfig.get_paths()["stdlib"])
    return sorted(p for p in root.glob("*.py") if not p.name.startswith(("test", "idle")))


PACKAGES = ("torch", "numpy", "sympy", "pandas", "matplotlib", "networkx")  # pinned in requirements.txt


def package_files() -> list[Path]:
    """The ``.py`` files of the installed packages in ``PACKAGES``, package by package in that order, each
    sorted by path; a clear error when one is not installed."""
    import importlib.util
    files = []
    for name in PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            raise ValueError(f"corpus='packages' needs the package {name!r} installed "
                             "(pip install -r requirements.txt)")
        root = Path(list(spec.submodule_search_locations)[0])
        files += sorted(root.rglob("*.py"))
    return files


CORPORA = {"stdlib": stdlib_files, "packages": package_files}


def _source_files(corpus: str) -> list[Path]:
    if corpus not in CORPORA:
        raise ValueError(f"corpus must be one of {sorted(CORPORA)}, got {corpus!r}")
    return CORPORA[corpus]()


def _first_files(max_bytes: int, corpus: str = "stdlib") -> list[Path]:
    """The ``corpus``'s files in order, up to the first that brings the total to ``max_bytes`` or more; a
    warning when the whole corpus is smaller than ``max_bytes`` (a study asking for more text than exists
    would otherwise repeat it many times over without saying so)."""
    chosen, total = [], 0
    for path in _source_files(corpus):
        chosen.append(path)
        total += path.stat().st_size
        if total >= max_bytes:
            break
    if total < max_bytes:
        name = {"stdlib": "the standard library", "packages": "the pinned packages' sources"}[corpus]
        warnings.warn(f"max_bytes={max_bytes:,} exceeds {name}'s {total:,} bytes: all of it is "
                      "used, and a study drawing more tokens than that repeats it", stacklevel=3)
    return chosen


def corpus_files(max_bytes: int = 2_000_000) -> list[Path]:
    """The files whose bytes make up ``stdlib_corpus(max_bytes)``, in order.

    Every file but the last is read whole; the last one is cut where the total reaches ``max_bytes``
    (all of ``stdlib_files()`` when the standard library is smaller than ``max_bytes``).
    """
    return _first_files(check_int("max_bytes", max_bytes))


def _label(path: Path, corpus: str) -> str:
    """A file's name in a fingerprint: its name in the standard library; its path inside the package
    folder for ``corpus="packages"`` (``torch/nn/__init__.py``), where names repeat."""
    if corpus == "stdlib":
        return path.name
    parts = path.parts
    starts = [i for i, part in enumerate(parts) if part in ("site-packages", "dist-packages")]
    return "/".join(parts[starts[-1] + 1:]) if starts else path.name


def _digest(tokens: torch.Tensor) -> str:
    return hashlib.sha256(tokens.to(torch.uint8).numpy().tobytes()).hexdigest()


def corpus_fingerprint(max_bytes: int = 2_000_000, validation_fraction: float | None = None,
                       corpus: str = "stdlib") -> dict:
    """What identifies the corpus on this machine, for printing beside results or storing with them.

    Args:
        max_bytes: as for ``stdlib_corpus`` (or ``stdlib_split``).
        validation_fraction: ``None`` describes ``stdlib_corpus(max_bytes)``; a fraction describes
            ``stdlib_split(max_bytes, validation_fraction, corpus)``.
        corpus: ``"stdlib"`` or ``"packages"`` (for a split; ``stdlib_corpus`` is the standard library's).

    Returns:
        A dict with ``"python"`` (the interpreter version whose standard library is read) and
        ``"max_bytes"``; then, for ``stdlib_corpus``, ``"files"`` (file names in order),
        ``"n_bytes"`` and ``"sha256"`` (hex digest of the byte values); for a split,
        ``"validation_fraction"`` and one such ``{"files", "n_bytes", "sha256"}`` dict under
        ``"train"`` and under ``"validation"``.
    """
    max_bytes = check_int("max_bytes", max_bytes)
    fingerprint = {"python": platform.python_version(), "max_bytes": max_bytes}
    if corpus != "stdlib":
        fingerprint["corpus"] = corpus
    if validation_fraction is None:
        if corpus != "stdlib":
            raise ValueError(f"corpus={corpus!r} is described as a split: pass validation_fraction")
        tokens = stdlib_corpus(max_bytes)
        return {**fingerprint, "files": [p.name for p in corpus_files(max_bytes)],
                "n_bytes": int(tokens.numel()), "sha256": _digest(tokens)}
    train, validation = stdlib_split(max_bytes, validation_fraction, corpus)
    train_files, validation_files = split_files(max_bytes, validation_fraction, corpus)
    fingerprint["validation_fraction"] = validation_fraction
    for name, files, tokens in (("train", train_files, train),
                                ("validation", validation_files, validation)):
        fingerprint[name] = {"files": [_label(p, corpus) for p in files], "n_bytes": int(tokens.numel()),
                             "sha256": _digest(tokens)}
    return fingerprint


def _bytes_of(files) -> torch.Tensor:
    data = bytearray(b"".join(path.read_bytes() for path in files))
    if not data:  # torch.frombuffer refuses an empty buffer
        return torch.zeros(0, dtype=torch.long)
    return torch.frombuffer(data, dtype=torch.uint8).long()


def stdlib_corpus(max_bytes: int = 2_000_000) -> torch.Tensor:
    """Up to ``max_bytes`` bytes of standard-library source as a LongTensor ``[n]`` of byte values."""
    max_bytes = check_int("max_bytes", max_bytes)
    return _bytes_of(_first_files(max_bytes))[:max_bytes]


def stdlib_split(max_bytes: int = 4_000_000, validation_fraction: float = 0.1,
                 corpus: str = "stdlib") -> tuple[torch.Tensor, torch.Tensor]:
    """A train/validation split of the standard-library corpus *by file*, so no file is in both.

    Files are taken in sorted order until about ``max_bytes``; every ``round(1 / validation_fraction)``-th
    file (the 10th, 20th, ... for 0.1) goes to validation, the rest to training. ``corpus="packages"``
    reads the pinned packages' sources instead (``package_files``).

    Returns:
        ``(train, validation)``, 1-D LongTensors of byte values.
    """
    max_bytes = check_int("max_bytes", max_bytes)
    if not 0 < validation_fraction < 1:
        raise ValueError(f"validation_fraction must be in (0, 1), got {validation_fraction}")
    train_files, validation_files = split_files(max_bytes, validation_fraction, corpus)
    return _bytes_of(train_files), _bytes_of(validation_files)


def stdlib_splits(max_bytes: int = 4_000_000, fraction: float = 0.1,
                  corpus: str = "stdlib") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(train, development, validation)``: ``stdlib_split``'s validation files, and every
    ``round(1 / fraction)``-th of its training files held out as a development split (for choosing
    settings such as the learning rate without touching the evaluation data); training is the rest."""
    train_files, validation_files = split_files(max_bytes, fraction, corpus)
    every = max(2, round(1 / fraction))
    development_files = train_files[every // 2::every]
    train_files = [p for p in train_files if p not in development_files]
    return _bytes_of(train_files), _bytes_of(development_files), _bytes_of(validation_files)


def split_files(max_bytes: int, validation_fraction: float = 0.1,
                corpus: str = "stdlib") -> tuple[list[Path], list[Path]]:
    """The file lists behind ``stdlib_split``: (training files, validation files)."""
    every = max(2, round(1 / validation_fraction))
    chosen = _first_files(max_bytes, corpus)
    validation = chosen[every - 1::every]
    training = [p for p in chosen if p not in validation]
    return training, validation


# ---- synthetic tasks for length generalisation ------------------------------------------------------
# Sequences are [x_1 .. x_n, SEP, y_1 .. y_n]: the model reads n symbols, then must produce the answer
# after the separator. Targets are -100 (not scored) everywhere except the answer, so a causal LM trained
# with next-token cross-entropy learns exactly the task.

TASKS = ("copy", "reverse")
TASK_VOCAB = 16  # symbols 0..15; the separator is token 16, so models need TASK_VOCAB + 1 tokens


def task_batch(task: str, batch_size: int, length: int | tuple[int, int], *, vocab: int = TASK_VOCAB,
               generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch of a synthetic task as (tokens ``[batch, 2n+1]``, targets ``[batch, 2n+1]``).

    Args:
        task: ``"copy"`` (answer = the input) or ``"reverse"`` (answer = the input reversed).
        batch_size: number of sequences.
        length: n, or a range ``(low, high)`` from which one n per batch is drawn (inclusive).
        vocab: symbols 0..vocab-1; the separator is token ``vocab`` (so models need vocab + 1 tokens).
        generator: for reproducible batches.
    """
    if task not in TASKS:
        raise ValueError(f"task must be one of {list(TASKS)}, got {task!r}")
    if isinstance(length, tuple):
        low, high = (check_int("length", n) for n in length)
        n = int(torch.randint(low, high + 1, (1,), generator=generator))
    else:
        n = check_int("length", length)
    symbols = torch.randint(0, vocab, (batch_size, n), generator=generator)
    answer = symbols if task == "copy" else symbols.flip(1)
    separator = torch.full((batch_size, 1), vocab)
    tokens = torch.cat([symbols, separator, answer], dim=1)
    targets = torch.full_like(tokens, -100)
    targets[:, n:2 * n] = answer  # position n (the separator) predicts answer[0], and so on
    return tokens, targets


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
