"""``RotaryEmbedding``: the module that rotates queries and keys by their positions."""

from __future__ import annotations

import torch

from .._float32 import Float32Buffers
from .._validate import check_int, check_integer_positions, check_tensor
from .kernels import _rotate, rope_cos_sin
from .scaling import _parse_scaling, rope_frequencies


class RotaryEmbedding(Float32Buffers):
    """Applies RoPE to queries and keys: ``forward(q, k, *, offset=0, positions=None) -> (q, k)``.

    Args:
        head_dim: features per head (even).
        base, scaling: as in ``rope_frequencies`` (``base=None``: the dict's ``rope_theta``, else 10000).
        interleaved: pairing convention, as in ``apply_rope``.

    ``q`` and ``k`` are ``[batch, heads, seq, head_dim]`` (``k`` may have fewer heads, as in grouped-query
    attention). Their positions are ``offset .. offset+seq-1`` unless ``positions`` (``[seq]`` or
    ``[batch, seq]``, whole numbers) is given.

    Only the first ``rotary_dim`` features turn: ``int(head_dim * partial_rotary_factor)`` with a
    ``partial_rotary_factor`` in the scaling dict (the tables are then ``[..., seq, rotary_dim]`` and the
    other features pass unchanged), ``head_dim`` otherwise. ``"proportional"`` tables are full width, with
    zero angles (cos 1, sin 0) for the pairs that do not turn.

    Frequencies that depend on the length, as Hugging Face's ``dynamic_rope_update`` does: with
    ``"dynamic"`` they are recomputed for ``max(position) + 1``; with ``"longrope"`` the long factors
    replace the short ones for the whole call once ``max(position) + 1`` exceeds
    ``original_max_position_embeddings`` (chosen on the device, no host synchronisation). Keys already in a
    cache keep the rotation they were given.

    ``inv_freq`` (and LongRoPE's ``long_inv_freq``) stay float32 through ``module.to(torch.bfloat16)`` /
    ``.half()`` (they follow the device, never the dtype), and the rotation is done in float32 and cast to
    ``q``'s dtype at the end.
    """

    float32_buffers = ("inv_freq", "long_inv_freq")

    def __init__(self, head_dim: int, *, base: float | None = None, scaling: dict | None = None,
                 interleaved: bool = False):
        super().__init__()
        inv_freq, attention_scale = rope_frequencies(head_dim, base=base, scaling=scaling)
        rope_type, params, self.base = _parse_scaling(scaling, base)
        self.head_dim, self.scaling, self.interleaved = head_dim, scaling, bool(interleaved)
        self.dynamic = rope_type == "dynamic"
        self.attention_scale = attention_scale
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        long_inv_freq, self.original_max_position_embeddings = None, None
        if rope_type == "longrope":
            self.original_max_position_embeddings = params["original_max_position_embeddings"]
            long_inv_freq, _ = rope_frequencies(head_dim, base=self.base, scaling=scaling,
                                                seq_len=self.original_max_position_embeddings + 1)
        self.register_buffer("long_inv_freq", long_inv_freq, persistent=False)

    @property
    def rotary_dim(self) -> int:
        """Width of the cos/sin tables: the features that rotate (``head_dim`` for proportional tables)."""
        return 2 * self.inv_freq.shape[0]

    def frequencies_for(self, positions: torch.Tensor) -> torch.Tensor:
        """The ``inv_freq`` ``[rotary_dim // 2]`` (float32) that rotates ``positions`` ``[..., seq]``."""
        if self.dynamic and positions.numel():
            seq_len = int(positions.max()) + 1
            return rope_frequencies(self.head_dim, base=self.base, scaling=self.scaling, seq_len=seq_len)[0].to(
                self.inv_freq.device)
        if self.long_inv_freq is not None and positions.numel():
            is_long = positions.max() >= self.original_max_position_embeddings  # max + 1 > original
            return torch.where(is_long.to(self.inv_freq.device), self.long_inv_freq, self.inv_freq)
        return self.inv_freq

    def cos_sin(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin of shape ``[..., seq, rotary_dim]`` for ``positions`` ``[..., seq]``."""
        return rope_cos_sin(positions, self.frequencies_for(positions), attention_scale=self.attention_scale,
                            interleaved=self.interleaved)

    def forward(self, q: torch.Tensor, k: torch.Tensor, *, offset: int = 0,
                positions: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        for name, t in (("q", q), ("k", k)):
            check_tensor(name, t, min_dim=4)
            if t.dim() != 4 or t.shape[-1] != self.head_dim:
                raise ValueError(f"{name} must be [batch, heads, seq, {self.head_dim}], got {tuple(t.shape)}")
        if q.shape[0] != k.shape[0] or q.shape[2] != k.shape[2]:
            raise ValueError(f"q and k must share batch and seq, got {tuple(q.shape)} and {tuple(k.shape)}")
        seq = q.shape[2]
        if positions is None:
            offset = check_int("offset", offset, minimum=0)
            positions = torch.arange(offset, offset + seq, device=q.device)
        else:
            check_integer_positions("positions", positions)
            if positions.dim() not in (1, 2) or positions.shape[-1] != seq:
                raise ValueError(f"positions must be [seq] or [batch, seq] with seq={seq}, "
                                 f"got {tuple(positions.shape)}")
            if positions.dim() == 2 and positions.shape[0] not in (1, q.shape[0]):
                raise ValueError(f"positions' batch size {positions.shape[0]} does not match q's {q.shape[0]}")
            if offset:
                raise ValueError("pass either offset or positions, not both")
        cos, sin = self.cos_sin(positions)
        if cos.dim() == 3:  # [batch, seq, rotary_dim] -> broadcast over heads
            cos, sin = cos[:, None], sin[:, None]
        return (_rotate(q, cos, sin, interleaved=self.interleaved, layout_known=True),
                _rotate(k, cos, sin, interleaved=self.interleaved, layout_known=True))

    def extra_repr(self) -> str:
        return (f"head_dim={self.head_dim}, rotary_dim={self.rotary_dim}, base={self.base}, scaling={self.scaling}, "
                f"interleaved={self.interleaved}")
