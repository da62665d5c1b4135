"""Multi-head Latent Attention (MLA) with decoupled RoPE, as in DeepSeek-V2/V3.

MLA caches one small latent per token instead of per-head keys and values, and rebuilds the keys and
values from it with an up-projection. RoPE does not fit that scheme directly: a rotated key
``R_j W_uk c_j`` has the rotation ``R_j`` (which depends on the key position j) between the up-projection
``W_uk`` and the latent ``c_j``, so ``W_uk`` cannot be folded into the query once and for all. DeepSeek's
answer is to *decouple* position from content. Each head's query and key have

- ``qk_nope_head_dim`` position-free ("no position embedding") features, computed from the latent, and
- ``qk_rope_head_dim`` rotary features; on the key side this slice is ONE head, computed from the token
  directly and shared (broadcast) by all heads.

The score of query i and key j in head h is the sum of the two dot products, so an inference engine can
absorb ``W_uk`` into the query and score against the cache alone (``absorbed_scores``).

Shape legend (Hugging Face ``DeepseekV3Config`` names; DeepSeek-V3 values in brackets)::

    dim               model width (hidden_size)                                       [7168]
    n_heads           attention heads (num_attention_heads)                           [128]
    q_lora_rank       width of the query's low-rank bottleneck, or None for a plain q_proj  [1536]
    kv_lora_rank      width of the cached latent c (keys and values are rebuilt from it)   [512]
    qk_nope_head_dim  position-free query/key features per head                       [128]
    qk_rope_head_dim  rotary query/key features per head; one shared rotary key head  [64]
    v_head_dim        value features per head                                         [128]
    qk_head_dim       qk_nope_head_dim + qk_rope_head_dim, the width a score sums over [192]

Per token the cache holds ``kv_lora_rank + qk_rope_head_dim`` numbers (576 in DeepSeek-V3) instead of
``2 * n_heads * head_dim`` for ordinary multi-head attention.

The submodules carry Hugging Face's names (``q_a_proj``, ``q_a_layernorm``, ``q_b_proj`` or ``q_proj``,
``kv_a_proj_with_mqa``, ``kv_a_layernorm``, ``kv_b_proj``, ``o_proj``), so the weights of one
``DeepseekV3Attention`` layer of transformers 5.x load with ``load_state_dict`` and give the same outputs
(the tests check). With YaRN, DeepSeek puts the temperature into the softmax scale (``yarn_softmax_scale``).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ._float32 import Float32Buffers
from ._validate import check_choice, check_even, check_int, check_tensor
from .norms import RMSNorm
from .rope import rope_cos_sin, rope_formula, rope_frequencies


def yarn_mscale(factor: float, mscale: float = 1.0) -> float:
    """YaRN's magnitude correction ``0.1 * mscale * ln(factor) + 1`` (1.0 when ``factor <= 1``)."""
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def yarn_softmax_scale(head_dim: int, scaling: dict | None = None) -> float:
    """The softmax scale of DeepSeek's attention: ``head_dim ** -0.5``, times ``yarn_mscale(factor,
    mscale_all_dim) ** 2`` when ``scaling`` has a non-zero ``mscale_all_dim`` and a ``rope_type`` other than
    ``"default"`` (as Hugging Face's ``yarn_apply_mscale``: in shipped checkpoints that type is YaRN).

    Args:
        head_dim: the width a score sums over (``qk_nope_head_dim + qk_rope_head_dim`` in MLA).
        scaling: a Hugging Face ``rope_parameters`` / ``rope_scaling`` dict, or None.

    DeepSeek-V3 ships factor 40 and ``mscale == mscale_all_dim == 1``: cos and sin then keep YaRN's
    attention factor ``yarn_mscale(40, 1) / yarn_mscale(40, 1) = 1`` and the whole temperature,
    ``yarn_mscale(40) ** 2 ~= 1.87``, multiplies the logits here (Hugging Face ``yarn_apply_mscale``).
    """
    head_dim = check_int("head_dim", head_dim)
    scale = head_dim ** -0.5
    if scaling is None:
        return scale
    if not isinstance(scaling, dict):
        raise TypeError(f"scaling must be a rope_parameters dict or None, got {type(scaling).__name__}")
    rope_type = scaling.get("rope_type", scaling.get("type", "default"))
    mscale_all_dim = scaling.get("mscale_all_dim") or 0
    if rope_type != "default" and mscale_all_dim:
        if "factor" not in scaling:
            raise ValueError(f"scaling with rope_type {rope_type!r} and mscale_all_dim needs scaling['factor']")
        mscale = yarn_mscale(float(scaling["factor"]), float(mscale_all_dim))
        scale = scale * mscale * mscale  # in Hugging Face's order, so the float is the same
    return scale


