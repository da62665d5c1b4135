"""posenc: positional encodings for transformers, as taught in the book *Positional Encoding, Measured*.

One call per method; shapes are in each docstring. See the book for the derivations.
"""

from .absolute import (LearnedEncoding, SinusoidalEncoding, resize_position_table_2d, sinusoidal_encoding,
                       sinusoidal_encoding_2d)
from .alibi import alibi_attention, alibi_bias, alibi_slopes, causal_mask
from . import data
from .attention import ATTENTION_POSITIONS, POSITION_METHODS, KVCache, LayerCache, MultiHeadAttention
from .model import TransformerLM
from .relative import T5RelativeBias, t5_relative_bucket
from .rope import ROPE_TYPES, RotaryEmbedding, apply_rope, rope_cos_sin, rope_frequencies

__version__ = "0.1.0"

__all__ = [
    "sinusoidal_encoding", "SinusoidalEncoding", "LearnedEncoding", "sinusoidal_encoding_2d",
    "resize_position_table_2d",
    "rope_frequencies", "rope_cos_sin", "apply_rope", "RotaryEmbedding", "ROPE_TYPES",
    "alibi_slopes", "alibi_bias", "alibi_attention", "causal_mask",
    "t5_relative_bucket", "T5RelativeBias",
    "MultiHeadAttention", "KVCache", "LayerCache", "POSITION_METHODS", "ATTENTION_POSITIONS", "TransformerLM",
]
