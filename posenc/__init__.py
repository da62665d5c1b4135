"""posenc: positional encodings for transformers, as taught in the book *Positional Encoding, Measured*.

One call per method; shapes are in each docstring. See the book for the derivations.
"""

import sys as _sys

from .absolute import (LearnedEncoding, SinusoidalEncoding, resize_position_table_2d, sinusoidal_encoding,
                       sinusoidal_encoding_2d)
from .alibi import alibi_attention, alibi_bias, alibi_slopes, causal_mask
from . import data
from .attention import ATTENTION_POSITIONS, POSITION_METHODS, MultiHeadAttention
from .cache import KVCache, LayerCache, RollingLayerCache
from .feedforward import SwiGLU
from .gqa import GroupedQueryAttention
from .hf_config import hybrid_layers, plan_from_hf_config
from .masks import chunked_mask, sliding_window_mask
from . import mixers
from .mla import LatentCache, MultiHeadLatentAttention, absorbed_scores, yarn_softmax_scale
from .model import TransformerLM
from .norms import RMSNorm
from .plan import (PLAN_FAMILIES, LayerSpec, Rope, Temperature, describe_plan, every_nth, family_plan, plan_from_dict,
                   plan_to_dict, repeat_pattern)
from .pretrained import load_pretrained
from .relative import T5RelativeBias, t5_relative_bucket
from .rope import (ROPE_TYPES, RotaryEmbedding, apply_rope, axial_positions, axial_rope_cos_sin, mrope_cos_sin,
                   mrope_positions, rope_cos_sin, rope_frequencies, rope_parameters_for)
from .sinks import sink_attention
from .temperature import attention_temperature

__version__ = "0.2.0"

# The layers without a position encoding were top-level modules before posenc.mixers held them: their old
# names stay importable (``from posenc.forgetting import forget_bias``, ``import posenc.conv``).
for _name in ("forgetting", "stick_breaking", "cope", "decay", "conv"):
    _sys.modules[f"{__name__}.{_name}"] = getattr(mixers, _name)
    globals()[_name] = getattr(mixers, _name)
del _name

__all__ = [
    "sinusoidal_encoding", "SinusoidalEncoding", "LearnedEncoding", "sinusoidal_encoding_2d",
    "resize_position_table_2d",
    "rope_frequencies", "rope_cos_sin", "apply_rope", "RotaryEmbedding", "ROPE_TYPES",
    "alibi_slopes", "alibi_bias", "alibi_attention", "causal_mask",
    "t5_relative_bucket", "T5RelativeBias",
    "MultiHeadAttention", "KVCache", "LayerCache", "POSITION_METHODS", "ATTENTION_POSITIONS", "TransformerLM",
    # 2026's models
    "rope_parameters_for", "mrope_positions", "mrope_cos_sin", "axial_positions", "axial_rope_cos_sin",
    "LayerSpec", "Rope", "Temperature", "repeat_pattern", "every_nth", "family_plan", "PLAN_FAMILIES",
    "describe_plan", "plan_to_dict", "plan_from_dict", "plan_from_hf_config", "hybrid_layers",
    "sliding_window_mask", "chunked_mask", "RollingLayerCache", "attention_temperature", "sink_attention",
    "MultiHeadLatentAttention", "LatentCache", "absorbed_scores", "yarn_softmax_scale",
    # pretrained models and the layers they need
    "load_pretrained", "GroupedQueryAttention", "RMSNorm", "SwiGLU",
]
