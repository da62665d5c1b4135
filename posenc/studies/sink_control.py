"""Chapter 17's positive control: a task in which attention sinks form, and what a rolling cache does to them.

The book's language models at this size grow no first-token sink (chapter 17 measures it), so a null about
sinks there says nothing until a model that has them is read the same way. The Bigram-Backcopy task of Guo
et al. (2024; ``posenc.tasks.bigram_backcopy``) is such a model's training data: tokens follow a bigram
table except right after a trigger token, where the token before the trigger comes back. Attention is
needed only at the triggers; everywhere else a head has nothing to read, and in trained models it parks
its weight on the BOS token (the "dormant" state of an active-dormant head).

Three kinds of model are trained per seed, with the same batches: ``"rope"`` (plain softmax attention),
``"rope with learned sinks"`` (a sink logit per head, gpt-oss) and ``"rope with output gate"`` (the sigmoid
output gate of gated attention, Qiu et al. 2025; Qwen3-Next). Each is read two ways:

- **Where attention goes**: the weight on token 0 per layer and head, at queries where a head has nothing to
  do (the current token is not a trigger: ``"dormant"``) and where it must copy (``"active"``); beside it the
  share even attention would give (``uniform_share``). For the learned sinks, the logits; for the gate, its
  mean value at dormant and active queries.
- **A stream of** ``stream_factor`` **x L tokens**, BOS first, scored four ways as in the streaming study:
  ``dense`` (all at once, RoPE far beyond L), ``recomputed`` (each token re-reads BOS and its last L - 1
  tokens), ``rolling, BOS kept`` (a KV cache keeping token 0 and the last L - 1 tokens: StreamingLLM's
  repair) and ``rolling, no BOS`` (plain eviction). Losses beyond L are split into copy targets and bigram
  targets, beside the loss a model that knows the table would have (``optimal``).
"""

from __future__ import annotations

import time
from pathlib import Path

import torch
import torch.nn.functional as F

from .. import evaluate, tasks
from ..model import TransformerLM
from ..plan import LayerSpec
from ..train import TrainConfig, train_model
from ..stats import paired_interval, t_interval
from .common import next_run_by_seed, rank, rounded

KINDS = {"rope": LayerSpec("rope"), "rope with learned sinks": LayerSpec("rope", sinks=True),
         "rope with output gate": LayerSpec("rope", gate=True)}
READINGS = ("dense", "recomputed", "rolling, BOS kept", "rolling, no BOS")

_COMMON = dict(methods=list(KINDS), vocab=64, triggers=3, successors=4, trigger_rate=0.15, table_seed=1234,
               lr=3e-3, weight_decay=0.01, warmup=100, skip=4)
PRESETS = {
    "tiny": dict(_COMMON, vocab=16, triggers=2, dim=16, layers=1, heads=2, train_len=16, steps=6, batch=4,
                 seeds=[0], stream_factor=2, streams=2, probe_rows=8),
    # a chapter's live run: one seed of plain RoPE
    "ci": dict(_COMMON, dim=64, layers=2, heads=2, train_len=64, steps=1500, batch=32, seeds=[0],
               methods=["rope"], stream_factor=4, streams=8, probe_rows=64),
    "full": dict(_COMMON, dim=64, layers=2, heads=2, train_len=64, steps=6000, batch=32, seeds=[0, 1, 2, 3, 4],
                 stream_factor=8, streams=16, probe_rows=128),
}

next_run = next_run_by_seed  # seed by seed, every kind


def table(config: dict) -> torch.Tensor:
    """The study's bigram table (the same for every seed and kind)."""
    return tasks.bigram_transitions(config["vocab"], config["triggers"], successors=config["successors"],
                                    trigger_rate=config["trigger_rate"], seed=config["table_seed"])


def build(kind: str, config: dict) -> TransformerLM:
    """The study's model for ``kind`` (a key of ``KINDS``): every layer that kind of RoPE attention."""
    return TransformerLM(config["vocab"] + 1, config["dim"], config["layers"], config["heads"], position="none",
                         plan=[KINDS[kind]] * config["layers"], max_len=config["train_len"])


