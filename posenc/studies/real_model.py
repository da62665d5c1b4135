"""The real-model studies (issue 39): SmolLM2-135M-Instruct (``posenc.load_pretrained``) on long texts that
installed packages ship, each claim of the toy-model chapters measured where it matters.

Documents (``documents``): four long code files (three of Python's standard library, pandas' ``frame.py``)
and four stretches of English prose from the standard library's ``pydoc_data.topics`` (the language
reference's text, each stretch a run of whole topics in sorted order), the code cut to its first
``doc_tokens`` tokens, the prose to ``prose_tokens`` (the topics hold only two stretches of 32,768 tokens, so
the prose is read to 16,384 and the 32,768-token readings use the four code files). Both are likely in SmolLM2's pretraining data
(GitHub code, Python's documentation on the web): what is measured is how a trained model reads familiar
text, not how it reads unseen text. The record keeps each document's path, kind, SHA-256 and token count.

Parts (one run per document, recipe or probe set; ``next_run`` walks them in this order, cheapest first):

- ``frequencies``: each RoPE pair's size in queries and keys, by layer (the RMS over tokens and heads of the
  pair's 2-D norm, before rotation: rotation keeps it), on ``frequency_tokens`` tokens of every document.
- ``sinks``: the first token's share of attention by layer and head (``evaluate.first_token_attention``,
  queries from 16 on) on ``sink_tokens_read`` tokens of each document read four ways: as the document
  starts (its first token is not a BOS: SmolLM2's tokenizer adds none), after the ``<|endoftext|>`` token,
  starting at a token in the middle of the document, and after the chat format's ``<|im_start|>user``.
- ``far_context``: the loss of every token of the first ``context_tokens`` tokens (the full reading) beside
  the truncated readings (each token predicted from at most its last c tokens, c in ``truncations``,
  ``evaluate.truncated_token_losses`` with a stride of c/2: every later token sees between c/2 and c tokens).
- ``streaming``: every stream of ``stream_tokens`` tokens the first ``streams`` documents hold (one run,
  all streams decoded as one batch) read four ways, StreamingLLM's experiment: a rolling
  cache of ``sink_count`` first tokens and the last ``cache_tokens - sink_count``, the same cache with no
  sinks (plain eviction), recomputation (each token re-reads its last ``cache_tokens`` tokens from scratch,
  stride ``cache_tokens // 4``), and the dense reading (all tokens at once, far beyond the trained 8,192).
- ``extension``: the full reading to ``extension_tokens`` tokens under each recipe of ``recipes`` (the
  longest length ``long_tokens`` only for ``long_recipes``), losses kept per position bin; with no scaling,
  also the truncated reading of at most ``context_tokens`` (8,192) tokens at once, the reading a recipe must
  beat to show that it lets the model use context beyond its trained length.
- ``retrieval``: induction probes (Olsson et al.'s repeated random tokens): a segment of ``probe_tokens``
  random token ids placed after the first 256 tokens of a document and repeated ``distance`` tokens later,
  at the end; the score is the teacher-forced top-1 accuracy of the repeat's tokens after its first. One
  probe per document (a new random segment each), for each recipe and distance: the control (no scaling,
  distances within 8,192) says up to which distance the model retrieves at all. Its checks: a negative
  control (the segment only at the end), random ids drawn from the ids the documents use (``probe="seen"``), natural text (``probe="text"``: the middle of the next document, with its own
  negative control), a position control (a short distance with the repeat as late in the window as
  the longest distance's, ``prefix``), and a passkey the instruct model is asked for in its chat format
  (``probe="passkey"``, ``passkey_probe``: is the key retrieved whole, with a negative control whose needle
  is left out). The passkey is the probe whose control passes, so it is the one the recipes are read with:
  ``passkey_distance`` tokens back (a distance the unscaled model retrieves from) with the question at each
  position of ``passkey_far`` (beyond 8,192), and at that distance early in the window (the recipe's own
  control). A distance beyond 8,192 is not probed: the model fails from 7,808 back within its window.

The far-context reading has a negative control too (``control="shuffled"``): 1,024-token chunks of the 8
documents, each once, so that a chunk's far context is other documents; it is scored only on the tokens
whose own chunk both readings see whole (offset in the chunk at most c/2), where the full reading can gain
nothing but the other documents.
"""

from __future__ import annotations

import hashlib
import math
import statistics
import time
from pathlib import Path

import torch

from .. import evaluate
from ..stats import (clopper_pearson, holm, paired_family, paired_interval, paired_p_value, sign_flip_p,
                     sign_test, t_interval)

MODEL = "smollm2-135m"
TRAINED_LENGTH = 8192  # SmolLM2-135M's context length (the file's llama.context_length)
LAST_BIN = (2 * TRAINED_LENGTH - 1024, 2 * TRAINED_LENGTH)  # where the 8,192-token truncated reading sees most