def deinterleave(x: torch.Tensor) -> torch.Tensor:
    """``[..., d]`` -> ``[..., d]``: features 0, 2, 4, ... then 1, 3, 5, ...

    DeepSeek's weights produce rotary features as interleaved pairs (2i, 2i+1). Gathering evens then odds
    turns them into half-split pairs (i, i + d/2), which Hugging Face rotates with ``rotate_half``; the
    rotated queries and keys (and so the cache) stay in that half-split layout.
    """
    return torch.cat((x[..., 0::2], x[..., 1::2]), dim=-1)


def absorbed_scores(q_nope: torch.Tensor, q_rope: torch.Tensor, latent: torch.Tensor, rope_key: torch.Tensor,
                    key_up_weight: torch.Tensor, *, softmax_scale: float) -> torch.Tensor:
    """Attention logits computed from the latent cache, never materialising per-head keys.

    Args:
        q_nope: position-free queries, ``[batch, heads, q_len, qk_nope_head_dim]``.
        q_rope: rotated queries, ``[batch, heads, q_len, qk_rope_head_dim]``.
        latent: the cached latent (after ``kv_a_layernorm``), ``[batch, k_len, kv_lora_rank]``.
        rope_key: the cached shared rotated key, ``[batch, k_len, qk_rope_head_dim]``.
        key_up_weight: the key half of ``kv_b_proj``, ``[heads, qk_nope_head_dim, kv_lora_rank]``
            (``MultiHeadLatentAttention.key_up_weight()``).
        softmax_scale: multiplies the logits.

    Returns:
        ``[batch, heads, q_len, k_len]`` logits before the mask, equal to ``q . k * softmax_scale`` with the
        full keys ``k = [W_uk c_j, rope_key_j]``. Because ``q . (W_uk c_j) = (W_uk^T q) . c_j``, the
        up-projection moves to the query side: one ``[heads, nope, rank]`` product per query instead of
        one per cached key. The rotary slice is scored separately against the one shared key head.
    """
    check_tensor("q_nope", q_nope, min_dim=4)
    check_tensor("q_rope", q_rope, min_dim=4)
    check_tensor("latent", latent, min_dim=3)
    check_tensor("rope_key", rope_key, min_dim=3)
    check_tensor("key_up_weight", key_up_weight, min_dim=3)
    heads, nope, rank = key_up_weight.shape
    if q_nope.shape[1] != heads or q_nope.shape[-1] != nope:
        raise ValueError(f"q_nope must be [batch, {heads}, q_len, {nope}] to match key_up_weight "
                         f"{list(key_up_weight.shape)}, got {list(q_nope.shape)}")
    if latent.shape[-1] != rank:
        raise ValueError(f"latent must end in kv_lora_rank = {rank} (from key_up_weight), got {list(latent.shape)}")
    if q_rope.shape[:3] != q_nope.shape[:3]:
        raise ValueError(f"q_rope must be [batch, heads, q_len, rope_dim] like q_nope {list(q_nope.shape[:3])}, "
                         f"got {list(q_rope.shape)}")
    if rope_key.shape[:2] != latent.shape[:2] or rope_key.shape[-1] != q_rope.shape[-1]:
        raise ValueError(f"rope_key must be [batch, k_len, {q_rope.shape[-1]}] like latent "
                         f"{list(latent.shape[:2])}, got {list(rope_key.shape)}")
    q_latent = torch.einsum("bhqn,hnr->bhqr", q_nope, key_up_weight)  # W_uk absorbed into the query
    content = q_latent @ latent.transpose(-1, -2).unsqueeze(1)
    position = q_rope @ rope_key.transpose(-1, -2).unsqueeze(1)
    return (content + position) * softmax_scale


