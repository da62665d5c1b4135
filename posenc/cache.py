"""KV caches for incremental decoding: the plain cache, and StreamingLLM's rolling cache with sinks.

``LayerCache`` keeps every key and value of one attention layer; ``KVCache`` holds one per layer.

``RollingLayerCache(sink_tokens, window)`` keeps the first ``sink_tokens`` tokens forever and the last
``window`` tokens (the new ones included), evicting the ones in between as the stream moves on: the
cache of StreamingLLM (Xiao et al. 2024). Positions are assigned *within the cache*: the kept tokens sit
at positions ``0 .. length-1`` whatever their place in the original text, so a model never sees a position
beyond ``sink_tokens + window - 1`` however long the stream. With RoPE the cached keys were rotated to
their old positions; when ``e`` tokens are evicted, the kept window's keys move ``e`` places down, and
since rotations compose, rotating them by ``-e`` positions puts them where a fresh pass over the kept
tokens would, up to rounding (Hugging Face's former ``SinkCache`` did the same). That holds for a RoPE table
that does not depend on the length: with dynamic NTK scaling, or LongRoPE, and a capacity above the original
length, the table changes once the kept tokens pass that length, a key rotated with one table and shifted
with the other is at neither table's position, and the rolling cache no longer equals a fresh pass
(``MultiHeadAttention._shift_keys``).

The rounding is why a rolling cache keeps its keys in float32 whatever the model's dtype, and hands them
back in the model's dtype. A kept key is re-rotated at every eviction, up to ``window`` times; stored back
in bfloat16 (8 significant bits) after each rotation, the roundings pile up, mostly as angle drift, to a
relative error of about 0.5 after 1000 rotations. Kept in float32, the same rotations drift by about 1e-5
after 1020 (of the order of ``window * 2**-24``), and the key is rounded to the model's dtype once more when
read: twice in all, against once in a fresh pass, whatever the stream's length. StreamingLLM itself caches
keys *before* rotation and rotates the cache by slot at every step, which has no drift at all; here the
attention layer hands the cache keys it has already rotated, so float32 storage is the change that stays
inside the cache, with the same result (tested in bfloat16 and float16 against a float64 pass over the
kept tokens: within 1.5 times a fresh pass's error, where re-rotated bfloat16 keys gave 15 times).
"""

from __future__ import annotations

from typing import Callable

import torch

from ._validate import check_int


class LayerCache:
    """Keys and values of one attention layer seen so far, each ``[batch, heads, length, head_dim]``, and
    their ``positions`` (``[batch or 1, length]``) when they were added with explicit positions."""

    def __init__(self):
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None
        self.positions: torch.Tensor | None = None

    @property
    def length(self) -> int:
        return 0 if self.k is None else self.k.shape[2]

    def make_room(self, new_tokens: int, shift_keys: Callable | None = None) -> None:
        """Called before ``new_tokens`` are added; a plain cache keeps everything, so nothing happens."""

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Add new keys/values along the sequence axis; return all of them."""
        if self.k is None:
            self.k, self.v = k, v
        else:
            self.k, self.v = torch.cat((self.k, k), dim=2), torch.cat((self.v, v), dim=2)
        return self.k, self.v


class RollingLayerCache(LayerCache):
    """A ``LayerCache`` that keeps the first ``sink_tokens`` tokens and the last ``window`` (StreamingLLM).

    Args:
        sink_tokens: tokens at the start that are never evicted (StreamingLLM uses 4), >= 0.
        window: the most recent tokens kept, counting the tokens being added, >= 1.

    ``make_room(new_tokens, shift_keys)`` evicts the oldest non-sink tokens so that ``new_tokens`` more fit,
    and calls ``shift_keys(k_kept_window, -drop)`` to move the kept window's keys down, where ``drop`` is
    the number of tokens this call evicts (RoPE layers re-rotate them; other layers pass ``None``: their
    keys carry no position). The attribute ``evicted`` counts the tokens dropped so far, over all calls.
    Explicit positions are not supported: the cache assigns them.

    ``k`` is held in float32 (float64 keys stay float64), so that re-rotating it at every eviction piles up
    no bfloat16 or float16 rounding (see the module docstring); ``append`` returns the keys in the dtype
    they came in. That has two costs for a bfloat16 or float16 model: float32 keys take twice the memory of
    the model's keys, so the cache (keys and values) is about 1.5 times a bfloat16 one; and every step casts
    the whole kept window of keys to the model's dtype to attend with it. StreamingLLM's own design, caching
    the keys before rotation and rotating the cache by slot at every step, avoids both: its keys stay in the
    model's dtype and never drift, since each step rotates them once from their unrotated values (that
    rotation of the kept window is the work it does in place of the cast).
    """

    def __init__(self, sink_tokens: int, window: int):
        super().__init__()
        self.sink_tokens = check_int("sink_tokens", sink_tokens, minimum=0)
        self.window = check_int("window", window)
        self.evicted = 0

    @property
    def capacity(self) -> int:
        return self.sink_tokens + self.window

    def make_room(self, new_tokens: int, shift_keys: Callable | None = None) -> None:
        if self.positions is not None:
            raise ValueError("RollingLayerCache assigns positions itself: do not pass explicit positions")
        if new_tokens > self.window:
            raise ValueError(f"cannot add {new_tokens} tokens at once to a rolling cache with window={self.window}; "
                             f"feed at most window tokens per call")
        drop = self.length + new_tokens - self.capacity
        if drop <= 0 or self.k is None:
            return
        keep_from = self.sink_tokens + drop  # tokens sink_tokens .. keep_from-1 go
        sink_k, sink_v = self.k[:, :, :self.sink_tokens], self.v[:, :, :self.sink_tokens]
        window_k, window_v = self.k[:, :, keep_from:], self.v[:, :, keep_from:]
        if shift_keys is not None:
            window_k = shift_keys(window_k, -drop)
        self.k, self.v = torch.cat((sink_k, window_k), dim=2), torch.cat((sink_v, window_v), dim=2)
        self.evicted += drop

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Add new keys/values; hold the keys in at least float32, return all of them in ``k``'s dtype."""
        keys, values = super().append(k.to(torch.promote_types(k.dtype, torch.float32)), v)
        return keys.to(k.dtype), values


class KVCache:
    """A cache per layer; ``length`` is the number of positions held (for a rolling cache, after eviction).

    ``KVCache(n_layers)`` keeps everything; ``KVCache(n_layers, sink_tokens=4, window=1020)`` gives every
    layer a ``RollingLayerCache`` (StreamingLLM).
    """

    def __init__(self, n_layers: int, *, sink_tokens: int | None = None, window: int | None = None):
        n_layers = check_int("n_layers", n_layers)
        if (sink_tokens is None) != (window is None):
            raise ValueError("pass both sink_tokens and window for a rolling cache, or neither")
        if window is None:
            self.layers = [LayerCache() for _ in range(n_layers)]
        else:
            self.layers = [RollingLayerCache(sink_tokens, window) for _ in range(n_layers)]

    @property
    def length(self) -> int:
        return self.layers[0].length

    def __getitem__(self, layer: int) -> LayerCache:
        return self.layers[layer]
