"""One multi-head self-attention that takes any position method, and the KV cache it decodes with.

``position`` picks how order enters inside attention:

- ``"none"``: nothing happens inside attention. Use it for NoPE, and also for the absolute encodings
  (sinusoidal, learned), which are added to the token embeddings before the first layer
  (``TransformerLM`` does that; or ``SinusoidalEncoding`` / ``LearnedEncoding`` in your own model);
- ``"rope"``: queries and keys are rotated (``posenc.rope``);
- ``"t5"``: a learned bucketed bias is added to the scores (``posenc.relative``);
- ``"alibi"``: a linear distance penalty is added to the scores (``posenc.alibi``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ._float32 import Float32Buffers
from ._validate import check_choice, check_int, check_integer_positions, check_tensor
from . import alibi
from .relative import T5RelativeBias, t5_relative_bucket
from .rope import RotaryEmbedding

POSITION_METHODS = ("none", "sinusoidal", "learned", "t5", "rope", "alibi")  # TransformerLM's choices
ATTENTION_POSITIONS = ("none", "t5", "rope", "alibi")  # what happens inside attention
ABSOLUTE_METHODS = ("sinusoidal", "learned")  # added to the embeddings, nothing inside attention


def _four_dimensional(mask: torch.Tensor) -> torch.Tensor:
    # [q, k] or [heads, q, k] -> [1, heads or 1, q, k]. PyTorch's CPU dispatch sends a 3-D float mask to
    # the unfused math kernel; the same mask with a leading batch axis runs the fused flash kernel.
    return mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape))


def checked_positions(positions, batch: int, seq: int, *, device=None) -> torch.Tensor:
    """Explicit token positions as a LongTensor ``[batch or 1, seq]`` (from ``[seq]`` or ``[batch, seq]``).

    Raises ``ValueError`` unless they are whole numbers >= 0 with ``seq`` entries per row and a batch
    size of 1 or ``batch``. They need not increase: causality follows the order of the tokens.
    """
    check_integer_positions("positions", positions)
    if positions.dim() not in (1, 2) or positions.shape[-1] != seq:
        raise ValueError(f"positions must be [seq] or [batch, seq] with seq={seq}, got {tuple(positions.shape)}")
    if positions.dim() == 2 and positions.shape[0] not in (1, batch):
        raise ValueError(f"positions' batch size {positions.shape[0]} must be 1 or {batch}")
    if positions.numel() and positions.min() < 0:
        raise ValueError(f"positions must be >= 0, got {int(positions.min())}")
    positions = positions.reshape(-1, seq).long()
    return positions if device is None else positions.to(device)


def joined_positions(past: torch.Tensor | None, past_length: int, new: torch.Tensor) -> torch.Tensor:
    """Positions of every key: the cached keys' (``past``, or ``0 .. past_length-1`` when they were
    added without explicit positions) followed by ``new``; ``[batch or 1, past_length + seq]``."""
    if past is None:
        past = torch.arange(past_length, device=new.device)[None]
    rows = max(past.shape[0], new.shape[0])
    return torch.cat((past.expand(rows, -1), new.expand(rows, -1)), dim=1)


def relative_distances(query_positions: torch.Tensor, key_positions: torch.Tensor) -> torch.Tensor:
    """``key_pos - query_pos`` for every query and key: ``[b, q], [b, k] -> [b, q, k]``."""
    return key_positions[:, None, :] - query_positions[:, :, None]


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

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Add new keys/values along the sequence axis; return all of them."""
        if self.k is None:
            self.k, self.v = k, v
        else:
            self.k, self.v = torch.cat((self.k, k), dim=2), torch.cat((self.v, v), dim=2)
        return self.k, self.v


class KVCache:
    """A ``LayerCache`` per layer; ``length`` is the number of positions already processed."""

    def __init__(self, n_layers: int):
        self.layers = [LayerCache() for _ in range(check_int("n_layers", n_layers))]

    @property
    def length(self) -> int:
        return self.layers[0].length

    def __getitem__(self, layer: int) -> LayerCache:
        return self.layers[layer]