class LatentCache:
    """What MLA caches per layer: ``latent`` ``[batch, length, kv_lora_rank]`` (after ``kv_a_layernorm``) and
    the shared rotated key ``rope_key`` ``[batch, length, qk_rope_head_dim]``."""

    def __init__(self):
        self.latent: torch.Tensor | None = None
        self.rope_key: torch.Tensor | None = None

    @property
    def length(self) -> int:
        return 0 if self.latent is None else self.latent.shape[1]

    def append(self, latent: torch.Tensor, rope_key: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Add new tokens along the sequence axis; return everything cached."""
        if self.latent is None:
            self.latent, self.rope_key = latent, rope_key
        else:
            self.latent = torch.cat((self.latent, latent), dim=1)
            self.rope_key = torch.cat((self.rope_key, rope_key), dim=1)
        return self.latent, self.rope_key


class MultiHeadLatentAttention(Float32Buffers):
    """DeepSeek's Multi-head Latent Attention with decoupled RoPE (``DeepseekV3Attention`` in transformers).

    Args:
        dim: model width. n_heads: number of heads.
        kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim (even), v_head_dim: see the module's shape legend.
        q_lora_rank: width of the query bottleneck (``q_a_proj`` -> ``q_a_layernorm`` -> ``q_b_proj``), or
            None for one ``q_proj``.
        rope_base, rope_scaling: as for ``rope_frequencies`` over ``qk_rope_head_dim`` features
            (``rope_base=None``: the dict's ``rope_theta``, else 10000); an ``mscale_all_dim`` in the dict
            also sets the softmax scale (``yarn_softmax_scale``).
        rope_interleaved: True (DeepSeek's weights, Hugging Face's ``rope_interleave``) reads the rotary
            features as pairs (2i, 2i+1) and applies ``deinterleave`` before a half-split rotation;
            False rotates them half-split as they come.
        causal: mask keys after each query.

    ``forward(x[batch, seq, dim], *, cache=None) -> [batch, seq, dim]``. With a ``LatentCache`` the new
    tokens take the positions after those cached, and their latent and rotated shared key are appended.
    """

    float32_buffers = ("inv_freq",)

    def __init__(self, dim: int, n_heads: int, *, kv_lora_rank: int, qk_nope_head_dim: int, qk_rope_head_dim: int,
                 v_head_dim: int, q_lora_rank: int | None = None, rope_base: float | None = None,
                 rope_scaling: dict | None = None, rope_interleaved: bool = True, causal: bool = True):
        super().__init__()
        self.dim = check_int("dim", dim)
        self.n_heads = check_int("n_heads", n_heads)
        self.kv_lora_rank = check_int("kv_lora_rank", kv_lora_rank)
        self.qk_nope_head_dim = check_int("qk_nope_head_dim", qk_nope_head_dim)
        self.qk_rope_head_dim = check_even("qk_rope_head_dim", qk_rope_head_dim)
        self.v_head_dim = check_int("v_head_dim", v_head_dim)
        self.q_lora_rank = None if q_lora_rank is None else check_int("q_lora_rank", q_lora_rank)
        self.rope_interleaved = check_choice("rope_interleaved", rope_interleaved, (True, False))
        self.causal = check_choice("causal", causal, (True, False))
        self.qk_head_dim = self.qk_nope_head_dim + self.qk_rope_head_dim

        q_width = self.n_heads * self.qk_head_dim
        if self.q_lora_rank is None:
            self.q_proj = nn.Linear(dim, q_width, bias=False)
        else:
            self.q_a_proj = nn.Linear(dim, self.q_lora_rank, bias=False)
            self.q_a_layernorm = RMSNorm(self.q_lora_rank)
            self.q_b_proj = nn.Linear(self.q_lora_rank, q_width, bias=False)
        # "with_mqa": the latent and the one rotary key head shared by all heads, like multi-query attention.
        self.kv_a_proj_with_mqa = nn.Linear(dim, self.kv_lora_rank + self.qk_rope_head_dim, bias=False)
        self.kv_a_layernorm = RMSNorm(self.kv_lora_rank)
        self.kv_b_proj = nn.Linear(self.kv_lora_rank, self.n_heads * (self.qk_nope_head_dim + self.v_head_dim),
                                   bias=False)
        self.o_proj = nn.Linear(self.n_heads * self.v_head_dim, dim, bias=False)

        inv_freq, attention_scale = rope_frequencies(self.qk_rope_head_dim, base=rope_base, scaling=rope_scaling)
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.attention_scale = attention_scale  # into cos and sin (1.0 for DeepSeek's mscale == mscale_all_dim)
        self.softmax_scale = yarn_softmax_scale(self.qk_head_dim, rope_scaling)

    def key_up_weight(self) -> torch.Tensor:
        """The key half of ``kv_b_proj``: ``[n_heads, qk_nope_head_dim, kv_lora_rank]``."""
        per_head = self.kv_b_proj.weight.view(self.n_heads, self.qk_nope_head_dim + self.v_head_dim, -1)
        return per_head[:, :self.qk_nope_head_dim]

    def _rotate(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        # x: [..., seq, qk_rope_head_dim]; the result is in the half-split layout either way. rope_formula
        # (x * cos + rotate_pairs(x) * sin) does Hugging Face's float operations in its order, so in float32
        # the rotated slices equal DeepSeek-V3's bit for bit; it is ``apply_rope`` without the fast path, which
        # rounds differently by an ulp. Arithmetic in at least float32, as ``apply_rope``.
        cos, sin = rope_cos_sin(positions, self.inv_freq, attention_scale=self.attention_scale)
        if self.rope_interleaved:
            x = deinterleave(x)
        compute = torch.promote_types(x.dtype, torch.float32)
        return rope_formula(x.to(compute), cos.to(compute), sin.to(compute)).to(x.dtype)

    def queries(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``x[batch, seq, dim]`` -> ``(q_nope [batch, heads, seq, qk_nope_head_dim], q_rope [batch, heads, seq,
        qk_rope_head_dim])``, ``q_rope`` rotated to ``positions[seq]``."""
        if self.q_lora_rank is None:
            q = self.q_proj(x)
        else:
            q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))
        q = q.view(*x.shape[:2], self.n_heads, self.qk_head_dim).transpose(1, 2)
        q_nope, q_rope = q.split([self.qk_nope_head_dim, self.qk_rope_head_dim], dim=-1)
        return q_nope, self._rotate(q_rope, positions)

    def latents(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``x[batch, seq, dim]`` -> what is cached: ``(latent [batch, seq, kv_lora_rank],
        rope_key [batch, seq, qk_rope_head_dim])``, ``rope_key`` rotated to ``positions[seq]``."""
        latent, rope_key = self.kv_a_proj_with_mqa(x).split([self.kv_lora_rank, self.qk_rope_head_dim], dim=-1)
        return self.kv_a_layernorm(latent), self._rotate(rope_key, positions)

    def keys_values(self, latent: torch.Tensor, rope_key: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Rebuild per-head keys ``[batch, heads, k_len, qk_head_dim]`` and values ``[batch, heads, k_len,
        v_head_dim]`` from the cache; every head's rotary key slice is the same ``rope_key``."""
        batch, k_len = latent.shape[:2]
        kv = self.kv_b_proj(latent).view(batch, k_len, self.n_heads, -1).transpose(1, 2)
        k_nope, values = kv.split([self.qk_nope_head_dim, self.v_head_dim], dim=-1)
        shared = rope_key.unsqueeze(1).expand(-1, self.n_heads, -1, -1)
        return torch.cat((k_nope, shared), dim=-1), values

    def _check_input(self, x: torch.Tensor, cache: LatentCache | None) -> None:
        check_tensor("x", x)
        if x.dim() != 3 or x.shape[-1] != self.dim:
            raise ValueError(f"x must be [batch, seq, dim={self.dim}], got shape {tuple(x.shape)}")
        if cache is not None and not isinstance(cache, LatentCache):
            raise TypeError(f"cache must be a LatentCache or None, got {type(cache).__name__}")
        if cache is not None and cache.length and cache.latent.shape[0] != x.shape[0]:
            raise ValueError(f"cache holds batch {cache.latent.shape[0]} but x has batch {x.shape[0]}")

    def logits_and_values(self, x: torch.Tensor, *, cache: LatentCache | None = None
                          ) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits ``[batch, heads, seq, k_len]`` (scaled, before the mask) and values ``[batch, heads, k_len,
        v_head_dim]``, the naive way: rebuild every head's keys, then ``q . k``. Appends to ``cache``."""
        self._check_input(x, cache)
        offset = 0 if cache is None else cache.length
        positions = torch.arange(offset, offset + x.shape[1], device=x.device)
        q_nope, q_rope = self.queries(x, positions)
        latent, rope_key = self.latents(x, positions)
        if cache is not None:
            latent, rope_key = cache.append(latent, rope_key)
        keys, values = self.keys_values(latent, rope_key)
        queries = torch.cat((q_nope, q_rope), dim=-1)
        return (queries @ keys.transpose(-1, -2)) * self.softmax_scale, values

    def forward(self, x: torch.Tensor, *, cache: LatentCache | None = None) -> torch.Tensor:
        logits, values = self.logits_and_values(x, cache=cache)
        q_len, k_len = logits.shape[-2:]
        if self.causal:  # query i sits at position k_len - q_len + i and sees keys up to it
            query_pos = torch.arange(k_len - q_len, k_len, device=x.device)[:, None]
            future = torch.arange(k_len, device=x.device)[None, :] > query_pos
            logits = logits.masked_fill(future, float("-inf"))
        weights = torch.softmax(logits, dim=-1, dtype=torch.float32).to(values.dtype)
        out = (weights @ values).transpose(1, 2).reshape(*x.shape[:2], self.n_heads * self.v_head_dim)
        return self.o_proj(out)