def sequences(config: dict, rows: int, length: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(tokens, targets)`` ``[rows, length]`` of the task, BOS first, from generator seed ``seed``."""
    return tasks.bigram_backcopy(rows, length, table(config), triggers=config["triggers"],
                                 generator=torch.Generator().manual_seed(seed))


def optimal_losses(config: dict, tokens: torch.Tensor) -> torch.Tensor:
    """Per position, the expected loss of a model that knows the table: the entropy of the bigram row of
    the current token, or 0 after a trigger (the copy is certain). ``[rows, length]``."""
    rows = table(config)
    entropy = -(rows * rows.clamp_min(1e-300).log()).sum(1)
    out = entropy[tokens.clamp(max=config["vocab"] - 1)]
    return torch.where(tokens < config["triggers"], torch.zeros_like(out), out).float()


@torch.no_grad()
def stream_losses(model: TransformerLM, tokens: torch.Tensor, targets: torch.Tensor, L: int) -> dict:
    """``{reading: [rows, length] losses}`` for the four ``READINGS`` of a stream (see the module docstring)."""
    model.eval()
    rows, length = tokens.shape
    out = {"dense": F.cross_entropy(model(tokens).transpose(1, 2), targets, reduction="none")}
    recomputed = torch.zeros(rows, length)
    for t in range(length):
        # BOS and the last L - 1 tokens up to t (all of 0..t while that fits in L)
        context = tokens[:, :t + 1] if t < L else torch.cat([tokens[:, :1], tokens[:, t - L + 2:t + 1]], 1)
        recomputed[:, t] = F.cross_entropy(model(context)[:, -1], targets[:, t], reduction="none")
    out["recomputed"] = recomputed
    for name, sinks in (("rolling, BOS kept", 1), ("rolling, no BOS", 0)):
        cache = model.new_cache(sink_tokens=sinks, window=L - sinks)
        out[name] = torch.stack([F.cross_entropy(model(tokens[:, t:t + 1], cache=cache)[:, 0], targets[:, t],
                                                 reduction="none") for t in range(length)], dim=1)
    return out


@torch.no_grad()
def gate_means(model: TransformerLM, tokens: torch.Tensor, dormant: torch.Tensor) -> dict:
    """For a gated model: ``{"dormant", "active"}`` -> ``[layer][head]`` mean gate value (sigmoid) over
    the queries ``dormant`` marks and over the others."""
    model.eval()
    x, out = model.token_embedding(tokens), {"dormant": [], "active": []}
    for block in model.blocks:
        gate = torch.sigmoid(block.attn.gate(block.ln_attn(x)))  # [rows, seq, heads * head_dim]
        gate = gate.view(*gate.shape[:2], block.attn.n_heads, -1).mean(-1)  # [rows, seq, heads]
        out["dormant"].append(rounded(gate[dormant].mean(0).tolist(), 4))
        out["active"].append(rounded(gate[~dormant].mean(0).tolist(), 4))
        x = block(x)
    return out


def run(config: dict, key: dict, checkpoint_dir: Path | None) -> dict:
    kind, seed, L = key["method"], key["seed"], config["train_len"]
    torch.manual_seed(seed)
    model = build(kind, config)
    rows = table(config)

    def batch_fn(generator):
        return tasks.bigram_backcopy(config["batch"], L, rows, triggers=config["triggers"], generator=generator)

    start = time.perf_counter()
    history = train_model(model, batch_fn, TrainConfig(steps=config["steps"], warmup=config["warmup"], lr=config["lr"],
                                                       seed=seed, weight_decay=config["weight_decay"], decay="linear",
                                                       log_every=max(1, config["steps"] // 20)))
    result = {"train_seconds": time.perf_counter() - start, "history": history,
              "parameters": sum(p.numel() for p in model.parameters())}
    if rank() != 0:
        return result
    tokens, targets = sequences(config, config["probe_rows"], L, seed=10_000)  # held-out sequences
    dormant = tokens >= config["triggers"]
    dormant[:, 0] = True  # BOS is no trigger
    skip = config["skip"]
    result["first_token"] = {
        "dormant": [rounded(h, 4) for h in evaluate.first_token_attention(model, tokens, skip=skip, by_head=True,
                                                                          queries=dormant)],
        "active": [rounded(h, 4) for h in evaluate.first_token_attention(model, tokens, skip=skip, by_head=True,
                                                                         queries=~dormant)]}
    result["uniform_share"] = round(float((1 / torch.arange(skip + 1, L + 1, dtype=torch.float64)).mean()), 5)
    if kind == "rope with learned sinks":
        result["sink_logits"] = [rounded(block.attn.sinks.tolist(), 3) for block in model.blocks]
    if kind == "rope with output gate":
        result["gate"] = gate_means(model, tokens, dormant)
    length = config["stream_factor"] * L
    tokens, targets = sequences(config, config["streams"], length, seed=20_000)
    copy = tokens[:, L:] < config["triggers"]  # the targets beyond L that are copies
    optimal = optimal_losses(config, tokens)[:, L:]
    result["stream"] = {"optimal": {"copy": 0.0, "bigram": round(float(optimal[~copy].mean()), 4)}}
    for name, losses in stream_losses(model, tokens, targets, L).items():
        beyond = losses[:, L:]
        result["stream"][name] = {"within L": round(float(losses[:, :L].mean()), 4),
                                  "copy": round(float(beyond[copy].mean()), 4),
                                  "bigram": round(float(beyond[~copy].mean()), 4)}
    result["seconds"] = time.perf_counter() - start
    return result


# ---- reading a record (chapter 17): intervals over seeds ----------------------------------------------

def _runs(record: dict, kind: str) -> list[dict]:
    runs = sorted((run for run in record["runs"] if run["method"] == kind), key=lambda run: run["seed"])
    if not runs:
        raise ValueError(f"no runs of {kind!r} in the record; it has {sorted({r['method'] for r in record['runs']})}")
    return runs


def share_table(record: dict, kind: str, queries: str = "dormant") -> list[list[tuple[float, float, float]]]:
    """``[layer][head]`` -> the 95% t-interval over seeds of the weight on token 0 at ``queries``
    (``"dormant"`` or ``"active"``)."""
    runs = _runs(record, kind)
    shares = [run["first_token"][queries] for run in runs]
    return [[t_interval([s[layer][head] for s in shares]) for head in range(len(shares[0][layer]))]
            for layer in range(len(shares[0]))]


def stream_table(record: dict, kind: str) -> dict:
    """``{reading: {"within L", "copy", "bigram"} -> (mean, low, high)}``: mean loss (nats per token) of
    each reading over seeds, within L and beyond it by kind of target; ``"optimal"`` has the loss a model
    that knows the table would have beyond L."""
    runs = _runs(record, kind)
    return {reading: {part: t_interval([run["stream"][reading][part] for run in runs])
                      for part in runs[0]["stream"][reading]}
            for reading in ("optimal", *READINGS)}


def paired_readings(record: dict, kind: str, a: str, b: str, part: str) -> tuple[float, float, float]:
    """95% t-interval over seeds of reading ``a`` minus reading ``b`` (same model, same streams), for the
    targets ``part`` (``"copy"``, ``"bigram"`` or ``"within L"``)."""
    runs = _runs(record, kind)
    return paired_interval({run["seed"]: run["stream"][a][part] for run in runs},
                           {run["seed"]: run["stream"][b][part] for run in runs})
