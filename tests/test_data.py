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
