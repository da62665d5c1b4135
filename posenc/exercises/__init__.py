"""Checks for the exercises: each takes the reader's function, compares it with posenc on random and edge
inputs, and says what is wrong when it is (a wrong pairing, an off-by-one position, angles in low
precision, an inverted mask), the way a course's autograder would.

    from posenc.exercises import check_apply_rope
    check_apply_rope(my_apply_rope)      # prints what passed, or raises ExerciseFailed with a diagnosis

Each check calls the reader's function with plain tensors and compares with posenc's function in float64
where the quantity allows. A wrong answer raises ``ExerciseFailed`` (an ``AssertionError``, so it also
fails a test) whose message names the mistake when it matches a known one, and the largest difference
otherwise. A right answer returns ``True`` and prints one line.

The exercises and their signatures, with the chapter that sets each (one module per topic:
``absolute``, ``relative``, ``rope``, ``masks``, ``stats``; every check is importable from here):

- ``check_causal_mask(fn)`` (chapter 1): ``fn(seq) -> bool [seq, seq]``, True where query i may see key j.
- ``check_binary_code(fn)`` (chapter 2): ``fn(positions[n], bits) -> [n, bits]``, bit k of each position in feature
  k (least significant first), as 0 and 1.
- ``check_sinusoidal(fn)`` (chapter 3): ``fn(n_positions, dim) -> [n_positions, dim]``, Vaswani et al.'s table
  (``sin`` at even features, ``cos`` at odd, base 10000).
- ``check_sinusoidal_2d(fn)`` (chapter 4): ``fn(height, width, dim) -> [height * width, dim]``, patch
  ``r * width + c`` coded ``[PE(r), PE(c)]`` with chapter 3's table of width ``dim / 2``.
- ``check_t5_bucket(fn)`` (chapter 5): ``fn(relative_position, bidirectional, num_buckets, max_distance)`` ->
  integer buckets shaped like ``relative_position`` (``key - query``), T5's rule.
- ``check_rope_frequencies(fn)`` (chapter 6): ``fn(head_dim, base) -> [head_dim // 2]`` inverse frequencies.
- ``check_apply_rope(fn)`` (chapter 6): ``fn(x, positions, base) -> x rotated``: ``x`` ``[..., seq, head_dim]``,
  ``positions`` ``[seq]`` integers, half-split pairs (feature i with i + head_dim/2), as Hugging Face's
  Llama and ``posenc.apply_rope``; the reference is the rotation written out in float64 (the tests check
  it against ``posenc.apply_rope``).
- ``check_llama3_frequencies(fn)`` (chapter 7): ``fn(inv_freq, factor, low_freq_factor, high_freq_factor,
  original_length) -> [pairs]``, Llama 3.1's rescaled frequencies.
- ``check_alibi_slopes(fn)`` (chapter 8): ``fn(n_heads) -> [n_heads]``, including counts that are not powers of two.
- ``check_counting_layer(fn)`` (chapter 9): ``fn(tokens[seq], bos) -> [seq]``, the positions one uniform causal
  attention layer reads off the mask and a BOS token.
- ``check_paired_interval(fn)`` (chapter 10): ``fn(a, b, level) -> (mean, low, high)``, the Student-t interval
  of ``a[seed] - b[seed]`` over the seeds both ``{seed: value}`` dicts have.
- ``check_clopper_pearson(fn)`` (chapter 11): ``fn(successes, trials, level) -> (low, high)``, the exact binomial
  interval.
- ``check_alibi_bias(fn)`` (chapter 13): ``fn(slopes[heads], q_len, k_len) -> [heads, q_len, k_len]``, ALiBi's bias
  for queries that are the last ``q_len`` of ``k_len`` tokens (a KV cache).
- ``check_partial_rotation(fn)`` (chapter 14): ``fn(head_dim, base, partial_rotary_factor, rope_type)`` ->
  inverse frequencies of partial (``"default"``) or proportional (``"proportional"``) rotation.
- ``check_sliding_window_mask(fn)`` (chapter 15): ``fn(seq, window) -> bool [seq, seq]``.
- ``check_forget_bias(fn)`` (chapter 16): ``fn(log_f) -> [..., seq, seq]``, the Forgetting Transformer's bias with
  ``-inf`` above the diagonal.
- ``check_sink_attention(fn)`` (chapter 17): ``fn(q, k, v, sinks, mask) -> [batch, heads, q_len, head_dim]``,
  gpt-oss's learned sinks.
- ``check_mrope_positions(fn)`` (chapter 18): ``fn(segments) -> [3, seq]``, M-RoPE's (t, h, w) ids of text and
  ``(t, h, w)`` grids.
- ``check_chunked_mask(fn)`` (chapter 19): ``fn(seq, chunk) -> bool [seq, seq]``, Llama 4's chunked attention.
- ``check_attention_temperature(fn)`` (chapter 20): ``fn(positions, floor_scale, scale)`` -> Llama 4's query
  factors, shaped like ``positions``.

Where posenc has no function for the quantity (chapters 2 and 9), the reference is written out in the
topic's module, and the tests check it against the formula.
"""

from ._common import ExerciseFailed
from .absolute import check_binary_code, check_sinusoidal, check_sinusoidal_2d
from .masks import (check_attention_temperature, check_causal_mask, check_chunked_mask, check_counting_layer,
                    check_forget_bias, check_sink_attention, check_sliding_window_mask)
from .relative import check_t5_bucket, check_alibi_slopes, check_alibi_bias
from .rope import (check_apply_rope, check_llama3_frequencies, check_mrope_positions, check_partial_rotation,
                   check_rope_frequencies)
from .stats import check_paired_interval, check_clopper_pearson

__all__ = [
    "ExerciseFailed", "check_binary_code", "check_sinusoidal", "check_sinusoidal_2d", "check_causal_mask",
    "check_counting_layer", "check_sliding_window_mask", "check_forget_bias", "check_sink_attention",
    "check_chunked_mask", "check_attention_temperature", "check_t5_bucket", "check_alibi_slopes",
    "check_alibi_bias", "check_rope_frequencies", "check_apply_rope", "check_llama3_frequencies",
    "check_partial_rotation", "check_mrope_positions", "check_paired_interval", "check_clopper_pearson",
]