# Recipes as Hugging Face rope_scaling dicts, each extending 8,192 to 2x or 4x (factor as the name says)
RECIPES = {
    "none": None,
    "PI x2": {"rope_type": "linear", "factor": 2.0},
    "PI x4": {"rope_type": "linear", "factor": 4.0},
    "NTK-aware x2": {"rope_type": "ntk", "factor": 2.0},
    "dynamic NTK x2": {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": TRAINED_LENGTH},
    "YaRN x2": {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": TRAINED_LENGTH},
    "YaRN x4": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": TRAINED_LENGTH},
    "Llama 3 x2": {"rope_type": "llama3", "factor": 2.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": TRAINED_LENGTH},
}

# Why do YaRN x2 and NTK-aware scaling lengthen the passkey's reach within 8,192 tokens and Llama 3's rule
# (which compresses the slow pairs as YaRN x2 does) not resolvably? Two arms separate YaRN's attention
# temperature (0.1 ln s + 1 on cos and sin) from its treatment of the middle pairs: YaRN without it, and
# Llama 3's bands with it. Each is asked only the passkey within L, read against its parent recipe.
TEMPERATURE_ARMS = {
    "YaRN x2, t = 1": {**RECIPES["YaRN x2"], "attention_factor": 1.0},
    "Llama 3 x2, YaRN's t": {**RECIPES["Llama 3 x2"], "attention_factor": 0.1 * math.log(2.0) + 1},
}
ARM_PARENTS = {"YaRN x2, t = 1": "YaRN x2", "Llama 3 x2, YaRN's t": "Llama 3 x2"}

# The standard library's code files of 32,768 tokens or more (three), and pandas' DataFrame (pinned 3.1.1)
CODE_FILES = ("_pydecimal.py", "tkinter/__init__.py", "turtle.py", "pandas/core/frame.py")
PARTS = ("frequencies", "sinks", "far_context", "streaming", "extension", "retrieval")

_COMMON = dict(methods=[MODEL], doc_tokens=32768, frequency_tokens=1024, sink_tokens_read=512,
               truncations=[256, 1024, 4096], context_tokens=TRAINED_LENGTH, sink_count=4, cache_tokens=1024,
               probe_tokens=64, probe_seed=0, bin=1024, threads=2)
PRESETS = {
    "tiny": dict(_COMMON, threads=1, documents=2, doc_tokens=600, frequency_tokens=64, sink_tokens_read=64, truncations=[32],
                 context_tokens=128, stream_tokens=160, cache_tokens=64, extension_tokens=256, long_tokens=None,
                 recipes=["none", "YaRN x2"], long_recipes=[], own_truncated=["YaRN x2"], distances=[64, 200],
                 passkey_distance=200, passkey_far=[],
                 probe_tokens=16, bin=64,
                 parts=list(PARTS), streams=1),
    "full": dict(_COMMON, documents=8, prose_tokens=16384, stream_tokens=16384, streams=2, extension_tokens=16384, long_tokens=32768,
                 recipes=list(RECIPES), long_recipes=["none", "PI x4", "YaRN x4", "dynamic NTK x2"],
                 own_truncated=["YaRN x2"],
                 distances=[256, 1024, 2048, 4096, 6144, 7808], passkey_distance=1024, passkey_far=[12288, 16000],
                 temperature_arms=list(TEMPERATURE_ARMS), parts=list(PARTS)),
}


# ---- the texts ---------------------------------------------------------------------------------------

def _stdlib() -> Path:
    import sysconfig
    return Path(sysconfig.get_paths()["stdlib"])


def documents(tokenizer, count: int, tokens: int, prose_tokens: int | None = None) -> list[dict]:
    """``count`` documents alternating code and prose: ``{"name", "kind", "source", "sha256",
    "available_tokens", "ids"}`` with ``ids`` the first ``tokens`` token ids (a list) of a code file, or the
    first ``prose_tokens`` (default ``tokens``) of a prose stretch (the topics hold two stretches of 32,768
    tokens, not four)."""
    prose_tokens = tokens if prose_tokens is None else prose_tokens
    found = []
    for index in range(max(count, 0)):
        if index % 2 == 0:
            name = CODE_FILES[index // 2]
            text = _code_path(name).read_text(encoding="utf-8")
            found.append(_document(tokenizer, f"code: {name}", "code", name, text, tokens))
        else:
            found.append(_prose(tokenizer, index // 2, prose_tokens))
    return found


def _code_path(name: str) -> Path:
    """A code file by its path in the standard library, or else in an installed package (``pandas/...``)."""
    path = _stdlib() / name
    if path.exists():
        return path
    import importlib.util
    package, _, rest = name.partition("/")
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"{name}: neither in the standard library nor in an installed package")
    return Path(spec.submodule_search_locations[0]) / rest


def _document(tokenizer, name: str, kind: str, source: str, text: str, tokens: int) -> dict:
    ids = tokenizer.encode(text)
    if len(ids) < tokens:
        raise ValueError(f"{source} has {len(ids)} tokens, fewer than the {tokens} asked for")
    return {"name": name, "kind": kind, "source": source,
            "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(), "available_tokens": len(ids),
            "ids": ids[:tokens]}


def _prose(tokenizer, part: int, tokens: int) -> dict:
    """The ``part``-th stretch of the language reference's topics (``pydoc_data.topics``, sorted by name):
    whole topics joined by blank lines until the stretch has ``tokens`` tokens; stretches do not overlap."""
    from pydoc_data.topics import topics
    names, start, stretch = sorted(topics), 0, 0
    while True:
        chosen, count = [], 0
        for name in names[start:]:
            chosen.append(name)
            count += len(tokenizer.encode(topics[name])) + 2
            if count >= tokens:
                break
        if count < tokens:
            raise ValueError(f"pydoc_data.topics has no stretch {part} of {tokens} tokens")
        if stretch == part:
            text = "\n\n".join(topics[name] for name in chosen)
            source = f"pydoc_data/topics.py: topics {chosen[0]!r} to {chosen[-1]!r}"
            return _document(tokenizer, f"prose: topics {chosen[0]} .. {chosen[-1]}", "prose", source, text,
                             tokens)
        start, stretch = start + len(chosen), stretch + 1


# ---- the measurements ----------------------------------------------------------------------------------

@torch.no_grad()
def pair_sizes(model, ids: torch.Tensor, skip: int = 0) -> dict:
    """RMS size of each RoPE pair of queries, keys and values by layer, over tokens (from ``skip`` on) and
    heads: ``{"q": [layer][pair], "k": ..., "v": ...}``. ``ids`` is ``[1, seq]``. Pair i is features
    (i, i + head_dim/2): half-split. Queries and keys are taken before rotation (rotation keeps the size);
    values are never rotated, so their split into the same feature pairs is the negative control: a
    concentration that shows there too belongs to the projections, not to RoPE."""
    x, sizes = model.token_embedding(ids), {"q": [], "k": [], "v": []}
    for block in model.blocks:
        q, k, v = block.attn._project(block.ln_attn(x))  # [batch, heads, seq, head_dim], before rotation
        for name, t in (("q", q), ("k", k), ("v", v)):
            half = t.shape[-1] // 2
            norm_sq = t[..., skip:, :half].float() ** 2 + t[..., skip:, half:].float() ** 2  # [b, h, seq, pairs]
            sizes[name].append(norm_sq.mean(dim=(0, 1, 2)).sqrt().tolist())
        x = block(x)
    return sizes


def _binned(losses: torch.Tensor, bin: int) -> list[float]:
    """Mean loss (nats) per bin of ``bin`` positions of a ``[positions]`` tensor."""
    return [float(losses[i:i + bin].mean()) for i in range(0, losses.numel(), bin)]


def _losses(model, ids: list[int], length: int) -> torch.Tensor:
    """``[length - 1]`` next-token losses of the first ``length`` tokens (tokens 1 .. length-1, each from all
    tokens before it), one pass."""
    return evaluate.token_losses(model, torch.tensor(ids[:length]), length - 1, n_windows=1, batch_size=1)[0]


def induction_probe(ids: list[int], distance: int, probe_tokens: int, seed: int, vocab: int,
                    prefix: int = 256, repeat: bool = True, segment: list[int] | None = None) -> tuple[torch.Tensor, int]:
    """A text of ``prefix + distance + probe_tokens`` tokens taken from ``ids`` in which a segment of
    ``probe_tokens`` ids stands after the first ``prefix`` tokens and again ``distance`` tokens later, at the
    end. The segment is random ids (from ``[1000, 40000)``, seeded by ``seed`` and ``distance``), or
    ``segment`` (natural text: the model can predict some of it without the earlier copy). Returns ``(tokens
    [1, length], where the copy starts)``. ``repeat=False`` is the negative control: the segment stands only at
    the end (the document's own text stays before it), so nothing earlier tells the model what it holds."""
    if distance < probe_tokens:
        raise ValueError(f"distance must be at least probe_tokens={probe_tokens}, got {distance}")
    length = prefix + distance + probe_tokens
    if len(ids) < length:
        raise ValueError(f"the document has {len(ids)} tokens, fewer than the {length} a distance of {distance} needs")
    if segment is None:
        generator = torch.Generator().manual_seed(seed * 1_000_003 + distance)
        planted = torch.randint(1000, min(40000, vocab), (probe_tokens,), generator=generator)
    else:
        if len(segment) != probe_tokens:
            raise ValueError(f"segment must have probe_tokens={probe_tokens} ids, got {len(segment)}")
        planted = torch.tensor(segment)
    tokens = torch.tensor(ids[:length])
    copy = prefix + distance
    if repeat:
        tokens[prefix:prefix + probe_tokens] = planted
    tokens[copy:] = planted
    return tokens[None], copy


def text_segment(ids: list[int], probe_tokens: int) -> list[int]:
    """The natural-text segment of a text probe: ``probe_tokens`` ids from the middle of a document."""
    middle = len(ids) // 2
    return ids[middle:middle + probe_tokens]


PASSKEY_INTRO = "A pass key is hidden in the text below. Find it and remember it.\n\n"
PASSKEY_NEEDLE = "\n\nThe pass key is {key}. Remember it: {key}.\n\n"
PASSKEY_QUESTION = "\n\nWhat is the pass key?"
PASSKEY_ANSWER = " The pass key is {key}"
CHAT_USER, CHAT_ASSISTANT = "<|im_start|>user\n", "<|im_end|>\n<|im_start|>assistant\n"


def passkey_probe(tokenizer, ids: list[int], distance: int, seed: int, prefix: int = 256, present: bool = True,
                  chat: bool = True) -> tuple[torch.Tensor, int]:
    """A passkey the model is asked for (Mohtashami & Jaggi's test, in the instruct model's chat format when
    ``chat``): an instruction, the document's first ``prefix`` tokens, a sentence giving a five-digit key,
    more of the document, the question, and the answer "The pass key is 40721", the key's first digit
    ``distance`` tokens after its first digit in the needle (as in ``induction_probe``). The key is seeded by
    ``seed`` and ``distance``; the tokenizer must split digits one per token (SmolLM2's does). Returns
    ``(tokens [1, length], where the answer's digits start)``. ``present=False`` is the negative control: the
    needle's tokens are document text, so the key stands nowhere before the answer."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + distance)
    key = str(int(torch.randint(10_000, 100_000, (1,), generator=generator)))
    digits = tokenizer.encode(key)
    if len(digits) != 5:
        raise ValueError(f"the tokenizer must split digits one per token; {key!r} encodes to {len(digits)} tokens")
    intro = tokenizer.encode((CHAT_USER if chat else "") + PASSKEY_INTRO)
    needle = tokenizer.encode(PASSKEY_NEEDLE.format(key=key))
    at = next(i for i in range(len(needle)) if needle[i:i + 5] == digits)  # the key's first digit in the needle
    question = tokenizer.encode(PASSKEY_QUESTION + (CHAT_ASSISTANT if chat else "") + PASSKEY_ANSWER.format(key=key))
    if question[-5:] != digits:
        raise ValueError("the answer must end in the key's five digit tokens")
    filler = distance - (len(needle) - at) - (len(question) - 5)
    if filler < 0:
        raise ValueError(f"distance must be at least {distance - filler} (the needle's tail and the question), "
                         f"got {distance}")
    if len(ids) < prefix + len(needle) + filler:
        raise ValueError(f"the document has {len(ids)} tokens, fewer than the {prefix + len(needle) + filler} "
                         f"a distance of {distance} needs")
    middle = needle if present else ids[prefix:prefix + len(needle)]
    rest = ids[prefix + (0 if present else len(needle)):][:filler]
    tokens = intro + ids[:prefix] + middle + rest + question
    return torch.tensor([tokens]), len(tokens) - 5


@torch.no_grad()
def probe_accuracy(model, tokens: torch.Tensor, copy: int) -> float:
    """Teacher-forced top-1 accuracy on the copy's tokens after its first (``tokens[0, copy:]``; the first
    cannot be predicted): how much of the segment the model retrieves from ``distance`` tokens back."""
    predicted = model(tokens[:, :-1]).argmax(-1)[0]  # predicted[t] is the guess for token t + 1
    return float((predicted[copy:] == tokens[0, copy + 1:]).float().mean())


# ---- the study protocol (posenc.experiments) ----------------------------------------------------------

def _keys(config: dict, runs: list[dict] = ()) -> list[dict]:
    parts = config["parts"]
    keys = []
    if "frequencies" in parts:
        keys.append({"part": "frequencies"})
    docs = range(config["documents"])
    keys += [{"part": "sinks", "document": d} for d in docs if "sinks" in parts]
    keys += [{"part": "far_context", "document": d} for d in docs if "far_context" in parts]
    within = _within(config)
    if "retrieval" in parts:
        keys += [{"part": "retrieval", "recipe": "none", "distance": d} for d in within]
        keys += [{"part": "retrieval", "recipe": "none", "distance": within[0], "control": "negative"}] if within else []
        keys += [{"part": "retrieval", "recipe": "none", "distance": d, "probe": "text"} for d in within]
        keys += [{"part": "retrieval", "recipe": "none", "distance": within[0], "probe": "text",
                  "control": "negative"}] if within else []
        # random ids drawn only from ids the documents use (rare ids may be what keeps the copy below 0.95)
        keys += [{"part": "retrieval", "recipe": "none", "distance": d, "probe": "seen"} for d in within[:1]]
        keys += [{"part": "retrieval", "recipe": "none", "distance": d, "probe": "passkey"} for d in within]
        keys += [{"part": "retrieval", "recipe": "none", "distance": within[0], "probe": "passkey",
                  "control": "negative"}] if within else []
        if len(within) > 1:  # distance or position? a short distance with the repeat as late as the longest's
            keys.append({"part": "retrieval", "recipe": "none", "distance": within[1],
                         "prefix": 256 + within[-1] - within[1]})
            keys.append({"part": "retrieval", "recipe": "none", "distance": within[1], "probe": "passkey",
                         "prefix": 256 + within[-1] - within[1]})  # the same for the passkey
    streams = [{"part": "streaming"}] if "streaming" in parts else []  # one run: every stream as one batch
    extension = []  # each document to its longest length before the next: readings paired by document grow
    for d in docs if "extension" in parts else []:
        extension += [{"part": "extension", "recipe": r, "document": d, "length": config["extension_tokens"]}
                      for r in config["recipes"]]
        extension += [{"part": "extension", "recipe": r, "document": d, "length": config["extension_tokens"],
                       "control": "own truncated"} for r in config.get("own_truncated", [])]
        if config.get("long_tokens") and d % 2 == 0:  # the code files: the prose stretches are shorter
            extension += [{"part": "extension", "recipe": r, "document": d, "length": config["long_tokens"]}
                          for r in config["long_recipes"]]
    if "far_context" in parts:  # the negative control: chunks of different documents, nothing far to use
        keys += [{"part": "far_context", "document": d, "control": "shuffled"} for d in range(min(2, config["documents"]))]
    keys += streams
    beyond = _passkey_beyond(config) if "retrieval" in parts else ([], [], [])
    keys += beyond[0]  # beyond L: the passkey, the one probe whose control passes the 0.95 bar
    # the perplexity to 16,384, then the other recipes beyond L, each recipe's effective length within L, and
    # the passkey asked still further out
    effective = _passkey_within(config, runs) if "retrieval" in parts else []
    early = _early_passkeys(config, runs) if "retrieval" in parts else {}
    # still further out only the recipes with something to lose: PI's keys are gone 1,024 back early on
    further = [k for k in beyond[2] if k["recipe"] == "none" or early.get(k["recipe"], 1.0) >= 0.95]
    arms = [{"part": "retrieval", "recipe": arm, "distance": config["passkey_distance"], "probe": "passkey"}
            for arm in config.get("temperature_arms", []) if "retrieval" in parts]  # then their reach (effective)
    return keys + extension + beyond[1] + effective + further + arms


def _within(config: dict) -> list[int]:
    """The probe distances that fit inside L with the probe's prefix and copy (the control's own range)."""
    return [d for d in config.get("distances", []) if d + 320 <= TRAINED_LENGTH]


def _early_passkeys(config: dict, runs: list[dict]) -> dict[str, float]:
    """``{recipe: share of keys retrieved}`` for the passkey ``passkey_distance`` back early in the window (each
    recipe's own control), for the recipes whose run is in."""
    record = {"config": config, "runs": [run for run in runs if "accuracy" in run]}
    rows = {r: retrieval_rows(record, recipe=r, probe="passkey").get(config["passkey_distance"])
            for r in (*config["recipes"], *config.get("temperature_arms", []))}
    return {r: row[0] for r, row in rows.items() if row is not None}


# the zero-shot recipes in wide use first; PI's readings after the perplexity runs: zero-shot PI x2 fails its
# own control (0 of 8 keys 1,024 back, early in the window), so its reading beyond L cannot count
FIRST_RECIPES = ("YaRN x2", "dynamic NTK x2", "Llama 3 x2", "NTK-aware x2", "YaRN x4")


def _passkey_beyond(config: dict) -> tuple[list[dict], list[dict], list[dict]]:
    """The passkey ``passkey_distance`` back under every recipe, asked at the positions ``passkey_far``
    beyond L, in three lists: unscaled at the first (where it should fail), then each recipe of
    ``FIRST_RECIPES`` early in the window (its own control) and at the first; the other recipes so; and
    every recipe at the other positions."""
    distance, far = config["passkey_distance"], config["passkey_far"]

    def passkey(recipe, position=None):  # the needle after position - distance tokens of the document
        key = {"part": "retrieval", "recipe": recipe, "distance": distance, "probe": "passkey"}
        return key if position is None else {**key, "prefix": position - distance}

    first = {r: i for i, r in enumerate(FIRST_RECIPES)}
    recipes = sorted((r for r in config["recipes"] if r != "none"), key=lambda r: first.get(r, len(first)))
    read = {r: [passkey(r), *(passkey(r, p) for p in far[:1])] for r in recipes}
    keys = [passkey("none", p) for p in far[:1]] + [key for r in recipes if r in first for key in read[r]]
    later = [key for r in recipes if r not in first for key in read[r]]
    return keys, later, [passkey(r, p) for p in far[1:] for r in ("none", *recipes)]


def _passkey_within(config: dict, runs: list[dict]) -> list[dict]:
    """Does a recipe move the model's effective length? The passkey under each recipe at the unscaled
    model's other distances within L (``distances``), the needle early in the window: beyond
    ``passkey_distance`` for a recipe that retrieves there (its early score at least 0.95), the shorter
    ones for a recipe that does not (how far it shrinks the length), none before that score is in; a
    temperature arm at every other distance (it is read against its parent there).
    Dynamic NTK is left out: below its original length it is the unscaled model (tests/test_rope.py)."""
    within, distance, early = _within(config), config["passkey_distance"], _early_passkeys(config, runs)
    arms = config.get("temperature_arms", [])  # read against their parents at every distance, whatever early
    keys, first = [], {r: i for i, r in enumerate(FIRST_RECIPES)}
    for recipe in sorted(early, key=lambda r: first.get(r, len(first))):
        if recipe == "none" or recipe.startswith("dynamic"):
            continue
        further = [d for d in within if d != distance and (recipe in arms or (d > distance) == (early[recipe] >= 0.95))]
        keys += [{"part": "retrieval", "recipe": recipe, "distance": d, "probe": "passkey"} for d in further]
    return sorted(keys, key=lambda key: key["distance"] > distance)  # the short (cheap) ones first


def next_run(config: dict, runs: list[dict]) -> dict | None:
    done = [{k: run[k] for k in ("part", "document", "recipe", "distance", "length", "control", "probe", "prefix")
             if k in run} for run in runs]
    return next((key for key in _keys(config, runs) if key not in done), None)


_LOADED: dict = {}


def _model(recipe: str):
    """The model with ``recipe``'s scaling and the tokenizer, loaded once per recipe and process."""
    if recipe not in _LOADED:
        from ..pretrained import load_pretrained
        _LOADED.clear()  # one model in memory at a time
        _LOADED[recipe] = load_pretrained(MODEL, rope_scaling={**RECIPES, **TEMPERATURE_ARMS}[recipe])
    return _LOADED[recipe]


def _document_of(config: dict, index: int, tokenizer) -> dict:
    key = ("documents", config["documents"], config["doc_tokens"])
    if key not in _LOADED:
        _LOADED[key] = documents(tokenizer, config["documents"], config["doc_tokens"], config.get("prose_tokens"))
    return _LOADED[key][index]


def _shuffled(config: dict, first: int, tokenizer, chunk: int = 1024) -> tuple[list[int], dict]:
    """The far-context negative control's text: ``context_tokens // chunk`` chunks of ``chunk`` tokens (8 of
    1,024: each document once), chunk j from document ``(first + j) % documents`` at offset ``j * chunk``:
    the far context of a chunk is other documents, which hold nothing about it but style."""
    n = config["documents"]
    ids = []
    for j in range(config["context_tokens"] // chunk):
        source = _document_of(config, (first + j) % n, tokenizer)["ids"]
        ids += source[j * chunk:(j + 1) * chunk]
    return ids, {"name": f"shuffled: {chunk}-token chunks of the {n} documents, from document {first}",
                 "kind": "shuffled", "source": "the documents above", "sha256": "", "available_tokens": len(ids),
                 "chunk": chunk}


def _described(doc: dict) -> dict:
    return {k: doc[k] for k in ("name", "kind", "source", "sha256", "available_tokens")}


def run(config: dict, key: dict, checkpoint_dir: Path | None) -> dict:
    torch.set_num_threads(config["threads"])
    start = time.perf_counter()
    model, tokenizer = _model(key.get("recipe", "none"))
    out = measure(model, tokenizer, config, key, checkpoint_dir)
    out["seconds"] = time.perf_counter() - start
    return out


def measure(model, tokenizer, config: dict, key: dict, checkpoint_dir: Path | None = None) -> dict:
    """One run of the study: what ``key`` (a part, and its document, recipe or distance) asks for. With
    ``checkpoint_dir``, the streaming run keeps each finished reading there (it runs for well over an hour)."""
    part = key["part"]
    if part == "frequencies":
        sizes = [pair_sizes(model, torch.tensor([_document_of(config, d, tokenizer)["ids"][:config["frequency_tokens"]]]))
                 for d in range(config["documents"])]
        mean = {name: [[sum(s[name][layer][pair] for s in sizes) / len(sizes) for pair in range(len(sizes[0][name][0]))]
                       for layer in range(len(sizes[0][name]))] for name in ("q", "k")}
        return {**mean, "tokens_per_document": config["frequency_tokens"], "documents": config["documents"]}
    if part == "retrieval":  # one probe per document, every document
        accuracy = []
        for d in range(config["documents"]):
            doc = _document_of(config, d, tokenizer)
            segment = None  # random ids; a text probe copies the middle of the next document
            if key.get("probe") == "seen":
                pool = torch.tensor(sorted({i for k in range(config["documents"])
                                            for i in _document_of(config, k, tokenizer)["ids"]}))
                generator = torch.Generator().manual_seed((config["probe_seed"] + d) * 1_000_003 + key["distance"])
                segment = pool[torch.randint(0, len(pool), (config["probe_tokens"],), generator=generator)].tolist()
            if key.get("probe") == "text":
                segment = text_segment(_document_of(config, (d + 1) % config["documents"], tokenizer)["ids"],
                                       config["probe_tokens"])
            if key.get("probe") == "passkey":  # the five digits, each from the right ones before it
                tokens, start = passkey_probe(tokenizer, doc["ids"], key["distance"], config["probe_seed"] + d,
                                              prefix=key.get("prefix", 256), present=key.get("control") != "negative")
                copy, scored = start - 1, 5
            else:
                tokens, copy = induction_probe(doc["ids"], key["distance"], config["probe_tokens"],
                                               config["probe_seed"] + d, tokenizer.vocab_size,
                                               prefix=key.get("prefix", 256),
                                               repeat=key.get("control") != "negative", segment=segment)
                scored = config["probe_tokens"]
            accuracy.append(probe_accuracy(model, tokens, copy))
        return {"accuracy": accuracy, "copy_starts_at": copy, "probe_tokens": scored}
    if part == "streaming":
        return _streaming(model, config, [_document_of(config, d, tokenizer) for d in range(config["streams"])],
                          checkpoint_dir)
    doc = _document_of(config, key["document"], tokenizer)
    ids = doc["ids"]
    result = {"doc": _described(doc)}
    if key.get("control") == "shuffled":
        ids, result["doc"] = _shuffled(config, key["document"], tokenizer)
    if part == "sinks":
        n = config["sink_tokens_read"]
        middle = len(ids) // 2
        end_of_text = tokenizer.backend.token_to_id("<|endoftext|>")  # SmolLM2's document separator
        chat = tokenizer.encode(CHAT_USER)  # the instruct model's chat format: <|im_start|>, "user", newline
        readings = {"document start (no BOS)": ids[:n], "after <|endoftext|>": [end_of_text] + ids[:n - 1],
                    "from the middle": ids[middle:middle + n], "after <|im_start|>user": chat + ids[:n - len(chat)]}
        result["first_token_share"] = {
            name: evaluate.first_token_attention(model, torch.tensor([read]), skip=16, by_head=True)
            for name, read in readings.items()}
        result["first_tokens"] = {name: tokenizer.decode(read[:1]) for name, read in readings.items()}
        return result
    if part == "far_context":
        L = config["context_tokens"]
        data = torch.tensor(ids[:L])
        full = evaluate.token_losses(model, data, L - 1, n_windows=1, batch_size=1)[0]
        result["full"] = _binned(full, config["bin"])
        for c in config["truncations"]:
            truncated = evaluate.truncated_token_losses(model, data, L - 1, c, n_windows=1, stride=c // 2,
                                                        batch_size=1)[0]
            result[f"last {c}"] = _binned(truncated, config["bin"])
            result[f"last {c}, per-token difference"] = float((truncated - full)[c:].mean())
            if "chunk" in result["doc"]:  # the control: only tokens whose own chunk both readings see whole
                target = torch.arange(1, L)  # loss i predicts token i + 1
                seen = (target % result["doc"]["chunk"] <= c // 2) & (target > c)
                result[f"last {c}, per-token difference, own chunk seen"] = float((truncated - full)[seen].mean())
        return result
    if part == "extension":
        own = key.get("control") == "own truncated"  # the recipe's own reference: only its truncated reading
        if not own:
            result["losses"] = _binned(_losses(model, ids, key["length"]), config["bin"])
        if key["recipe"] == "none" or own:  # never more than the trained length at once
            L, length = config["context_tokens"], key["length"]
            truncated = evaluate.truncated_token_losses(model, torch.tensor(ids[:length]), length - 1, L, n_windows=1,
                                                        stride=L // 2, batch_size=1)[0]
            result[f"last {L}"] = _binned(truncated, config["bin"])
        return result
    raise ValueError(f"part must be one of {PARTS}, got {part!r}")


def _streaming(model, config: dict, docs: list[dict], checkpoint_dir: Path | None = None) -> dict:
    """StreamingLLM's experiment on every stream of ``stream_tokens`` tokens that ``docs`` hold (a
    32,768-token code file: two, its halves). The rolling caches decode all streams as one batch: a
    decoding step's cost is reading the weights, so three streams cost little more than one. Each reading
    finished is kept in ``checkpoint_dir`` (when given) and read back by a resumed run."""
    n, sinks, cache = config["stream_tokens"], config["sink_count"], config["cache_tokens"]
    streams, described = [], []
    for doc in docs:
        data = torch.tensor(doc["ids"])
        for start in evaluate.window_starts(len(doc["ids"]), n - 1).tolist():
            streams.append(data[start:start + n])
            described.append({"doc": doc["name"], "start": start})
    batch = torch.stack(streams)
    measures = {
        "rolling, sinks": lambda: evaluate.rolling_cache_losses(model, batch, sink_tokens=sinks, window=cache - sinks),
        "rolling, no sinks": lambda: evaluate.rolling_cache_losses(model, batch, sink_tokens=0, window=cache),
        "recomputed": lambda: torch.cat([evaluate.truncated_token_losses(model, row, n - 1, cache,
                                                                         stride=cache // 4, batch_size=1)
                                         for row in streams]),
        "dense": lambda: torch.cat([evaluate.token_losses(model, row, n - 1, batch_size=1) for row in streams]),
    }
    out = {"streams": described, "docs": [_described(doc) for doc in docs]}
    for name, measure_reading in measures.items():
        losses = _kept(checkpoint_dir, f"streaming {name} {n} {cache} {sinks} {described}", measure_reading)
        out[name] = [_binned(row, config["bin"]) for row in losses]
    return out


def _kept(folder: Path | None, label: str, compute) -> torch.Tensor:
    """``compute()``, kept in ``folder`` under a name hashed from ``label`` and read back when there."""
    if folder is None:
        return compute()
    path = Path(folder) / f"{hashlib.sha256(label.encode()).hexdigest()[:16]}.pt"
    if path.exists():
        return torch.load(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    value = compute()
    torch.save(value, path)
    return value


def perplexities(binned: list[float]) -> list[float]:
    """exp of each bin's mean loss."""
    return [math.exp(value) for value in binned]


# ---- reading a record (the real-model chapter, chapters 7, 14, 17 and 20) --------------------------------

NOLIMA_SHARE = 0.85  # effective length: the longest distance whose accuracy keeps 85% of the shortest's (NoLiMa)


def _runs(record: dict, part: str, **selection) -> list[dict]:
    return [run for run in record["runs"] if run["part"] == part
            and all(run.get(name) == value for name, value in selection.items())]


def wavelength(pair: int, head_dim: int = 64, base: float = 100_000.0) -> float:
    """Tokens per turn of RoPE pair ``pair`` (half-split pairing): ``2 pi base^(2 pair / head_dim)``."""
    return 2 * math.pi * base ** (2 * pair / head_dim)


def frequency_rows(record: dict) -> dict:
    """``{layer: {"largest q pair", "largest k pair", "its wavelength (tokens)", "q: slow pairs' share"}}``:
    which RoPE pair is largest in each layer's queries and keys, the wavelength of the queries' largest, and
    the share of the queries' squared size in the slow pairs (wavelength above the trained length: pairs 20
    to 31 of SmolLM2's 32, 37.5% of them)."""
    (run,) = _runs(record, "frequencies")
    rows = {}
    for layer, (q, k) in enumerate(zip(run["q"], run["k"])):
        top_q, top_k = max(range(len(q)), key=q.__getitem__), max(range(len(k)), key=k.__getitem__)
        squares = [value ** 2 for value in q]
        slow = [i for i in range(len(q)) if wavelength(i, 2 * len(q)) > TRAINED_LENGTH]
        rows[layer] = {"largest q pair": top_q, "largest k pair": top_k,
                       "its wavelength (tokens)": wavelength(top_q, 2 * len(q)),
                       "q: slow pairs' share": sum(squares[i] for i in slow) / sum(squares)}
    return rows


def sink_rows(record: dict, level: float = 0.95) -> dict:
    """``{layer: {reading: (mean, low, high)}}``: the first token's share of attention (the mean over a
    layer's heads), its t-interval over documents, for each way the documents are read."""
    runs = _runs(record, "sinks")
    readings = list(runs[0]["first_token_share"])
    layers = len(runs[0]["first_token_share"][readings[0]])
    return {layer: {reading: t_interval([statistics.fmean(run["first_token_share"][reading][layer])
                                         for run in runs], level) for reading in readings}
            for layer in range(layers)}


def strongest_sink_heads(record: dict, reading: str = "document start (no BOS)", count: int = 5) -> list:
    """``[(layer, head, mean share over documents)]``: the ``count`` heads that give the first token the most."""
    runs = _runs(record, "sinks")
    shares = [run["first_token_share"][reading] for run in runs]
    heads = [(layer, head, statistics.fmean(s[layer][head] for s in shares))
             for layer in range(len(shares[0])) for head in range(len(shares[0][layer]))]
    return sorted(heads, key=lambda row: -row[2])[:count]


def _far_runs(record: dict, control: str | None) -> list[dict]:
    return [run for run in _runs(record, "far_context") if run.get("control") == control]


def far_context_rows(record: dict, control: str | None = None) -> dict:
    """``{f"last {c}": {"interval", "p", "holm"}}``: the per-token loss of the truncated reading minus the
    full reading (nats, tokens after the first c), its t-interval over documents, the one-sample t-test's p
    and Holm's correction over the truncations. Positive: the full reading predicts better, the text's far
    context is used. ``control="shuffled"``: the negative control's runs (chunks of different documents)."""
    runs = _far_runs(record, control)
    if len(runs) < 2:
        return {}
    truncations = record["config"]["truncations"]
    key = "per-token difference" + (", own chunk seen" if control == "shuffled" else "")
    pairs = {f"last {c}": ({i: run[f"last {c}, {key}"] for i, run in enumerate(runs)},
                           {i: 0.0 for i in range(len(runs))}) for c in truncations}
    return paired_family(pairs)


def far_context_curves(record: dict, kind: str | None = None) -> dict:
    """``{reading: [perplexity per bin]}``: each reading's loss per position bin averaged over the documents
    (of ``kind``, "code" or "prose", or all), as perplexity."""
    runs = [run for run in _far_runs(record, None) if kind in (None, run["doc"]["kind"])]
    readings = ["full"] + [f"last {c}" for c in record["config"]["truncations"]]
    return {name: perplexities([statistics.fmean(values) for values in zip(*(run[name] for run in runs))])
            for name in readings}


def retrieval_rows(record: dict, recipe: str = "none", probe: str = "random", level: float = 0.95,
                   digits: bool = False) -> dict:
    """``{distance: (mean, low, high)}`` by distance, one probe per document; the negative control (no earlier
    copy) under the key ``"no earlier copy"``. ``probe``: ``"random"`` (random ids), ``"text"`` (the middle of
    the next document) or ``"seen"`` (random ids the documents use): the induction probe's top-1 accuracy,
    t-interval over the probes; ``"passkey"``: the share of keys retrieved whole (all five digits, which is
    what greedy decoding would answer), Clopper-Pearson interval, or with ``digits`` the share of digits
    right, each after the true ones before it (t-interval)."""
    rows = {}
    runs = [run for run in _runs(record, "retrieval", recipe=recipe) if run.get("probe", "random") == probe]
    for run in sorted(runs, key=lambda run: run["distance"]):
        late = (passkey_label(run["distance"], run["prefix"] + run["distance"]) if probe == "passkey" else
                f"{run['distance']}, repeat at {run['prefix'] + run['distance']}") if "prefix" in run else None
        name = "no earlier copy" if run.get("control") == "negative" else late or run["distance"]
        if probe == "passkey" and not digits:
            right, probes = sum(_whole(run["accuracy"])), len(run["accuracy"])
            rows[name] = (right / probes, *clopper_pearson(right, probes, level))
        else:
            rows[name] = t_interval(run["accuracy"], level)
    return rows


def _whole(accuracies: list[float]) -> list[bool]:
    """Which passkeys came back whole: all five digits right (what greedy decoding would answer)."""
    return [a > 1 - 1e-6 for a in accuracies]


def passkey_label(distance: int, position: int) -> str:
    """The ``retrieval_rows`` key of a passkey ``distance`` back whose question stands at ``position``."""
    return f"{distance}, needle after {position - distance}"


def effective_length(rows: dict, share: float = NOLIMA_SHARE) -> int | None:
    """The largest distance up to which every probed distance keeps a mean accuracy of at least ``share`` of
    the shortest distance's (NoLiMa's rule, which puts a model's effective length where it falls below 85% of
    its own short-context score), from ``retrieval_rows``; None when no distance was probed."""
    distances = sorted(d for d in rows if isinstance(d, int))
    if not distances:
        return None
    bar, passed = share * rows[distances[0]][0], None
    for distance in distances:
        if rows[distance][0] < bar:
            break
        passed = distance
    return passed


def passkey_reach(record: dict, recipes: list[str] | None = None) -> dict:
    """Does a recipe move the model's effective length? The passkey asked with the needle early in the window,
    at each distance within L, unscaled and under each of ``recipes`` (the study's, by default; Holm's family)
    asked at two distances or more:
    ``{recipe: {"rows": keys right by distance (``retrieval_rows``), "effective": ``effective_length`` of
    them, None when the shortest distance misses the book's 0.95 bar (no length to read), "paired":
    {distance: (documents whose key it retrieves and the unscaled model misses, the reverse, exact sign
    test p before any correction)}, "beyond": None, or once the recipe has every distance beyond the
    unscaled effective length, the keys it retrieves there minus the unscaled model's, per document:
    {"interval": t-interval of the mean, "t p": the paired t-test's p, "p": the exact sign-flip test's
    (``sign_flip_p``; the t-test is liberal on counts this small), "holm": kept by Holm's correction over
    the recipes on the exact p, "documents": the recipe's keys there by document}}}``. Runs pair by document."""
    def outcomes(recipe):  # {distance: [key retrieved whole?] by document}, needle early in the window
        return {run["distance"]: _whole(run["accuracy"])
                for run in _runs(record, "retrieval", recipe=recipe, probe="passkey")
                if "prefix" not in run and "control" not in run}
    unscaled, reach, counts = outcomes("none"), {}, {}
    for recipe in ("none", *(r for r in recipes or record["config"]["recipes"] if r != "none")):
        keys = outcomes(recipe)
        if len(keys) < 2:
            continue
        rows = {d: row for d, row in retrieval_rows(record, recipe=recipe, probe="passkey").items()
                if d in keys}
        shortest = rows[min(rows)][0]
        reach[recipe] = {"rows": rows, "effective": effective_length(rows) if shortest >= 0.95 else None,
                         "paired": {}, "beyond": None}
        for d in (d for d in keys if d in unscaled and recipe != "none"):
            wins = sum(a and not b for a, b in zip(keys[d], unscaled[d]))
            losses = sum(b and not a for a, b in zip(keys[d], unscaled[d]))
            reach[recipe]["paired"][d] = (wins, losses, sign_test(wins, losses))
        counts[recipe] = keys
    edge = reach["none"]["effective"] if "none" in reach else None
    beyond = [d for d in unscaled if edge is not None and d > edge]

    def per_document(keys):  # {document: keys retrieved at the distances beyond the unscaled length}
        return {doc: sum(keys[d][doc] for d in beyond) for doc in range(len(unscaled[beyond[0]]))}
    family = {r: (per_document(keys), per_document(unscaled)) for r, keys in counts.items()
              if r != "none" and beyond and all(d in keys for d in beyond)}
    for recipe, (ours, theirs) in family.items():
        differences = [ours[doc] - theirs[doc] for doc in ours]
        reach[recipe]["beyond"] = {"interval": paired_interval(ours, theirs), "t p": paired_p_value(ours, theirs),
                                   "p": sign_flip_p(differences), "documents": ours}
    kept = holm({r: reach[r]["beyond"]["p"] for r in family})
    for recipe in family:
        reach[recipe]["beyond"]["holm"] = kept[recipe]
    return reach


def arm_contrasts(record: dict) -> dict:
    """Each temperature arm against its parent recipe (``ARM_PARENTS``), paired by document: the keys the arm
    retrieves at the distances beyond the unscaled effective length minus the parent's there, ``{arm:
    {"parent", "interval": t-interval of the mean, "p": exact sign-flip p, "holm": kept by Holm over the
    arms}}``, for the arms read there (``passkey_reach``'s "beyond")."""
    reach = passkey_reach(record, recipes=[*ARM_PARENTS, *ARM_PARENTS.values()])
    read = {arm: (reach[arm]["beyond"]["documents"], reach[parent]["beyond"]["documents"], parent)
            for arm, parent in ARM_PARENTS.items()
            if (reach.get(arm) or {}).get("beyond") and (reach.get(parent) or {}).get("beyond")}
    out = {arm: {"parent": parent, "interval": paired_interval(ours, theirs),
                 "p": sign_flip_p([ours[doc] - theirs[doc] for doc in ours])}
           for arm, (ours, theirs, parent) in read.items()}
    kept = holm({arm: row["p"] for arm, row in out.items()})
    return {arm: {**row, "holm": kept[arm]} for arm, row in out.items()}


def arm_grid(record: dict) -> dict:
    """YaRN x2 and Llama 3 x2 share their fast and slow pairs and differ only in the middle ones, so with the
    two temperature arms the four runs form a 2x2 (YaRN's or Llama 3's frequencies, with or without YaRN's
    temperature). Per document, the keys retrieved at the distances beyond the unscaled effective length
    (``passkey_reach``'s "beyond"): ``{contrast: {"interval": t-interval of the mean difference, "p": exact
    sign-flip p}}`` for "YaRN x2 - Llama 3 x2", the frequencies at each temperature ("frequencies, t = 1":
    YaRN t = 1 - Llama 3; "frequencies, YaRN's t": YaRN - Llama 3 with YaRN's t), and the two main effects
    (the per-document mean of the two differences each: "frequencies", "temperature"). Readings chosen
    after the runs, no correction; ``{}`` until the four are read."""
    arms = list(ARM_PARENTS)
    reach = passkey_reach(record, recipes=[*arms, *ARM_PARENTS.values()])
    if not all((reach.get(r) or {}).get("beyond") for r in (*arms, *ARM_PARENTS.values())):
        return {}
    yarn_t1, llama_t = arms
    yarn, llama = ARM_PARENTS[yarn_t1], ARM_PARENTS[llama_t]
    docs = {r: reach[r]["beyond"]["documents"] for r in (yarn, yarn_t1, llama, llama_t)}

    def minus(a, b):
        return [docs[a][d] - docs[b][d] for d in sorted(docs[a])]
    differences = {f"{yarn} - {llama}": minus(yarn, llama), "frequencies, t = 1": minus(yarn_t1, llama),
                   "frequencies, YaRN's t": minus(yarn, llama_t)}
    differences["frequencies"] = [(a + b) / 2 for a, b in zip(differences["frequencies, t = 1"],
                                                               differences["frequencies, YaRN's t"])]
    differences["temperature"] = [(a + b) / 2 for a, b in zip(minus(yarn, yarn_t1), minus(llama_t, llama))]
    return {name: {"interval": t_interval(d), "p": sign_flip_p(d)} for name, d in differences.items()}


STREAM_READINGS = ("rolling, sinks", "rolling, no sinks", "recomputed", "dense")


def stream_perplexities(record: dict, span: tuple[int, int | None]) -> dict[str, dict[str, float]]:
    """``{reading: {stream: perplexity over positions span[0] .. span[1]}}`` (``None``: to the end)."""
    out: dict[str, dict[str, float]] = {}
    for run in _runs(record, "streaming"):
        for reading in STREAM_READINGS:
            for stream, row in zip(run["streams"], run[reading]):
                out.setdefault(reading, {})[f"{stream['doc']} @ {stream['start']}"] = \
                    _span_perplexity(row, span, record["config"]["bin"])
    return out


def stream_curves(record: dict) -> dict:
    """``{reading: [perplexity per bin]}``: each streaming reading's loss per position bin averaged over
    every stream, as perplexity (``{}`` before the streaming run)."""
    rows = {reading: [row for run in _runs(record, "streaming") for row in run[reading]]
            for reading in STREAM_READINGS}
    return {reading: perplexities([statistics.fmean(values) for values in zip(*streams)])
            for reading, streams in rows.items() if streams}


def stream_count(record: dict) -> int:
    """How many streams the record's streaming runs hold."""
    return sum(len(run["streams"]) for run in _runs(record, "streaming"))


def stream_rows(record: dict, span: tuple[int, int | None] | None = None, level: float = 0.95) -> dict:
    """``{reading: (mean, low, high)}``: perplexity of each streaming reading over the positions ``span``
    (default: from the cache size, where the readings differ, to the end), t-interval over the streams."""
    span = (record["config"]["cache_tokens"], None) if span is None else span
    return {reading: t_interval(list(values.values()), level)
            for reading, values in stream_perplexities(record, span).items()}


def stream_pairs(record: dict, pairs: dict, span: tuple[int, int | None] | None = None) -> dict:
    """``paired_family`` of per-stream relative differences ``100 (a / b - 1)`` (per cent) for ``pairs``
    ``{label: (reading a, reading b)}``, Holm-corrected over the labels; ``{}`` before two streams exist."""
    span = (record["config"]["cache_tokens"], None) if span is None else span
    per_stream = stream_perplexities(record, span)
    if len(next(iter(per_stream.values()), {})) < 2:
        return {}
    family = {}
    for label, (a, b) in pairs.items():
        family[label] = ({s: 100 * (per_stream[a][s] / per_stream[b][s] - 1) for s in per_stream[a]},
                         {s: 0.0 for s in per_stream[a]})
    return paired_family(family)


def extension_rows(record: dict, length: int | None = None, spans=((0, 8192), (8192, 12288), (12288, 16384)),
                   level: float = 0.95) -> dict:
    """``{recipe: {"a-b": (mean, low, high)}}``: perplexity over positions a..b of the full reading to
    ``length`` (default ``extension_tokens``) under each recipe, t-interval over the documents every recipe
    has read (paired by document); the row ``"none, last 8192 at once"`` is the truncated reading."""
    length = record["config"]["extension_tokens"] if length is None else length
    rows: dict[str, dict] = {}
    shared = extension_documents(record, length)
    for a, b in spans:
        for recipe, values in extension_by_document(record, (a, b), length).items():
            rows.setdefault(recipe, {})[f"{a}-{b}"] = t_interval([values[doc] for doc in shared], level)
    return rows


def extension_pairs(record: dict, span: tuple[int, int], against: str, length: int | None = None,
                    readings=None) -> dict:
    """``paired_family`` of each reading's perplexity over positions ``span`` (those in ``readings``, default
    every other row of ``extension_rows``) relative to ``against``'s (a recipe, or ``"none, last 8192 at
    once"``), ``100 (a / b - 1)`` per cent, paired by document over the documents every reading has read
    (``extension_documents``), Holm-corrected over them; ``{}`` before two such documents."""
    per_doc, shared = extension_by_document(record, span, length), extension_documents(record, length)
    if against not in per_doc:
        raise ValueError(f"against must be one of {sorted(per_doc)}, got {against!r}")
    if len(shared) < 2:
        return {}
    base = per_doc[against]
    pairs = {recipe: ({d: 100 * (per_doc[recipe][d] / base[d] - 1) for d in shared}, dict.fromkeys(shared, 0.0))
             for recipe in per_doc if recipe != against and (readings is None or recipe in readings)}
    return paired_family(pairs)


def _extension_losses(record: dict, length: int | None) -> tuple[dict, list[str]]:
    """``({reading: {document: [loss per bin]}}, the documents every reading has read to length)``; the
    truncated reading under its own row name."""
    length = record["config"]["extension_tokens"] if length is None else length
    truncated = f"last {record['config']['context_tokens']}"
    per_doc: dict[str, dict[str, list[float]]] = {}
    for run in _runs(record, "extension", length=length, control=None):
        for name, losses in ((run["recipe"], run["losses"]), (f"none, {truncated} at once", run.get(truncated))):
            if losses is not None:
                per_doc.setdefault(name, {})[run["doc"]["name"]] = losses
    shared = sorted(set.intersection(*(set(docs) for docs in per_doc.values()))) if per_doc else []
    return per_doc, shared


def own_truncated_by_document(record: dict, span: tuple[int, int] = LAST_BIN, length: int | None = None) -> dict:
    """``{recipe: {document: 100 (full / own - 1)}}``: each recipe's full reading over positions ``span``
    relative to its own truncated reading (the same recipe reading at most ``context_tokens`` tokens at once,
    windows every half of it), in per cent; below zero where the recipe reads text further back than the
    trained length to advantage. Only the documents both readings have read."""
    full, own = extension_by_document(record, span, length), _own_truncated(record, span, length)
    return {recipe: {doc: 100 * (full[recipe][doc] / value - 1) for doc, value in docs.items()
                     if doc in full.get(recipe, {})} for recipe, docs in own.items()}


def own_truncated_cost(record: dict, span: tuple[int, int] = LAST_BIN, length: int | None = None) -> dict:
    """``{recipe: {document: 100 (own truncated / unscaled truncated - 1)}}``: what each recipe costs over
    positions ``span`` when both it and the unscaled model read at most ``context_tokens`` tokens at once (the
    same windows), in per cent: the recipe's cost with the far text taken out of both readings."""
    unscaled = extension_by_document(record, span, length)[f"none, last {record['config']['context_tokens']} at once"]
    return {recipe: {doc: 100 * (value / unscaled[doc] - 1) for doc, value in docs.items() if doc in unscaled}
            for recipe, docs in _own_truncated(record, span, length).items()}


def _own_truncated(record: dict, span: tuple[int, int], length: int | None) -> dict:
    """``{recipe: {document: perplexity over positions span}}`` of each recipe's own truncated reading."""
    length = record["config"]["extension_tokens"] if length is None else length
    truncated, out = f"last {record['config']['context_tokens']}", {}
    for run in _runs(record, "extension", length=length, control="own truncated"):
        out.setdefault(run["recipe"], {})[run["doc"]["name"]] = _span_perplexity(run[truncated], span,
                                                                                 record["config"]["bin"])
    return out


def own_truncated_pairs(record: dict, span: tuple[int, int] = LAST_BIN, length: int | None = None) -> dict:
    """``paired_family`` of ``own_truncated_by_document`` (per cent, paired by document, Holm over the
    recipes); a recipe read on fewer than two documents is left out."""
    per_doc = own_truncated_by_document(record, span, length)
    return paired_family({r: (v, dict.fromkeys(v, 0.0)) for r, v in per_doc.items() if len(v) >= 2})


def extension_documents(record: dict, length: int | None = None) -> list[str]:
    """The documents every reading (each recipe and the truncated one) has read to ``length``."""
    return _extension_losses(record, length)[1]


def extension_curves(record: dict, length: int | None = None) -> dict:
    """``{recipe: [perplexity per bin]}``: each reading's loss per position bin averaged over the documents
    every reading has read to ``length`` (default ``extension_tokens``), as perplexity; ``{}`` before any."""
    per_doc, shared = _extension_losses(record, length)
    return {name: perplexities([statistics.fmean(values) for values in zip(*(docs[d] for d in shared))])
            for name, docs in per_doc.items() if shared}


def extension_by_document(record: dict, span: tuple[int, int], length: int | None = None) -> dict:
    """``{reading: {document: perplexity over positions span}}`` of the full readings to ``length`` (default
    ``extension_tokens``), each recipe and the truncated reading under its own row name."""
    bin_ = record["config"]["bin"]
    return {name: {doc: _span_perplexity(losses, span, bin_) for doc, losses in docs.items()}
            for name, docs in _extension_losses(record, length)[0].items()}


def _span_perplexity(losses: list[float], span: tuple[int, int | None], bin_: int) -> float:
    """Perplexity over positions ``span[0] .. span[1]`` (``None``: to the end) of a reading's mean loss per
    ``bin_``-token bin: the exponential of the mean of the bins the span covers."""
    last = None if span[1] is None else span[1] // bin_
    return math.exp(statistics.fmean(losses[span[0] // bin_:last]))


EQUIVALENCE_PERCENT = 1.0  # "changes nothing": the 95% interval of the difference lies within +-1%


def _verdict(holds: bool | None) -> str:
    return "not run yet" if holds is None else ("holds" if holds else "does not hold")


def _percent(interval) -> str:
    mean, low, high = interval
    return f"{mean:+.1f}% [{low:+.1f}, {high:+.1f}]"


def toy_claims(record: dict) -> dict:
    """``{claim: {"where": chapter, "on SmolLM2-135M": the evidence, "verdict": ...}}``: each conclusion the
    toy-model chapters drew, read on the real model's record by a stated rule. Verdicts: "holds", "does not
    hold", "not resolved" (a difference that is neither resolved nor shown to be within the margin) and "not
    run yet" (the record lacks the runs). The rules: a sink is a layer whose lower bound over documents exceeds
    20 times even attention; "changes nothing" needs the 95% interval within +-1% (``EQUIVALENCE_PERCENT``);
    "uses far context" a Holm-kept positive difference; the recipes are compared with the truncated reading on
    the last 1,024 positions of 16,384 (``LAST_BIN``), where it sees 7,170 to 8,192 tokens, and of ``long_tokens``
    under ``long_recipes`` once two documents have been read that far: "no recipe beats it" holds when at each
    length none is resolved better and none's interval reaches 1% better."""
    claims = {}

    def add(claim, where, evidence, holds, unresolved=False):
        verdict = "not resolved" if unresolved else _verdict(holds)
        claims[claim] = {"where": where, "on SmolLM2-135M": evidence, "verdict": verdict}

    frequencies = frequency_rows(record)
    slow = sum(row["its wavelength (tokens)"] > TRAINED_LENGTH for row in frequencies.values())
    add("the slow pairs carry the largest queries and keys (Barbero et al.)", "chapter 6",
        f"largest query pair slower than 8,192 in {slow} of {len(frequencies)} layers", slow == len(frequencies))
    sinks = sink_rows(record)
    from .streaming import uniform_first_token_share
    even = uniform_first_token_share(record["config"]["sink_tokens_read"])
    strong = sum(row["document start (no BOS)"][1] > 20 * even for row in sinks.values())
    add("without a BOS token no first-token sink forms", "chapter 17",
        f"{strong} of {len(sinks)} layers give the first token over 20x even attention", strong == 0)
    far = far_context_rows(record)
    kept = [name for name, row in far.items() if row["holm"] and row["interval"][1] > 0]
    add("text gains nothing from context beyond a few hundred tokens", "chapters 7, 10",
        "the 8,192-token reading beats " + (", ".join(kept) if kept else "no truncated reading")
        + " (stride c/2: each token sees c/2 to c)", not kept)
    probes = retrieval_rows(record)
    within = sorted(d for d in probes if isinstance(d, int))
    if within:
        length = effective_length(probes)
        after = next((d for d in within if d > length), None)
        reach = f"{length:,}" + (f" (not at {after:,})" if after else " (the longest probed)")
        add("copying falls short of the trained length (an induction-copy range)", "chapters 10, 20",
            f"random-token copy {probes[within[0]][0]:.2f} at {within[0]}; keeps 85% of it up to {reach} tokens",
            after is not None)
    count = stream_count(record)
    if count >= 2:
        tests = stream_pairs(record, {"no sinks": ("rolling, no sinks", "rolling, sinks"),
                                      "sinks": ("rolling, sinks", "recomputed")})
        dense = stream_pairs(record, {"dense": ("dense", "recomputed")}, span=(TRAINED_LENGTH, None))["dense"]
        cache = record["config"]["cache_tokens"]
        seen = f"{cache - cache // 4 + 1:,} to {cache:,}"  # the recomputation's windows: every cache // 4
        for claim, test in (("sink tokens change nothing measurable in a rolling cache", tests["no sinks"]),
                            ("a rolling cache with sinks matches recomputation", tests["sinks"])):
            low, high = test["interval"][1:]
            within_margin = -EQUIVALENCE_PERCENT < low and high < EQUIVALENCE_PERCENT
            # the cache always sees `cache` tokens, the recomputation fewer: a cache that does better may owe
            # it to that context, so only a cache that does worse than recomputation refutes "matches"
            confounded = claim.endswith("recomputation") and high < 0
            lower = (f" (lower: the cache does better, but recomputation saw {seen} tokens to its {cache:,})"
                     if confounded else " (lower: the cache does better)" if high < 0 else "")
            add(claim, "chapter 17", f"{_percent(test['interval'])}{lower}, {count} streams", within_margin,
                unresolved=not within_margin and (not test["holm"] or confounded))
        add("reading densely far beyond the trained length is far worse", "chapter 17",
            f"dense vs recomputed beyond 8,192: {_percent(dense['interval'])}, {count} streams",
            dense["interval"][1] > 50, unresolved=not dense["holm"])
    else:
        for claim in ("sink tokens change nothing measurable in a rolling cache",
                      "a rolling cache with sinks matches recomputation",
                      "reading densely far beyond the trained length is far worse"):
            add(claim, "chapter 17", "fewer than two streams recorded", None)
    length = record["config"]["extension_tokens"]
    readings = _against_truncated(record)
    if readings:  # "no recipe beats it": none resolved better, and none can be over 1% better, at each length
        better = [r for reading in readings for r in reading["better"]]
        open_ = [r for reading in readings for r in reading["open"]]
        add("no recipe beats the truncated reading on text beyond L", "chapter 7",
            "zero-shot, last 1,024 positions: " + "; ".join(reading["evidence"] for reading in readings),
            not better, unresolved=not better and bool(open_))
    else:
        add("no recipe beats the truncated reading on text beyond L", "chapter 7",
            f"{len(extension_documents(record, length))} document(s) read by every recipe and the truncated reading",
            None)
    inside = extension_by_document(record, (0, TRAINED_LENGTH), length)
    if "PI x4" in inside and len(set(inside["PI x4"]) & set(inside.get("none", {}))) >= 2:
        ratio = statistics.fmean(inside["PI x4"][d] / inside["none"][d] for d in inside["PI x4"] if d in inside["none"])
        add("zero-shot PI at factor 4 costs even within L", "chapter 7",
            f"PI x4 within 8,192: {ratio:.2f}x the unscaled perplexity", ratio > 1.1)
    else:
        add("zero-shot PI at factor 4 costs even within L", "chapter 7", "fewer than two documents", None)
    add("unscaled, a RoPE model cannot copy from beyond L; the recipes can", "chapter 7",
        *_beyond_claim(record))
    return claims


def _against_truncated(record: dict) -> list[dict]:
    """Each recipe against the truncated reading on the last 1,024 positions, at ``extension_tokens`` (every
    recipe) and at ``long_tokens`` (``long_recipes``), for each length read on two documents or more:
    ``[{"evidence", "better": recipes resolved better, "open": recipes whose interval reaches 1% better}]``."""
    config = record["config"]
    truncated = f"none, last {config['context_tokens']} at once"
    readings = []
    for length, recipes in ((config["extension_tokens"], config["recipes"]),
                            (config.get("long_tokens"), config.get("long_recipes", []))):
        documents = len(extension_documents(record, length)) if length else 0
        if documents < 2:
            continue
        tests = extension_pairs(record, (length - 1024, length), truncated, length,
                                readings=[r for r in recipes if r != "none"])
        closest = min(tests, key=lambda r: tests[r]["interval"][0])
        better = [r for r, t in tests.items() if t["holm"] and t["interval"][2] < 0]
        readings.append({"better": better,
                         "open": [r for r, t in tests.items() if t["interval"][1] < -EQUIVALENCE_PERCENT],
                         "evidence": f"of {length:,}, {documents} documents, resolved better: "
                                     f"{', '.join(better) or 'none'}, closest {closest} "
                                     f"{_percent(tests[closest]['interval'])}"})
    return readings


def _beyond_claim(record: dict) -> tuple[str, bool | None]:
    """The evidence and verdict of "unscaled, a RoPE model cannot retrieve beyond L; the recipes can", on the
    passkey (the probe whose control passes), ``passkey_distance`` back with the needle placed so that the
    question stands at the first of ``passkey_far``: unscaled, below 85% of its keys at that distance early
    in the window; a recipe keeps 85% of its own early score (itself at least the book's 0.95 bar). "Does
    not hold" once every recipe has run and none can, or if the unscaled model retrieves there itself; None
    (not run yet) before."""
    config = record["config"]
    distance, far = config.get("passkey_distance"), config.get("passkey_far") or [None]
    late = passkey_label(distance, far[0]) if far[0] else None
    unscaled = retrieval_rows(record, probe="passkey")
    if late not in unscaled or distance not in unscaled:
        return "passkeys asked beyond 8,192 tokens are later runs of the study", None
    cannot = unscaled[late][0] < NOLIMA_SHARE * unscaled[distance][0]
    scores = {}
    for recipe in (r for r in config["recipes"] if r != "none"):
        rows = retrieval_rows(record, recipe=recipe, probe="passkey")
        if distance in rows and late in rows:
            scores[recipe] = (rows[distance][0], rows[late][0])
    can = [r for r, (early, there) in scores.items() if early >= 0.95 and there >= NOLIMA_SHARE * early]
    evidence = (f"keys {distance:,} back, asked at {far[0]:,}: unscaled {unscaled[late][0]:.2f} "
                f"({unscaled[distance][0]:.2f} early); "
                + (", ".join(f"{r} {there:.2f} ({early:.2f} early)" for r, (early, there) in scores.items())
                   or "no recipe run yet"))
    if not cannot:
        return evidence, False
    if can:
        return evidence, True
    return evidence, False if len(scores) == len(config["recipes"]) - 1 else None


__all__ = ["RECIPES", "TEMPERATURE_ARMS", "ARM_PARENTS", "arm_contrasts", "arm_grid", "PRESETS", "documents", "pair_sizes", "induction_probe", "passkey_probe", "probe_accuracy", "next_run", "run",
           "measure", "perplexities", "wavelength", "frequency_rows", "sink_rows", "strongest_sink_heads",
           "far_context_rows", "far_context_curves", "retrieval_rows", "passkey_label", "effective_length", "passkey_reach", "stream_rows", "stream_pairs",
           "stream_curves", "stream_count", "stream_perplexities", "extension_rows", "extension_pairs",
           "extension_documents", "own_truncated_pairs", "own_truncated_by_document", "own_truncated_cost", "extension_by_document", "extension_curves", "NOLIMA_SHARE", "STREAM_READINGS", "toy_claims", "EQUIVALENCE_PERCENT", "LAST_BIN"]
