"""One multi-head self-attention that takes any position method, and the KV cache it decodes with.

``position`` picks how order enters inside attention:

- ``"none"``: nothing happens inside attention. Use it for NoPE, and also for the absolute encodings
  (sinusoidal, learned), which are added to the token embeddings before the first layer
  (``TransformerLM`` does that; or ``SinusoidalEncoding`` / ``LearnedEncoding`` in your own model);
- ``"rope"``: queries and keys are rotated (``posenc.rope``);
- ``"t5"``: a learned bucketed bias is added to the scores (``posenc.relative``);
- ``"alibi"``: a linear distance penalty is added to the scores (``posenc.alibi``).

Beyond the method, a layer may attend within a sliding ``window`` or ``chunk`` (``posenc.masks``), scale
its queries with a position-dependent ``temperature`` (``posenc.temperature``), learn per-head ``sinks``
(``posenc.sinks``), gate its output (gated attention) and use its own ``softmax_scale``: the facts a ``posenc.plan.LayerSpec`` holds, so that
``MultiHeadAttention.from_spec`` builds any layer of Llama 4, Gemma 3, Cohere 2, gpt-oss or SmolLM3.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ._float32 import Float32Buffers
from ._validate import check_choice, check_int, check_integer_positions, check_positive_float, check_tensor
from . import alibi
from .cache import KVCache, LayerCache, RollingLayerCache  # noqa: F401 (re-exported)
from .block_sparse import block_sparse_attention
from .masks import layer_mask
from .plan import ATTENTION_POSITIONS, LayerSpec, Rope, Temperature
from .relative import T5RelativeBias, t5_relative_bucket
from .rope import RotaryEmbedding, apply_rope, rope_cos_sin
from .sinks import sink_attention  # noqa: F401 (re-exported)
from .temperature import attention_temperature

POSITION_METHODS = ("none", "sinusoidal", "learned", "t5", "rope", "alibi")  # TransformerLM's choices
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
        window: sliding-window attention: each query sees itself and the ``window - 1`` tokens before it.
        chunk: chunked local attention: queries see only earlier keys in their own block of ``chunk`` tokens.
        temperature: a ``posenc.plan.Temperature``: queries are multiplied by
            ``attention_temperature(position)`` (Llama 4's NoPE layers).
        sinks: learn one sink logit per head (``self.sinks``, ``[n_heads]``, zeros at init; gpt-oss).
        gate: a sigmoid output gate (``self.gate``, ``nn.Linear(dim, n_heads * head_dim)``): the concatenated
            heads are multiplied element by element by ``sigmoid(self.gate(x))`` before ``self.out`` (gated
            attention, Qiu et al. 2025; Qwen3-Next computes the same gate from a doubled query projection).
        softmax_scale: the score scale, default ``head_dim ** -0.5``.
        head_dim: each head's width, when it is not ``dim // n_heads`` (Gemma 3, gpt-oss): the projections then
            map ``dim`` to ``n_heads * head_dim`` and back. None (default): ``dim // n_heads``.
        block_sparse: run full passes without a gradient through ``posenc.block_sparse`` (compiled
            FlexAttention with a block mask: a window or chunk costs what it keeps); everything else
            (training, cached decoding, explicit positions, T5, attention weights) takes the usual path.

    ``MultiHeadAttention.from_spec(dim, n_heads, spec)`` builds the layer a ``LayerSpec`` describes, and
    ``layer.spec`` gives it back.

    ``forward(x[batch, seq, dim], *, cache=None, need_weights=False, position_bias=None, positions=None,
    rope_cos_sin=None) -> [batch, seq, dim]`` (and the ``[batch, heads, seq, k_len]`` attention weights when
    ``need_weights``). With a ``LayerCache`` the new tokens are the positions after those already cached, and
    their keys and values are appended; with a ``RollingLayerCache`` old tokens are evicted first and the
    new tokens take the next positions *within the cache* (StreamingLLM), the kept RoPE keys re-rotated.
    ``positions`` (whole numbers >= 0, ``[seq]`` or ``[batch, seq]``) gives the new tokens explicit
    positions instead (randomized positions, say): RoPE rotates by them, ALiBi and T5 use
    ``key_pos - query_pos``, the temperature reads them, ``"none"`` ignores them; a cache then remembers its
    keys' positions. ``rope_cos_sin=(cos, sin)`` (``[seq, rotary_dim]`` or ``[batch, seq, rotary_dim]``, as
    ``rope_cos_sin`` or ``mrope_cos_sin`` make them) rotates by given tables instead (M-RoPE).
    ``position_bias`` (``[heads, seq, k_len]``, from ``attention_bias``) is the additive mask computed once
    by the caller and shared by the layers, as T5 does; without it each layer computes its own. Masks
    (causal, window, chunk) follow the order of the tokens, whatever their positions.

    Kernels: with no score bias, window, chunk or sinks, PyTorch's fused causal kernel (``is_causal``, no
    mask built); ALiBi goes through ``alibi.alibi_attention``; otherwise the whole mask is passed to
    ``scaled_dot_product_attention`` as a 4-D ``[1, heads, q, k]`` float mask, the shape its fused CPU kernel
    accepts (a 3-D mask falls back to the unfused math kernel). That holds at inference: a bias that needs a
    gradient (a learned T5 table in training) makes PyTorch's CPU dispatcher take the math kernel whatever
    the mask's shape. Sinks go through ``sink_attention``. The ALiBi
    ``slopes`` buffer stays float32 when the module is cast to half precision.
    """

    float32_buffers = ("slopes",)

    def __init__(self, dim: int, n_heads: int, *, position: str = "none", causal: bool = True,
                 rope_base: float | None = None, rope_scaling: dict | None = None, rope_interleaved: bool = False,
                 t5_num_buckets: int = 32, t5_max_distance: int = 128, t5_bias: T5RelativeBias | None = None,
                 alibi_slopes: torch.Tensor | None = None, window: int | None = None, chunk: int | None = None,
                 temperature: Temperature | None = None, sinks: bool = False, softmax_scale: float | None = None,
                 head_dim: int | None = None, gate: bool = False, block_sparse: bool = False):
        super().__init__()
        self.block_sparse = bool(block_sparse)
        dim, n_heads = check_int("dim", dim), check_int("n_heads", n_heads)
        if head_dim is None and dim % n_heads:
            raise ValueError(f"dim must be divisible by n_heads, got dim={dim}, n_heads={n_heads} (or pass head_dim)")
        if position in ABSOLUTE_METHODS:
            raise ValueError(f"position={position!r} is an absolute encoding: it is added to the token embeddings "
                             f"before the first layer (TransformerLM(position={position!r}) does that, or use "
                             f"SinusoidalEncoding / LearnedEncoding), not inside attention; use position='none' "
                             f"for the attention layers of such a model")
        self.position = check_choice("position", position, ATTENTION_POSITIONS)
        # Validated by LayerSpec (window/chunk exclusive, positive ints, a Temperature, a positive scale).
        self._spec_fields = LayerSpec(position, window=window, chunk=chunk, temperature=temperature,
                                      softmax_scale=softmax_scale, head_dim=head_dim,
                                      **({"rope": Rope(rope_base, rope_scaling, rope_interleaved)}
                                         if position == "rope" else {}))
        self.head_dim = dim // n_heads if head_dim is None else head_dim
        self.dim, self.n_heads, self.causal = dim, n_heads, bool(causal)
        self.inner_dim = n_heads * self.head_dim  # the width of the concatenated heads
        if (window is not None or chunk is not None) and not causal:
            raise ValueError("window and chunk need causal=True (they restrict a decoder's view of the past)")
        self.window, self.chunk, self.temperature = window, chunk, temperature
        self.softmax_scale = None if softmax_scale is None else check_positive_float("softmax_scale", softmax_scale)
        self.qkv = nn.Linear(dim, 3 * self.inner_dim)
        self.out = nn.Linear(self.inner_dim, dim)
        self.sinks = nn.Parameter(torch.zeros(n_heads)) if sinks else None
        self.gate = nn.Linear(dim, self.inner_dim) if gate else None
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

    @classmethod
    def from_spec(cls, dim: int, n_heads: int, spec: LayerSpec, *, causal: bool = True,
                  t5_bias: T5RelativeBias | None = None, **options) -> "MultiHeadAttention":
        """The attention layer a ``posenc.plan.LayerSpec`` describes; ``options`` go to a subclass's constructor
        (``posenc.gqa.GroupedQueryAttention``: ``n_kv_heads``, ``bias``)."""
        if not isinstance(spec, LayerSpec):
            raise TypeError(f"spec must be a posenc.plan.LayerSpec, got {type(spec).__name__}")
        if spec.mixer != "attention":
            raise ValueError(f"MultiHeadAttention builds mixer='attention', got a LayerSpec with mixer={spec.mixer!r} "
                             f"(TransformerLM builds every kind; posenc.model.MIXER_MODULES names the module)")
        if spec.conv is not None:
            raise ValueError("LayerSpec.conv is a posenc.mixers.conv.ShortConv before the layer, built by TransformerLM's "
                             "Block, not by MultiHeadAttention: build it yourself or drop conv from the spec")
        rope = {}
        if spec.rope is not None:
            rope = dict(rope_base=spec.rope.base, rope_scaling=spec.rope.scaling, rope_interleaved=spec.rope.interleaved)
        return cls(dim, n_heads, position=spec.position, causal=causal, t5_bias=t5_bias, window=spec.window,
                   chunk=spec.chunk, temperature=spec.temperature, sinks=spec.sinks, softmax_scale=spec.softmax_scale,
                   head_dim=spec.head_dim, gate=spec.gate, **rope, **options)

    @property
    def spec(self) -> LayerSpec:
        """This layer as a ``LayerSpec``."""
        fields = {name: getattr(self._spec_fields, name) for name in ("position", "rope", "window", "chunk",
                                                                     "temperature", "softmax_scale", "head_dim")}
        return LayerSpec(**fields, sinks=self.sinks is not None, gate=self.gate is not None)

    def attention_bias(self, q_len: int, k_len: int, *, device=None, query_positions: torch.Tensor | None = None,
                       key_positions: torch.Tensor | None = None) -> torch.Tensor | None:
        """The whole additive mask: ``score_bias`` plus ``-inf`` where the layer's mask (causal, window or
        chunk) hides a key, or None.

        Shape ``[heads, q_len, k_len]`` (``[q_len, k_len]`` for a layer with no score bias); with
        explicit ``query_positions`` ``[b, q_len]`` and ``key_positions`` ``[b, k_len]`` (b may be 1, see
        ``checked_positions``), ``[b, heads, q_len, k_len]``. The mask follows the order of the
        tokens, whatever their positions. A model whose layers share one bias (T5) calls this once and
        passes the result as ``position_bias``.
        """
        bias = self.score_bias(q_len, k_len, query_positions=query_positions, key_positions=key_positions)
        visible = layer_mask(q_len, k_len, causal=self.causal, window=self.window, chunk=self.chunk, device=device)
        if visible is None:
            return bias
        bias = torch.zeros(q_len, k_len, device=device) if bias is None else bias
        return bias.masked_fill(~visible, float("-inf"))

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
                position_bias: torch.Tensor | None = None, positions: torch.Tensor | None = None,
                rope_cos_sin: tuple[torch.Tensor, torch.Tensor] | None = None):
        check_tensor("x", x, min_dim=3)
        if x.dim() != 3 or x.shape[-1] != self.dim:
            raise ValueError(f"x must be [batch, seq, {self.dim}], got {tuple(x.shape)}")
        if cache is not None and not self.causal:
            raise ValueError("a KV cache needs causal=True: earlier outputs cannot change as tokens arrive")
        if isinstance(cache, RollingLayerCache) and positions is not None:
            raise ValueError("a RollingLayerCache assigns positions within the cache: do not pass positions")
        if rope_cos_sin is not None and self.position != "rope":
            raise ValueError(f"rope_cos_sin is for position='rope' layers, this one has position={self.position!r}")
        batch, seq, _ = x.shape
        q, k, v = self._project(x)
        if cache is not None:  # a rolling cache evicts here, re-rotating the RoPE keys it keeps
            cache.make_room(seq, self._shift_keys if self.position == "rope" else None)
        explicit = positions is not None or (cache is not None and cache.positions is not None)
        if explicit:
            if positions is None:
                raise ValueError("this cache holds keys added with explicit positions: pass positions for the new "
                                 "tokens too")
            positions = checked_positions(positions, batch, seq, device=x.device)
        past = 0 if cache is None else cache.length
        if self.position == "rope":
            q, k = self._rotate(q, k, past, positions, rope_cos_sin)
        if self.temperature is not None:
            query_positions = positions if explicit else torch.arange(past, past + seq, device=x.device)[None]
            factor = attention_temperature(query_positions, floor_scale=self.temperature.floor_scale,
                                           scale=self.temperature.scale)  # [batch or 1, seq]
            q = (q * factor[:, None, :, None]).to(q.dtype)
        key_positions = None
        if explicit:
            key_positions = positions if cache is None else joined_positions(cache.positions, cache.length, positions)
        if cache is not None:
            k, v = cache.append(k, v)
            if explicit:
                cache.positions = key_positions
        y, weights = self._attention(q, k, v, need_weights, position_bias, positions, key_positions)
        y = y.transpose(1, 2).reshape(batch, seq, self.inner_dim)
        if self.gate is not None:
            y = y * torch.sigmoid(self.gate(x))
        y = self.out(y)
        return (y, weights) if need_weights else y

    def _project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``x[batch, seq, dim]`` -> q, k, v, each ``[batch, heads, seq, head_dim]`` (``posenc.gqa`` returns fewer
        key/value heads)."""
        batch, seq, _ = x.shape
        q, k, v = self.qkv(x).view(batch, seq, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        return q, k, v

    def _rotate(self, q, k, past, positions, tables):
        """q, k rotated by given tables, explicit positions, or positions ``past ..``."""
        if tables is not None:
            cos, sin = tables
            if cos.dim() == 3:  # [batch, seq, rotary_dim] -> broadcast over heads
                cos, sin = cos[:, None], sin[:, None]
            interleaved = self.rotary.interleaved
            return apply_rope(q, cos, sin, interleaved=interleaved), apply_rope(k, cos, sin, interleaved=interleaved)
        if positions is not None:
            return self.rotary(q, k, positions=positions)
        return self.rotary(q, k, offset=past)

    def _shift_keys(self, k: torch.Tensor, shift: int) -> torch.Tensor:
        """Keys rotated by ``shift`` more positions (negative: back), for a rolling cache. Rotations compose."""
        # The shift uses the table for the kept length. It is exact while that is the table the keys were
        # rotated with. With LongRoPE or dynamic scaling the table changes once the kept keys pass the
        # original length: a key rotated with the short table and shifted with the long one is then at
        # neither table's position, while a fresh pass rotates every key with the long table.
        inv_freq = self.rotary.frequencies_for(torch.arange(k.shape[2], device=k.device))
        cos, sin = rope_cos_sin(torch.full((k.shape[2],), shift, device=k.device), inv_freq,
                                interleaved=self.rotary.interleaved)
        return apply_rope(k, cos, sin, interleaved=self.rotary.interleaved)

    def _attention(self, q, k, v, need_weights, position_bias, positions, key_positions):
        """Pick the kernel: fused causal, ALiBi's folded form, or a full additive mask (+ sinks)."""
        q_len, k_len = q.shape[2], k.shape[2]
        if (self.block_sparse and q_len == k_len and self.causal and self.position != "t5" and not need_weights
                and position_bias is None and positions is None
                and not (torch.is_grad_enabled() and q.requires_grad)):
            slopes = self.slopes if self.position == "alibi" else None
            return block_sparse_attention(q, k, v, window=self.window, chunk=self.chunk, slopes=slopes,
                                          sinks=self.sinks, scale=self.softmax_scale), None
        plain = (self.causal and self.window is None and self.chunk is None and self.sinks is None
                 and positions is None and position_bias is None and not need_weights)
        if plain and self.position == "alibi" and self.softmax_scale is None:
            return alibi.alibi_attention(q, k, v, slopes=self.slopes, causal=True), None
        if plain and self.position in ("none", "rope") and q_len == k_len:
            # no score bias and no cache: PyTorch's fused causal kernel, no [seq, seq] mask built
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.softmax_scale), None
        if position_bias is None:
            bias = self.attention_bias(q_len, k_len, device=q.device, query_positions=positions,
                                       key_positions=key_positions)
        else:
            bias = position_bias  # already masked by the caller's layer; a window or chunk layer is causal
            visible = layer_mask(q_len, k_len, causal=True, window=self.window, chunk=self.chunk, device=q.device) \
                if (self.window or self.chunk) else None
            if visible is not None:
                bias = bias.masked_fill(~visible, float("-inf"))
        if self.sinks is not None:
            mask = None if bias is None else _four_dimensional(bias.to(q.dtype))
            return _pair(sink_attention(q, k, v, self.sinks, mask=mask, scale=self.softmax_scale,
                                        need_weights=need_weights))
        return self._attend(q, k, v, bias, need_weights)

    def _attend(self, q, k, v, bias, need_weights):
        """softmax(q k^T * scale + bias) v, and the weights when ``need_weights``."""
        scale = self.head_dim ** -0.5 if self.softmax_scale is None else self.softmax_scale
        if need_weights:
            scores = q @ k.transpose(-2, -1) * scale
            weights = (scores if bias is None else scores + bias.to(scores.dtype)).softmax(dim=-1)
            return weights @ v, weights
        mask = None if bias is None else _four_dimensional(bias.to(q.dtype))
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale), None

    def extra_repr(self) -> str:
        return f"dim={self.dim}, n_heads={self.n_heads}, {self.spec.describe()}, causal={self.causal}"


def _pair(result):
    return result if isinstance(result, tuple) else (result, None)
