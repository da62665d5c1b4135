"""Which keys each query may see: causal, sliding-window and chunked masks.

Every mask is boolean ``[q_len, k_len]``, True where query i may attend to key j. Queries are the last
``q_len`` of the ``k_len`` tokens (as with a KV cache: query i is token ``i + k_len - q_len``), and the
masks follow the order of the tokens, not their positions.

- ``causal_mask``: key j is visible from query i when j <= i (a decoder);
- ``sliding_window_mask``: ... and i - j < window: each query sees itself and the window - 1 tokens
  before it (Mistral, Gemma 2/3, gpt-oss, Cohere 2; Hugging Face's ``sliding_window`` has this meaning);
- ``chunked_mask``: ... and i, j fall in the same block of ``chunk`` tokens (Llama 4's chunked local
  attention: the window restarts at every multiple of ``chunk``).
"""

from __future__ import annotations

import torch

from ._validate import check_int


def _token_indices(q_len: int, k_len: int, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Token index of every query ``[q_len, 1]`` and key ``[1, k_len]`` (queries last)."""
    q_len, k_len = check_int("q_len", q_len, minimum=0), check_int("k_len", k_len, minimum=0)
    if q_len > k_len:
        raise ValueError(f"q_len must be <= k_len (the queries are the last q_len tokens), got {q_len} > {k_len}")
    query = torch.arange(k_len - q_len, k_len, device=device)[:, None]
    return query, torch.arange(k_len, device=device)[None, :]


def causal_mask(q_len: int, k_len: int, *, device=None) -> torch.Tensor:
    """Boolean ``[q_len, k_len]``, True where query i (token i + k_len - q_len) may see key j: j <= i."""
    query, key = _token_indices(q_len, k_len, device)
    return key <= query


def sliding_window_mask(q_len: int, k_len: int, window: int, *, device=None) -> torch.Tensor:
    """Boolean ``[q_len, k_len]``: causal, and each query sees only the last ``window`` tokens (itself included)."""
    window = check_int("window", window)
    query, key = _token_indices(q_len, k_len, device)
    return (key <= query) & (query - key < window)


def chunked_mask(q_len: int, k_len: int, chunk: int, *, device=None) -> torch.Tensor:
    """Boolean ``[q_len, k_len]``: causal, and query and key in the same block of ``chunk`` tokens."""
    chunk = check_int("chunk", chunk)
    query, key = _token_indices(q_len, k_len, device)
    return (key <= query) & (query // chunk == key // chunk)


def layer_mask(q_len: int, k_len: int, *, causal: bool = True, window: int | None = None,
               chunk: int | None = None, device=None) -> torch.Tensor | None:
    """The mask of one attention layer: ``None`` (everything visible), or boolean ``[q_len, k_len]``."""
    if window is not None and chunk is not None:
        raise ValueError("pass window or chunk, not both")
    if window is not None or chunk is not None:
        if not causal:
            raise ValueError("window and chunk need causal=True")
        if window is not None:
            return sliding_window_mask(q_len, k_len, window, device=device)
        return chunked_mask(q_len, k_len, chunk, device=device)
    return causal_mask(q_len, k_len, device=device) if causal else None