class MultiHeadAttention(Float32Buffers):
    """Multi-head self-attention with a pluggable position method.

    Args:
        dim: model width, divisible by ``n_heads``.
        n_heads: number of heads.
        position: one of ``ATTENTION_POSITIONS``: ``"none"``, ``"t5"``, ``"rope"``, ``"alibi"``. The absolute
            methods (``"sinusoidal"``, ``"learned"``) raise ``ValueError``: they act on the embeddings, not
            inside attention, so an attention layer asked for them would silently have no position at all.
        causal: mask keys after each query (decoder) or not (encoder).
        rope_base, rope_scaling, rope_interleaved: passed to ``RotaryEmbedding`` when position="rope".
        t5_num_buckets, t5_max_distance: ``T5RelativeBias`` settings when position="t5".
        t5_bias: an existing ``T5RelativeBias`` to share (T5 shares one across layers).
        alibi_slopes: optional ``[n_heads]`` slopes when position="alibi".

    ``forward(x[batch, seq, dim], *, cache=None, need_weights=False, position_bias=None, positions=None)
    -> [batch, seq, dim]`` (and the ``[batch, heads, seq, k_len]`` attention weights when ``need_weights``).
    With a ``LayerCache`` the new tokens are the positions after those already cached, and their keys and
    values are appended. ``positions`` (whole numbers >= 0, ``[seq]`` or ``[batch, seq]``) gives the new
    tokens explicit positions instead (randomized positions, say): RoPE rotates by them, ALiBi and T5 use
    ``key_pos - query_pos``, ``"none"`` ignores them; a cache then remembers its keys' positions.
    ``position_bias`` (``[heads, seq, k_len]``, from ``attention_bias``) is the additive mask computed once
    by the caller and shared by the layers, as T5 does; without it each layer computes its own.

    Kernels: without a score bias, PyTorch's fused causal kernel (``is_causal``, no mask built); ALiBi goes
    through ``alibi.alibi_attention``; a materialised bias (T5, or ALiBi with a cache) is passed to
    ``scaled_dot_product_attention`` as a 4-D ``[1, heads, q, k]`` mask, the shape its fused CPU kernel
    accepts (a 3-D mask falls back to the unfused math kernel). The ALiBi ``slopes`` buffer stays float32
    when the module is cast to half precision.
    """

    float32_buffers = ("slopes",)

    def __init__(self, dim: int, n_heads: int, *, position: str = "none", causal: bool = True,
                 rope_base: float = 10000.0, rope_scaling: dict | None = None, rope_interleaved: bool = False,
                 t5_num_buckets: int = 32, t5_max_distance: int = 128, t5_bias: T5RelativeBias | None = None,
                 alibi_slopes: torch.Tensor | None = None):
        super().__init__()
        dim, n_heads = check_int("dim", dim), check_int("n_heads", n_heads)
        if dim % n_heads:
            raise ValueError(f"dim must be divisible by n_heads, got dim={dim}, n_heads={n_heads}")
        if position in ABSOLUTE_METHODS:
            raise ValueError(f"position={position!r} is an absolute encoding: it is added to the token embeddings "
                             f"before the first layer (TransformerLM(position={position!r}) does that, or use "
                             f"SinusoidalEncoding / LearnedEncoding), not inside attention; use position='none' "
                             f"for the attention layers of such a model")
        self.position = check_choice("position", position, ATTENTION_POSITIONS)
        self.dim, self.n_heads, self.head_dim, self.causal = dim, n_heads, dim // n_heads, bool(causal)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        if position == "rope":
            self.rotary = RotaryEmbedding(self.head_dim, base=rope_base, scaling=rope_scaling,
                                          interleaved=rope_interleaved)
        elif position == "t5":
            self.t5_bias = t5_bias if t5_bias is not None else T5RelativeBias(
                n_heads, bidirectional=not causal, num_buckets=t5_num_buckets, max_distance=t5_max_distance)
        elif position == "alibi":
            slopes = alibi_slopes if alibi_slopes is not None else alibi.alibi_slopes(n_heads)
            if tuple(slopes.shape) != (n_heads,):
                raise ValueError(f"alibi_slopes must have shape [{n_heads}], got {tuple(slopes.shape)}")
            self.register_buffer("slopes", slopes.float(), persistent=False)

    def attention_bias(self, q_len: int, k_len: int, *, device=None, query_positions: torch.Tensor | None = None,
                       key_positions: torch.Tensor | None = None) -> torch.Tensor | None:
        """The whole additive mask: ``score_bias`` plus ``-inf`` above the causal diagonal, or None.

        Shape ``[heads, q_len, k_len]`` (``[q_len, k_len]`` for a causal layer with no score bias); with
        explicit ``query_positions`` ``[b, q_len]`` and ``key_positions`` ``[b, k_len]`` (b may be 1, see
        ``checked_positions``), ``[b, heads, q_len, k_len]``. The causal mask follows the order of the
        tokens, whatever their positions. A model whose layers share one bias (T5) calls this once and
        passes the result as ``position_bias``.
        """
        bias = self.score_bias(q_len, k_len, query_positions=query_positions, key_positions=key_positions)
        if not self.causal:
            return bias
        hidden = ~alibi.causal_mask(q_len, k_len, device=device)
        bias = torch.zeros(q_len, k_len, device=device) if bias is None else bias
        return bias.masked_fill(hidden, float("-inf"))

    def score_bias(self, q_len: int, k_len: int, *, query_positions: torch.Tensor | None = None,
                   key_positions: torch.Tensor | None = None) -> torch.Tensor | None:
        """The additive score bias of this position method, ``[heads, q_len, k_len]``, or None.

        With explicit positions (both ``[b, q_len]`` and ``[b, k_len]``), ``[b, heads, q_len, k_len]``
        computed from ``key_pos - query_pos``: T5's bucket of it, or ALiBi's ``-slope * |key_pos - query_pos|``.
        """
        explicit = query_positions is not None
        if self.position == "t5":
            if not explicit:
                return self.t5_bias(q_len, k_len)
            t5 = self.t5_bias
            buckets = t5_relative_bucket(relative_distances(query_positions, key_positions),
                                         bidirectional=t5.bidirectional, num_buckets=t5.num_buckets,
                                         max_distance=t5.max_distance)
            return t5.table(buckets).permute(0, 3, 1, 2)  # [b, q, k, heads] -> [b, heads, q, k]
        if self.position == "alibi":
            if not explicit:
                return alibi.alibi_bias(self.n_heads, q_len, k_len, slopes=self.slopes)
            distance = relative_distances(query_positions, key_positions).abs().to(torch.float32)
            return -self.slopes[None, :, None, None] * distance[:, None]  # [b, heads, q_len, k_len]
        return None

    def forward(self, x: torch.Tensor, *, cache: LayerCache | None = None, need_weights: bool = False,
                position_bias: torch.Tensor | None = None, positions: torch.Tensor | None = None):
        check_tensor("x", x, min_dim=3)
        if x.dim() != 3 or x.shape[-1] != self.dim:
            raise ValueError(f"x must be [batch, seq, {self.dim}], got {tuple(x.shape)}")
        if cache is not None and not self.causal:
            raise ValueError("a KV cache needs causal=True: earlier outputs cannot change as tokens arrive")
        batch, seq, _ = x.shape
        q, k, v = self.qkv(x).view(batch, seq, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        if positions is not None or (cache is not None and cache.positions is not None):
            return self._forward_at_positions(q, k, v, cache, need_weights, position_bias, positions)
        offset = 0 if cache is None else cache.length
        if self.position == "rope":
            q, k = self.rotary(q, k, offset=offset)
        if cache is not None:
            k, v = cache.append(k, v)
        k_len = k.shape[2]

        if self.position == "alibi" and self.causal and not need_weights:
            y = alibi.alibi_attention(q, k, v, slopes=self.slopes, causal=True)
            weights = None
        elif self.causal and seq == k_len and not need_weights and self.position != "t5":
            # no score bias and no cache: PyTorch's fused causal kernel, no [seq, seq] mask built
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            weights = None
        else:
            bias = self.attention_bias(seq, k_len, device=x.device) if position_bias is None else position_bias
            y, weights = self._attend(q, k, v, bias, need_weights)
        y = self.out(y.transpose(1, 2).reshape(batch, seq, self.dim))
        return (y, weights) if need_weights else y

    def _forward_at_positions(self, q, k, v, cache, need_weights, position_bias, positions):
        """``forward`` with explicit positions (``[seq]`` or ``[batch, seq]``), or with a cache that holds them."""
        batch, _, seq, _ = q.shape
        if positions is None:
            raise ValueError("this cache holds keys added with explicit positions: pass positions for the new "
                             "tokens too")
        positions = checked_positions(positions, batch, seq, device=q.device)
        if self.position == "rope":
            q, k = self.rotary(q, k, positions=positions)
        key_positions = positions
        if cache is not None:
            key_positions = joined_positions(cache.positions, cache.length, positions)
            k, v = cache.append(k, v)
            cache.positions = key_positions
        bias = position_bias
        if bias is None:
            bias = self.attention_bias(seq, k.shape[2], device=q.device, query_positions=positions,
                                       key_positions=key_positions)
        y, weights = self._attend(q, k, v, bias, need_weights)
        y = self.out(y.transpose(1, 2).reshape(batch, seq, self.dim))
        return (y, weights) if need_weights else y

    def _attend(self, q, k, v, bias, need_weights):
        """softmax(q k^T / sqrt(head_dim) + bias) v, and the weights when ``need_weights``."""
        if need_weights:
            scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
            weights = (scores if bias is None else scores + bias.to(scores.dtype)).softmax(dim=-1)
            return weights @ v, weights
        mask = None if bias is None else _four_dimensional(bias.to(q.dtype))
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask), None

    def extra_repr(self) -> str:
        return f"dim={self.dim}, n_heads={self.n_heads}, position={self.position!r}, causal={self.causal}"
