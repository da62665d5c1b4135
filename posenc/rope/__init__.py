"""Rotary position embeddings (RoPE, Su et al. 2021) and their context-extension schemes.

RoPE rotates each pair of query/key features by an angle ``position * inv_freq[i]``. Because rotations
compose, the dot product of a query rotated to position m and a key rotated to position n depends only on
m - n. Three pieces, used in this order:

1. ``rope_frequencies`` -> the per-pair inverse frequencies (optionally rescaled for longer contexts) and
   the attention scale that YaRN multiplies into cos and sin;
2. ``rope_cos_sin`` -> cos and sin tables for some positions;
3. ``apply_rope`` -> the rotated tensor.

``RotaryEmbedding`` wraps the three for queries and keys shaped ``[batch, heads, seq, head_dim]``.

The scaling dicts follow Hugging Face's ``rope_scaling`` / ``rope_parameters`` format. For the types Hugging
Face has (``linear``, ``dynamic``, ``yarn``, ``llama3``) the numbers equal
``transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS`` for the same settings (the tests check).
``ntk`` is posenc's own *static* NTK-aware base change (HF has no such type: its ``dynamic`` type applies
the same base change, grown with the sequence length). ``longrope`` (Phi-3), ``proportional`` (Gemma 4) and
``partial_rotary_factor`` (with any type) equal Hugging Face too; ``rope_theta`` may sit inside the dict (HF v5's
``rope_parameters``), and ``rope_parameters_for`` picks one layer type's dict out of v5's nested form.
"""


from .kernels import apply_rope, compile_apply_rope, rope_cos_sin, rope_formula, rotate_pairs
from .multimodal import axial_positions, axial_rope_cos_sin, mrope_cos_sin, mrope_pair_axes, mrope_positions
from .rotary import RotaryEmbedding
from .scaling import ROPE_TYPES, default_inv_freq, rope_frequencies, rope_parameters_for

__all__ = ["ROPE_TYPES", "default_inv_freq", "rope_frequencies", "rope_parameters_for", "rope_cos_sin", "apply_rope",
           "rope_formula", "rotate_pairs", "compile_apply_rope", "RotaryEmbedding", "mrope_positions", "mrope_cos_sin",
           "mrope_pair_axes", "axial_positions", "axial_rope_cos_sin"]
