from pathlib import Path

import pytest
import torch

from posenc import data


def test_corpus_is_the_stdlib_bytes_in_order():
    corpus = data.stdlib_corpus(5000)
    files = data.stdlib_files()
    assert files == sorted(files) and all(f.suffix == ".py" for f in files)
    expected = b"".join(f.read_bytes() for f in files[:5])[:5000]
    assert corpus.tolist() == list(expected)
    assert corpus.dtype == torch.long and int(corpus.max()) < data.VOCAB_SIZE


def test_encode_decode_round_trip():
    text = "def f(x):\n    return x  # é"
    assert data.decode(data.encode(text)) == text


def test_random_windows_are_shifted_by_one():
    corpus = torch.arange(100)
    x, y = data.random_windows(corpus, 4, 10, generator=torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (4, 10)
    assert torch.equal(y[:, :-1], x[:, 1:]) and torch.equal(y[:, -1], x[:, -1] + 1)


def test_random_windows_rejects_short_data():
    with pytest.raises(ValueError, match="longer than seq_len"):
        data.random_windows(torch.arange(5), 2, 5)


def test_corpus_files_are_those_whose_bytes_are_used():
    import itertools
    files = data.stdlib_files()
    sizes = [f.stat().st_size for f in files]
    starts = [0, *itertools.accumulate(sizes)][:-1]  # byte offset at which each file begins
    for max_bytes in (1, sizes[0], sizes[0] + 1, 2_000_000, sum(sizes) + 10):
        expected = [f for f, start in zip(files, starts) if start < max_bytes]
        assert data.corpus_files(max_bytes) == expected, max_bytes
    # the corpus is exactly those files' bytes, the last one cut short
    used = data.corpus_files(100_000)
    corpus = data.stdlib_corpus(100_000)
    assert corpus.tolist() == list(b"".join(f.read_bytes() for f in used)[:100_000])
    assert sum(f.stat().st_size for f in used[:-1]) < 100_000 <= sum(f.stat().st_size for f in used)
    with pytest.raises(ValueError, match="max_bytes"):
        data.corpus_files(0)


def test_corpus_fingerprint_matches_an_independent_hash():
    import hashlib
    import platform
    max_bytes = 50_000
    files = data.stdlib_files()
    raw = b"".join(f.read_bytes() for f in files)[:max_bytes]
    fingerprint = data.corpus_fingerprint(max_bytes)
    assert fingerprint["python"] == platform.python_version()
    assert fingerprint["max_bytes"] == max_bytes and fingerprint["n_bytes"] == len(raw)
    assert fingerprint["sha256"] == hashlib.sha256(raw).hexdigest()
    assert fingerprint["files"] == [f.name for f in data.corpus_files(max_bytes)]
    # a different corpus gives a different hash
    assert data.corpus_fingerprint(max_bytes - 1)["sha256"] != fingerprint["sha256"]


def test_corpus_fingerprint_of_a_split():
    import hashlib
    max_bytes, fraction = 300_000, 0.1
    training, validation = data.split_files(max_bytes, fraction)
    fingerprint = data.corpus_fingerprint(max_bytes, fraction)
    assert fingerprint["validation_fraction"] == fraction
    for name, files in (("train", training), ("validation", validation)):
        raw = b"".join(f.read_bytes() for f in files)
        part = fingerprint[name]
        assert part["files"] == [f.name for f in files] and part["n_bytes"] == len(raw)
        assert part["sha256"] == hashlib.sha256(raw).hexdigest()
    assert not set(fingerprint["train"]["files"]) & set(fingerprint["validation"]["files"])


def test_packages_corpus_reads_the_pinned_packages_sources_in_order():
    """The gpu presets' corpus: the .py files of the packages in data.PACKAGES, package by package, each
    sorted, labelled by their path inside site-packages, and free of the BOS byte."""
    import hashlib
    import importlib.util

    import posenc.tasks as tasks
    from posenc import data

    files = data.package_files()
    torch_root = Path(list(importlib.util.find_spec("torch").submodule_search_locations)[0])
    torch_files = sorted(torch_root.rglob("*.py"))
    assert files[:len(torch_files)] == torch_files  # torch first, sorted by path
    assert sum(f.stat().st_size for f in files) > 50e6  # room for the gpu presets' 50 MB
    train, validation = data.stdlib_split(3_000_000, 0.1, corpus="packages")
    fingerprint = data.corpus_fingerprint(3_000_000, 0.1, corpus="packages")
    assert fingerprint["corpus"] == "packages" and fingerprint["train"]["files"][0] == "torch/_VF.py"
    expected = hashlib.sha256(bytes(train.to(torch.uint8).tolist())).hexdigest()
    assert fingerprint["train"]["sha256"] == expected
    assert not (train == tasks.BOS).any() and not (validation == tasks.BOS).any()
    with pytest.raises(ValueError, match="corpus must be one of"):
        data.stdlib_split(1000, 0.1, corpus="web")


def test_fingerprint_of_the_packages_corpus_needs_a_split():
    from posenc import data
    with pytest.raises(ValueError, match="validation_fraction"):
        data.corpus_fingerprint(1000, corpus="packages")  # not silently the standard library's
