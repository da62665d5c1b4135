"""Layers that carry position without a position encoding, and what they share.

- ``forgetting``: the Forgetting Transformer's forget gate (FoX, Lin et al. 2025), ALiBi with a slope per token;
- ``stick_breaking``: stick-breaking attention (Tan et al. 2025), each query takes what the nearer keys leave;
- ``cope``: contextual positions (CoPE, Golovneva et al. 2024), positions counted by gates on the content;
- ``decay``: gated linear attention with a data-dependent decay, the recurrent layers of 2025-26's hybrids;
- ``conv``: a short causal convolution before the token mixer (a Canon layer);
- ``base``: ``HeadsMixer``, the projections, heads, gate and checks the first four share.

A ``posenc.plan.LayerSpec`` names the kind (``mixer="forgetting"``...), so these layers sit in a plan beside
softmax attention: ``TransformerLM(..., plan=[LayerSpec(mixer="decay")] * 3 + [LayerSpec("rope")])``; the
convolution is ``LayerSpec(conv=4)``. The modules were ``posenc.forgetting``, ``posenc.conv``... before this
subpackage held them, and stay importable by those names (``posenc/__init__.py``).
"""

from .base import HeadsMixer
from .conv import ShortConv, causal_conv
from .cope import CoPEAttention, cope_positions, cope_scores
from .decay import GATE_NORMALISER, DecayLayer, decay_attention
from .forgetting import ForgettingAttention, forget_bias, forgetting_attention
from .stick_breaking import StickBreakingAttention, stick_breaking_attention, stick_breaking_weights

__all__ = ["HeadsMixer", "ShortConv", "causal_conv", "CoPEAttention", "cope_positions", "cope_scores",
           "GATE_NORMALISER", "DecayLayer", "decay_attention", "ForgettingAttention", "forget_bias",
           "forgetting_attention", "StickBreakingAttention", "stick_breaking_attention", "stick_breaking_weights"]
