"""Helpers to check posenc attention layers against Hugging Face models built from tiny configs.

The Hugging Face model runs as shipped (its own masks, rotary tables and cache); forward hooks record what
one attention layer received and returned, and the posenc layer, with the same weights, must return the
same from the same input. No download: every model is built from a config with random weights.
"""

from __future__ import annotations

import torch

from posenc.attention import MultiHeadAttention
from posenc.cache import LayerCache


def record_attention(model, attention_module, input_ids, *, steps: int = 0, **model_kwargs):
    """Run ``model`` on ``input_ids`` (a full pass), then decode the last ``steps`` tokens one at a time with
    its cache; return ``(full, cached)``: lists of ``(hidden_states_in, attention_out)`` per call."""
    calls = []

    def hook(module, args, kwargs, output):
        hidden = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]
        calls.append((hidden.detach().clone(), output[0].detach().clone()))

    handle = attention_module.register_forward_hook(hook, with_kwargs=True)
    try:
        with torch.no_grad():
            model(input_ids=input_ids, use_cache=False, **model_kwargs)
            full = list(calls)
            calls.clear()
            if steps:
                prompt = input_ids.shape[1] - steps
                out = model(input_ids=input_ids[:, :prompt], use_cache=True)
                cache = out.past_key_values
                for t in range(prompt, input_ids.shape[1]):
                    out = model(input_ids=input_ids[:, t:t + 1], past_key_values=cache, use_cache=True)
                    cache = out.past_key_values
    finally:
        handle.remove()
    return full, list(calls)


def copy_weights(attention_module, layer: MultiHeadAttention, *, sinks: bool = False) -> MultiHeadAttention:
    """Copy an HF attention module's q/k/v/o projections (and sinks) into a posenc layer; return the layer."""
    if hasattr(attention_module, "qkv_proj"):  # Phi-3 fuses them, in posenc's order (q, k, v)
        projections = [attention_module.qkv_proj]
    else:
        projections = [attention_module.q_proj, attention_module.k_proj, attention_module.v_proj]
    with torch.no_grad():
        layer.qkv.weight.copy_(torch.cat([p.weight for p in projections]))
        biases = [p.bias if p.bias is not None else torch.zeros(p.out_features) for p in projections]
        layer.qkv.bias.copy_(torch.cat(biases))
        layer.out.weight.copy_(attention_module.o_proj.weight)
        o_bias = attention_module.o_proj.bias
        layer.out.bias.copy_(o_bias if o_bias is not None else torch.zeros_like(layer.out.bias))
        if sinks:
            layer.sinks.copy_(attention_module.sinks)
    return layer.eval()


def largest_differences(layer: MultiHeadAttention, full, cached) -> tuple[float, float, float]:
    """posenc against HF: (full pass, cached decoding step by step, posenc cached against posenc full)."""
    with torch.no_grad():
        (hidden, expected), = full
        ours = layer(hidden)
        full_diff = (ours - expected).abs().max().item()
        if not cached:
            return full_diff, 0.0, 0.0
        prompt_hidden, prompt_expected = cached[0]
        cache = LayerCache()
        outputs = [layer(prompt_hidden, cache=cache)]
        cached_diff = (outputs[0] - prompt_expected).abs().max().item()
        for hidden_step, expected_step in cached[1:]:
            outputs.append(layer(hidden_step, cache=cache))
            cached_diff = max(cached_diff, (outputs[-1] - expected_step).abs().max().item())
        self_diff = (torch.cat(outputs, dim=1) - ours).abs().max().item()
    return full_diff, cached_diff, self_diff
