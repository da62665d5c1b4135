"""A small decoder-only language model (pre-LayerNorm GPT) whose position method is one argument.

``TransformerLM(vocab_size, dim, n_layers, n_heads, position=...)`` with ``position`` in
``"none" | "sinusoidal" | "learned" | "t5" | "rope" | "alibi"``. Everything else is held fixed, so
experiments that swap the position method compare like with like.

``TransformerLM(..., plan=plan)`` gives each layer its own ``posenc.plan.LayerSpec`` instead (position
method, RoPE settings, window or chunk, temperature, sinks): the per-layer mixes of Llama 4, Gemma 3,
Cohere 2, gpt-oss and SmolLM3 (``posenc.plan.family_plan``).
"""

from __future__ import annotations

from dataclasses import replace

import torch
import torch.nn.functional as F
from torch import nn

from ._validate import check_int, check_positive_float, check_tensor
from .absolute import LearnedEncoding, SinusoidalEncoding
from .attention import (ABSOLUTE_METHODS, POSITION_METHODS, KVCache, MultiHeadAttention, checked_positions,
                        joined_positions)
from .cache import RollingLayerCache
from .feedforward import make_feed_forward
from .gqa import GroupedQueryAttention
from .mixers import CoPEAttention, DecayLayer, ForgettingAttention, ShortConv, StickBreakingAttention
from .norms import make_norm
from .plan import LayerSpec, Rope, _checked_plan, describe_plan
from .relative import T5RelativeBias


# LayerSpec.mixer -> the module that builds it (``from_spec``)
MIXER_MODULES = {"attention": MultiHeadAttention, "forgetting": ForgettingAttention,
                 "stick_breaking": StickBreakingAttention, "cope": CoPEAttention, "decay": DecayLayer}


class Block(nn.Module):
    """Pre-LN transformer block: ``x + attn(ln(x))`` then ``x + mlp(ln(x))``; with ``conv`` (a width),
    ``x + attn(h + conv(h))``, ``h = ln(x)``: a Canon layer before the token mixer (``posenc.mixers.conv``).

    ``norm`` and ``norm_eps`` choose the two norms (``posenc.norms``), ``mlp``, ``mlp_hidden`` (default
    ``mlp_ratio * dim``) and ``bias`` the feed-forward layer (``posenc.feedforward``)."""

    def __init__(self, dim: int, n_heads: int, mlp_ratio: int, attention: nn.Module, conv: int | None = None, *,
                 norm: str = "layer", norm_eps: float = 1e-5, mlp: str = "gelu", mlp_hidden: int | None = None,
                 bias: bool = True):
        super().__init__()
        self.ln_attn, self.ln_mlp = make_norm(norm, dim, norm_eps), make_norm(norm, dim, norm_eps)
        self.conv = None if conv is None else ShortConv(dim, conv)
        self.attn = attention
        self.mlp = make_feed_forward(mlp, dim, mlp_ratio * dim if mlp_hidden is None else mlp_hidden, bias=bias)

    def forward(self, x: torch.Tensor, cache=None, position_bias=None, positions=None,
                rope_cos_sin=None) -> torch.Tensor:
        if self.attn.position != "rope":
            rope_cos_sin = None  # tables are for the RoPE layers of a plan; the others ignore them
        h = self.ln_attn(x)
        if self.conv is not None:
            if cache is not None:
                raise ValueError("a layer with LayerSpec.conv has no incremental decoding in posenc: call the "
                                 "model on whole sequences (cache=None)")
            h = self.conv(h)
        x = x + self.attn(h, cache=cache, position_bias=position_bias, positions=positions,
                          rope_cos_sin=rope_cos_sin)
        return x + self.mlp(self.ln_mlp(x))


