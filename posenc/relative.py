"""Relative position biases: T5's bucketed scalar bias (Raffel et al. 2020).

Each head learns one scalar per *bucket* of relative distance ``key_pos - query_pos``; nearby distances get
a bucket each, far ones share logarithmically wider buckets, and everything beyond ``max_distance`` shares
the last bucket.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ._validate import check_int, check_tensor


def t5_relative_bucket(relative_position: torch.Tensor, *, bidirectional: bool = True, num_buckets: int = 32,
                       max_distance: int = 128) -> torch.Tensor:
    """T5's bucket index for each relative position, identical to Mesh TensorFlow / Hugging Face T5.

    Args:
        relative_position: integer tensor of ``key_pos - query_pos``, any shape.
        bidirectional: encoder style (half the buckets for keys after the query) or causal decoder style
            (positive offsets, i.e. future keys, all map to bucket 0).
        num_buckets: total buckets (even and >= 4 when bidirectional, >= 2 otherwise).
        max_distance: distances at or beyond this share the last bucket; > the exact range.

    Returns:
        LongTensor of the same shape, values in ``[0, num_buckets)``.
    """
    check_tensor("relative_position", relative_position)
    if relative_position.is_floating_point() or relative_position.dtype == torch.bool:
        raise TypeError(f"relative_position must be an integer tensor, got dtype {relative_position.dtype}")
    num_buckets = check_int("num_buckets", num_buckets, minimum=2)
    max_distance = check_int("max_distance", max_distance)
    if bidirectional:
        if num_buckets % 2 or num_buckets < 4:
            raise ValueError(f"num_buckets must be even and >= 4 when bidirectional, got {num_buckets}")
        num_buckets //= 2
    max_exact = num_buckets // 2
    if max_distance <= max_exact:
        raise ValueError(f"max_distance must exceed the exact range {max_exact}, got {max_distance}")

    relative_position = relative_position.long()
    buckets = torch.zeros_like(relative_position)
    if bidirectional:
        buckets += (relative_position > 0).long() * num_buckets
        distance = relative_position.abs()
    else:
        distance = (-relative_position).clamp(min=0)
    # Distances below max_exact get their own bucket; larger ones are binned logarithmically up to max_distance.
    log_ratio = torch.log(distance.float().clamp(min=1) / max_exact) / math.log(max_distance / max_exact)
    large = max_exact + (log_ratio * (num_buckets - max_exact)).long()
    large = large.clamp(max=num_buckets - 1)
    return buckets + torch.where(distance < max_exact, distance, large)


class T5RelativeBias(nn.Module):
    """Learned per-head scalar bias per relative-position bucket.

    ``forward(q_len, k_len=None) -> [n_heads, q_len, k_len]``; the queries are the last q_len of the k_len
    positions (as with a KV cache), so ``bias[h, i, j] = table[bucket(j - (i + k_len - q_len)), h]``.
    ``bidirectional=True`` is T5's encoder; a causal decoder uses ``bidirectional=False``.
    """

    def __init__(self, n_heads: int, *, bidirectional: bool = True, num_buckets: int = 32, max_distance: int = 128):
        super().__init__()
        self.n_heads = check_int("n_heads", n_heads)
        self.bidirectional, self.num_buckets, self.max_distance = bool(bidirectional), num_buckets, max_distance
        t5_relative_bucket(torch.zeros(1, dtype=torch.long), bidirectional=bidirectional,
                           num_buckets=num_buckets, max_distance=max_distance)  # validates the settings
        self.table = nn.Embedding(num_buckets, n_heads)
        nn.init.normal_(self.table.weight, std=0.02)

    def forward(self, q_len: int, k_len: int | None = None) -> torch.Tensor:
        q_len = check_int("q_len", q_len)
        k_len = q_len if k_len is None else check_int("k_len", k_len)
        if k_len < q_len:
            raise ValueError(f"k_len must be >= q_len, got k_len={k_len} < q_len={q_len}")
        # bias[h, i, j] depends only on the offset j - (i + k_len - q_len): a Toeplitz matrix. Bucket the
        # q_len + k_len - 1 distinct offsets once, look them up, then lay them out on the [q_len, k_len] grid.
        device = self.table.weight.device
        offsets = torch.arange(-(k_len - 1), q_len, device=device)  # every key_pos - query_pos, ascending
        buckets = t5_relative_bucket(offsets, bidirectional=self.bidirectional, num_buckets=self.num_buckets,
                                     max_distance=self.max_distance)
        per_offset = self.table(buckets).T  # [heads, q_len + k_len - 1]
        # Row i reads the k_len offsets starting at index q_len - 1 - i: sliding windows, last one first.
        windows = per_offset.contiguous().unfold(1, k_len, 1)  # [heads, q_len, k_len], window w = [w, w + k_len)
        return windows.flip(1).contiguous()  # row i <- window q_len - 1 - i; contiguous for fused kernels

    def extra_repr(self) -> str:
        return (f"n_heads={self.n_heads}, bidirectional={self.bidirectional}, num_buckets={self.num_buckets}, "
                f"max_distance={self.max_distance}")
