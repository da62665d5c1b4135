"""Helpers to check posenc attention layers against Hugging Face models built from tiny configs.

The Hugging Face model runs as shipped (its own masks, rotary tables and cache); forward hooks record what
one attention layer received and returned, and the posenc layer, with the same weights, must return the
same from the same input. No download: every model is built from a config with random weights.
"""

from __future__ import annotations

import torch

from posenc.attention import MultiHeadAttention
from posenc.cache import LayerCache
from posenc.hf_config import plan_from_hf_config

SEQ, STEPS = 40, 10  # the last STEPS tokens are decoded one at a time
# Relative to the largest output. float32 round-off differs with the order of operations, so with the CPU:
# the largest seen over every layer compared is 2.0e-6 here (AVX-512, MKL) and 4.9e-6 under make
# test-portable (ATen without vector kernels, MKL COMPATIBLE); 5e-5 is ten times that. A wrong frequency,
# scale, mask or weight layout moves outputs by 1e-2 or more.
TOLERANCE = 5e-5


def attention_module(model, layer_index: int):
    """Layer ``layer_index``'s attention module: ``model.layers[i].self_attn`` (Llama-style) or GPT-J's
    ``transformer.h[i].attn``."""
    if hasattr(model, "transformer"):
        return model.transformer.h[layer_index].attn
    return model.model.layers[layer_index].self_attn


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
    """Copy an HF attention module's q/k/v/o projections (and sinks) into a posenc layer; return the layer.
    The output projection is ``o_proj`` (GPT-J: ``out_proj``)."""
    if hasattr(attention_module, "qkv_proj"):  # Phi-3 fuses them, in posenc's order (q, k, v)
        projections = [attention_module.qkv_proj]
    else:
        projections = [attention_module.q_proj, attention_module.k_proj, attention_module.v_proj]
    with torch.no_grad():
        layer.qkv.weight.copy_(torch.cat([p.weight for p in projections]))
        biases = [p.bias if p.bias is not None else torch.zeros(p.out_features) for p in projections]
        layer.qkv.bias.copy_(torch.cat(biases))
        out_projection = attention_module.o_proj if hasattr(attention_module, "o_proj") else attention_module.out_proj
        layer.out.weight.copy_(out_projection.weight)
        o_bias = out_projection.bias
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


def unit_embeddings(model):
    """Embeddings of std 1: for models that normalise after attention (EXAONE 4), whose first layer sees them raw."""
    with torch.no_grad():
        model.model.embed_tokens.weight.normal_(0.0, 1.0, generator=torch.Generator().manual_seed(3))


def check_layer(name, config, model, layer_index, expected_spec, *, prepare=None):
    """``plan_from_hf_config(config)[layer_index]`` must equal ``expected_spec``, and a posenc layer built from
    it, with the HF layer's weights, must give the HF layer's outputs (full pass and cached decoding).
    ``prepare(hf_attention)`` may switch off what is not position (query/key norms)."""
    spec = plan_from_hf_config(config)[layer_index]
    assert spec == expected_spec, f"{name}: plan_from_hf_config gave {spec.describe()}"
    hf_attention = attention_module(model, layer_index)
    if prepare is not None:
        prepare(hf_attention)
    with torch.no_grad():  # weights of std 0.25 (not HF's 0.02): sharp attention and outputs of order 1
        for parameter_name, parameter in hf_attention.named_parameters():
            if parameter_name.endswith("weight"):
                parameter.normal_(0.0, 0.25, generator=torch.Generator().manual_seed(layer_index))
    ids = torch.randint(0, config.vocab_size, (1, SEQ), generator=torch.Generator().manual_seed(1))
    full, cached = record_attention(model, hf_attention, ids, steps=STEPS)
    layer = MultiHeadAttention.from_spec(config.hidden_size, config.num_attention_heads, spec)
    layer = copy_weights(hf_attention, layer, sinks=spec.sinks)
    scale = full[0][1].abs().max().item()
    assert scale > 0.5, "outputs too small for the tolerance to mean anything"
    differences = largest_differences(layer, full, cached)
    assert max(differences) < TOLERANCE * scale, f"{name}: largest differences {differences}, outputs up to {scale}"