class TransformerLM(nn.Module):
    """Decoder-only causal language model (or, with ``causal=False``, a bidirectional sequence tagger).

    Args:
        vocab_size, dim, n_layers, n_heads: the usual sizes (dim divisible by n_heads).
        position: one of ``"none"``, ``"sinusoidal"``, ``"learned"``, ``"t5"``, ``"rope"``, ``"alibi"``.
        max_len: size of the learned position table; required for ``"learned"``, ignored by the others
            (which have no length limit).
        mlp_ratio: hidden width of the MLP as a multiple of dim.
        rope_base, rope_scaling, rope_interleaved: RoPE options (see ``posenc.rope``).
        t5_num_buckets, t5_max_distance: T5 bias options; one bias table is shared by all layers and the
            bias is computed once per forward pass, as in T5.
        sinusoidal_base: base of the sinusoidal table.
        sinusoidal_scale: factor on the sinusoidal table. The default, ``0.02 * sqrt(2)``, gives it the
            root-mean-square of the token embeddings and of the learned table at initialisation (standard
            deviation 0.02): every table added to the embeddings starts at the same size, so comparisons
            between methods are not decided by it (chapter 3 shows that a full-size table makes a fixed
            dot-product read-out confuse token and position, although a learned read-out still recovers
            both). Use 1.0 for the raw table.
        causal: ``True`` (default) for a language model; ``False`` lets every token see every other one
            (an encoder that outputs one prediction per token); the KV cache and ``generate`` need causal.
        plan: optional list of ``n_layers`` ``posenc.plan.LayerSpec``, one per layer (see ``posenc.plan``);
            ``position`` must then be ``"none"``, ``"sinusoidal"`` or ``"learned"`` (what is added to the
            embeddings), and the rope_* / t5_* options are unused (the specs hold them). The T5 layers of a
            plan share one bias table. ``model.plan`` is the plan of any model (uniform when none is given).

    Beyond position, the architecture of every block (defaults: the book's small GPT-style models):

    - ``n_kv_heads``: grouped-query attention with that many key/value heads (``posenc.gqa``), None: one per
      query head; ``bias=False`` drops the biases of the attention and feed-forward projections. Either builds
      the attention layers as ``GroupedQueryAttention`` (only ``mixer="attention"`` layers take them).
    - ``norm``: ``"layer"`` (LayerNorm) or ``"rms"`` (RMSNorm), with ``norm_eps`` (``posenc.norms``).
    - ``mlp``: ``"gelu"`` or ``"swiglu"`` of width ``mlp_hidden`` (default ``mlp_ratio * dim``;
      ``posenc.feedforward``).
    - ``tie_embeddings``: the output layer shares the token embedding's weight (default), or has its own.

    Llama (SmolLM2-135M, ``posenc.load_pretrained``): ``n_kv_heads=3, bias=False, norm="rms", norm_eps=1e-5,
    mlp="swiglu", mlp_hidden=1536`` with a plan from ``plan_from_hf_config``.

    ``check_token_range`` (default True) checks every token id against ``vocab_size`` with a clear error; on
    a GPU that check waits for the device each step, so set it to False in a tuned training loop.

    ``model(tokens[batch, seq]) -> logits[batch, seq, vocab_size]``. For incremental decoding,
    ``cache = model.new_cache()`` and then ``model(new_tokens, cache=cache)`` returns the logits of the
    new tokens only, treating them as the positions after everything already in the cache.

    ``model(tokens, positions=positions)`` gives the tokens explicit integer positions (``[seq]`` or
    ``[batch, seq]``, whole numbers >= 0, not necessarily increasing), as randomized positional encodings
    need: sinusoidal and learned add those table rows, RoPE rotates by them, ALiBi and T5 use the
    differences ``key_pos - query_pos``, ``"none"`` ignores them. With a cache, ``positions`` are those of
    the new tokens; once a cache holds explicit positions, every later call must pass them. Causal masking
    follows the order of the tokens. ``positions=None`` is the default ``offset .. offset+seq-1``.

    Positions that are not a line (image patches, M-RoPE's three axes): ``rope_cos_sin=(cos, sin)``
    (``[seq, rotary_dim]`` or ``[batch, seq, rotary_dim]``, e.g. from ``axial_rope_cos_sin`` or
    ``mrope_cos_sin``) rotates every RoPE layer by those tables, and ``position_embeddings``
    (``[batch or 1, seq, dim]``, e.g. a learned 2D table) is added to the token embeddings.
    """

    def __init__(self, vocab_size: int, dim: int, n_layers: int, n_heads: int, *, position: str,
                 max_len: int | None = None, mlp_ratio: int = 4, rope_base: float = 10000.0,
                 rope_scaling: dict | None = None, rope_interleaved: bool = False, t5_num_buckets: int = 32,
                 t5_max_distance: int = 128, sinusoidal_base: float = 10000.0,
                 sinusoidal_scale: float = 0.02 * 2 ** 0.5, causal: bool = True, plan: list[LayerSpec] | None = None,
                 n_kv_heads: int | None = None, bias: bool = True, norm: str = "layer", norm_eps: float = 1e-5,
                 mlp: str = "gelu", mlp_hidden: int | None = None, tie_embeddings: bool = True):
        super().__init__()
        self.vocab_size = check_int("vocab_size", vocab_size)
        self.n_layers = check_int("n_layers", n_layers)
        check_int("mlp_ratio", mlp_ratio)
        if position not in POSITION_METHODS:
            raise ValueError(f"position must be one of {list(POSITION_METHODS)}, got {position!r}")
        self.position, self.max_len, self.causal = position, max_len, bool(causal)
        self.check_token_range = True
        self.token_embedding = nn.Embedding(vocab_size, check_int("dim", dim))
        self.absolute = None
        if position == "sinusoidal":
            self.absolute = SinusoidalEncoding(dim, base=sinusoidal_base, scale=sinusoidal_scale)
        elif position == "learned":
            if max_len is None:
                raise ValueError("max_len is required for position='learned' (the size of its table)")
            self.absolute = LearnedEncoding(max_len, dim)
        if plan is None:
            inside = "none" if position in ABSOLUTE_METHODS else position  # absolute: added to the embeddings
            rope = Rope(rope_base, rope_scaling, rope_interleaved) if inside == "rope" else None
            plan = [LayerSpec(inside, rope=rope)] * n_layers
            self.t5_layers_share = position == "t5"
        else:
            if position not in ("none",) + ABSOLUTE_METHODS:
                raise ValueError(f"with a plan, position says what is added to the embeddings: 'none', 'sinusoidal' "
                                 f"or 'learned', got {position!r} (put attention methods in the plan's LayerSpecs)")
            plan = _checked_plan(plan)
            if len(plan) != n_layers:
                raise ValueError(f"plan has {len(plan)} LayerSpecs, n_layers={n_layers}")
            for i, spec in enumerate(plan):
                for name in ("window", "chunk"):
                    size = getattr(spec, name)
                    if size is not None and max_len is not None and size > max_len:
                        raise ValueError(f"plan[{i}].{name}={size} is larger than max_len={max_len}")
            # one bias computed once per pass serves every layer only if they are the same T5 layer
            self.t5_layers_share = plan[0].position == "t5" and all(spec == plan[0] for spec in plan)
        self.plan = list(plan)
        t5_bias = None
        if any(spec.position == "t5" for spec in plan):
            t5_bias = T5RelativeBias(n_heads, bidirectional=not self.causal, num_buckets=t5_num_buckets,
                                     max_distance=t5_max_distance)
        grouped = {} if n_kv_heads is None and bias else {"n_kv_heads": n_kv_heads, "bias": bool(bias)}
        if mlp_hidden is not None:
            check_int("mlp_hidden", mlp_hidden)
        norm_eps = check_positive_float("norm_eps", norm_eps)
        self.blocks = nn.ModuleList(Block(dim, n_heads, mlp_ratio, self._mixer(dim, n_heads, spec, t5_bias, grouped),
                                          conv=spec.conv, norm=norm, norm_eps=norm_eps, mlp=mlp, mlp_hidden=mlp_hidden,
                                          bias=bias) for spec in plan)
        self.ln_final = make_norm(norm, dim, norm_eps)
        self.head = nn.Linear(dim, vocab_size, bias=False)
        if tie_embeddings:
            self.head.weight = self.token_embedding.weight  # tied input and output embeddings
        self.apply(self._init_weights)

    def _mixer(self, dim: int, n_heads: int, spec: LayerSpec, t5_bias, grouped: dict) -> nn.Module:
        """The token mixer of one layer; ``grouped`` (``n_kv_heads``, ``bias``) makes attention grouped-query."""
        spec = replace(spec, conv=None)  # the block builds the convolution
        if spec.mixer == "attention":
            attention = GroupedQueryAttention if grouped else MultiHeadAttention
            return attention.from_spec(dim, n_heads, spec, causal=self.causal,
                                       t5_bias=t5_bias if spec.position == "t5" else None, **grouped)
        if grouped:
            raise ValueError(f"n_kv_heads and bias=False are options of attention layers; a plan's "
                             f"mixer={spec.mixer!r} layer has neither (build it with n_kv_heads=None, bias=True)")
        return MIXER_MODULES[spec.mixer].from_spec(dim, n_heads, spec, causal=self.causal)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)

    def new_cache(self, *, sink_tokens: int | None = None, window: int | None = None) -> KVCache:
        """An empty KV cache for incremental decoding (causal models only).

        With ``sink_tokens`` and ``window``, a rolling cache (StreamingLLM): every layer keeps the first
        ``sink_tokens`` tokens and the last ``window``, and positions are assigned within the cache. With
        RoPE the kept keys are re-rotated as tokens are evicted, which equals a fresh pass over the kept
        tokens only for a table that does not depend on the length: not for dynamic NTK scaling or
        LongRoPE with ``sink_tokens + window`` above the original length (``posenc.cache``). Dynamic
        scaling also makes plain cached decoding differ from the full pass (chapter 13).
        """
        if not self.causal:
            raise ValueError("new_cache needs causal=True: a bidirectional model has no incremental decoding")
        if window is not None and self.position == "learned" and sink_tokens + window > self.max_len:
            raise ValueError(f"sink_tokens + window = {sink_tokens + window} exceeds the learned table's "
                             f"max_len={self.max_len}")
        return KVCache(self.n_layers, sink_tokens=sink_tokens, window=window)

    @staticmethod
    def _first_new_position(cache: KVCache | None, seq: int) -> int:
        """Position of the first new token: the cache's length, after a rolling cache makes room for ``seq``."""
        if cache is None:
            return 0
        layer = cache[0]
        if isinstance(layer, RollingLayerCache):
            return min(layer.length, max(layer.capacity - seq, 0))
        return layer.length

    def forward(self, tokens: torch.Tensor, *, cache: KVCache | None = None, positions: torch.Tensor | None = None,
                rope_cos_sin: tuple[torch.Tensor, torch.Tensor] | None = None,
                position_embeddings: torch.Tensor | None = None) -> torch.Tensor:
        check_tensor("tokens", tokens, min_dim=2)
        if tokens.dim() != 2 or tokens.is_floating_point():
            raise ValueError(f"tokens must be an integer tensor [batch, seq], got {tokens.dtype} {tuple(tokens.shape)}")
        if self.check_token_range and tokens.numel() and (tokens.min() < 0 or tokens.max() >= self.vocab_size):
            raise ValueError(f"token ids must be in [0, {self.vocab_size}), got min {int(tokens.min())}, "
                             f"max {int(tokens.max())}")
        if positions is not None or (cache is not None and cache[0].positions is not None):
            if rope_cos_sin is not None or position_embeddings is not None:
                raise ValueError("pass positions, or rope_cos_sin / position_embeddings, not both")
            return self._forward_at_positions(tokens, cache, positions)
        offset = self._first_new_position(cache, tokens.shape[1])
        x = self.token_embedding(tokens)
        if self.absolute is not None:
            x = self.absolute(x, offset=offset)
        if position_embeddings is not None:
            check_tensor("position_embeddings", position_embeddings, min_dim=2)
            if position_embeddings.shape[-2:] != x.shape[-2:]:
                raise ValueError(f"position_embeddings must end in [seq, dim] = {list(x.shape[-2:])}, "
                                 f"got {tuple(position_embeddings.shape)}")
            x = x + position_embeddings.to(x.dtype)
        # T5 shares one bias across layers: compute it (causal mask folded in) once per forward pass.
        shared_bias = None
        if self.t5_layers_share:
            seq = tokens.shape[1]
            shared_bias = self.blocks[0].attn.attention_bias(seq, offset + seq, device=tokens.device)
        for i, block in enumerate(self.blocks):
            x = block(x, None if cache is None else cache[i], shared_bias, rope_cos_sin=rope_cos_sin)
        return self.head(self.ln_final(x))

    def _forward_at_positions(self, tokens: torch.Tensor, cache: KVCache | None, positions) -> torch.Tensor:
        """``forward`` with explicit positions (see the class docstring)."""
        if positions is None:
            raise ValueError("this cache holds tokens added with explicit positions: pass positions for the new "
                             "tokens too")
        batch, seq = tokens.shape
        positions = checked_positions(positions, batch, seq, device=tokens.device)
        x = self.token_embedding(tokens)
        if self.absolute is not None:
            x = x + self._absolute_rows(positions).to(x.dtype)
        shared_bias = None
        if self.t5_layers_share:
            key_positions = positions if cache is None else joined_positions(cache[0].positions, cache.length,
                                                                               positions)
            shared_bias = self.blocks[0].attn.attention_bias(seq, key_positions.shape[1], device=tokens.device,
                                                             query_positions=positions, key_positions=key_positions)
        for i, block in enumerate(self.blocks):
            x = block(x, None if cache is None else cache[i], shared_bias, positions)
        return self.head(self.ln_final(x))

    def _absolute_rows(self, positions: torch.Tensor) -> torch.Tensor:
        """The absolute encoding's rows at ``positions`` ``[b, seq]``: ``[b, seq, dim]`` (float32 for sinusoidal)."""
        highest = int(positions.max()) if positions.numel() else 0
        if self.position == "learned":
            if highest >= self.max_len:
                raise ValueError(f"position {highest} exceeds the learned table: max_len={self.max_len} allows "
                                 f"positions 0..{self.max_len - 1}")
            return self.absolute.weight[positions]
        return self.absolute.scale * self.absolute.table(highest + 1)[positions]

    @torch.no_grad()
    def generate(self, prompt: torch.Tensor, max_new_tokens: int, *, temperature: float = 1.0,
                 top_k: int | None = None, generator: torch.Generator | None = None) -> torch.Tensor:
        """Sample ``max_new_tokens`` continuations of ``prompt`` using the KV cache.

        Args:
            prompt: ``[batch, seq]`` (or ``[seq]``) token ids, seq >= 1.
            max_new_tokens: how many tokens to add, >= 0.
            temperature: softmax temperature; 0 means greedy (argmax).
            top_k: sample only among the k most likely tokens (None for all).
            generator: a ``torch.Generator`` for reproducible sampling.

        Returns:
            ``[batch, seq + max_new_tokens]`` (``[seq + max_new_tokens]`` for a 1-D prompt).
        """
        squeeze = prompt.dim() == 1
        tokens = prompt[None] if squeeze else prompt
        check_int("max_new_tokens", max_new_tokens, minimum=0)
        if temperature != 0:
            check_positive_float("temperature", temperature)
        if top_k is not None:
            check_int("top_k", top_k)
        if tokens.dim() != 2 or tokens.shape[1] == 0:
            raise ValueError(f"prompt must be [batch, seq] or [seq] with seq >= 1, got {tuple(prompt.shape)}")
        if self.position == "learned" and tokens.shape[1] + max_new_tokens > self.max_len:
            raise ValueError(f"prompt length + max_new_tokens = {tokens.shape[1] + max_new_tokens} exceeds "
                             f"the learned table's max_len={self.max_len}")
        cache = self.new_cache()
        logits = self(tokens, cache=cache)[:, -1]
        out = [tokens]
        for _ in range(max_new_tokens):
            if temperature == 0:
                next_token = logits.argmax(dim=-1, keepdim=True)
            else:
                logits = logits / temperature
                if top_k is not None:
                    kth = logits.topk(min(top_k, logits.shape[-1]), dim=-1).values[:, -1:]
                    logits = logits.masked_fill(logits < kth, float("-inf"))
                next_token = torch.multinomial(F.softmax(logits, dim=-1), 1, generator=generator)
            out.append(next_token)
            logits = self(next_token, cache=cache)[:, -1]
        result = torch.cat(out, dim=1)
        return result[0] if squeeze else result

    def describe_plan(self) -> str:
        """One line per layer (``posenc.plan.describe_plan``)."""
        return describe_plan(self.plan)

    def extra_repr(self) -> str:
        return f"position={self.position!r}, causal={self.causal}"
