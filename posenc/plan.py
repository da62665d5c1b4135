"""Per-layer plans: which position method, RoPE settings, window and temperature each layer uses.

Since 2024 the models people use mix methods by layer. A plan is a list with one ``LayerSpec`` per layer;
``TransformerLM(..., plan=plan)`` builds each attention layer from its spec, and
``MultiHeadAttention.from_spec`` builds one. Specs are frozen dataclasses of plain values, so a plan
prints one line per layer (``describe_plan``) and round-trips through JSON (``plan_to_dict`` /
``plan_from_dict``), which is how the experiment records store it.

One example per family, written out (``family_plan`` returns the same lists; the tests check)::

    from posenc import LayerSpec, Rope, Temperature, every_nth, repeat_pattern
    w = 32  # toy window; the shipped models use 512 to 8192

    # Llama 4 (iRoPE): chunked RoPE layers, every 4th layer global NoPE with a query temperature
    scout = {"rope_type": "llama3", "factor": 16.0, "low_freq_factor": 1.0, "high_freq_factor": 1.0,
             "original_max_position_embeddings": 128}
    llama4 = every_nth(LayerSpec("none", temperature=Temperature(floor_scale=w, scale=0.1)), 4,
                       otherwise=LayerSpec("rope", rope=Rope(5e5, scout, interleaved=True), chunk=w), n_layers=8)
    # Gemma 3: 5 sliding-window layers at base 1e4, then 1 global layer at base 1e6 with linear factor 8
    gemma3 = repeat_pattern({"L": LayerSpec("rope", rope=Rope(1e4), window=w),
                             "G": LayerSpec("rope", rope=Rope(1e6, {"rope_type": "linear", "factor": 8.0}))},
                            "LLLLLG", n_layers=12)
    # Cohere 2 (Command R7B / A): 3 sliding-window RoPE layers, then 1 global NoPE layer
    cohere2 = repeat_pattern({"L": LayerSpec("rope", rope=Rope(5e4, interleaved=True), window=w),
                              "G": LayerSpec("none")}, "LLLG", n_layers=8)
    # gpt-oss: sliding and full layers alternating, all RoPE with YaRN, learned sinks everywhere
    yarn = Rope(1.5e5, {"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 128,
                        "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False})
    gpt_oss = repeat_pattern({"S": LayerSpec("rope", rope=yarn, window=w, sinks=True),
                              "F": LayerSpec("rope", rope=yarn, sinks=True)}, "SF", n_layers=8)
    # SmolLM3: RoPE at base 5e6 (SmolLM3-3B's config.json), every 4th layer NoPE
    smollm3 = every_nth(LayerSpec("none"), 4, otherwise=LayerSpec("rope", rope=Rope(5e6)), n_layers=8)

    model = TransformerLM(256, 96, 12, 4, position="none", plan=gemma3)
    print(model.describe_plan())  # one line per layer

DeepSeek's YaRN temperature in the softmax scale is a ``softmax_scale``:
``LayerSpec("rope", rope=Rope(scaling=yarn), softmax_scale=yarn_softmax_scale(head_dim, yarn))``.

``family_plan`` reproduces the layer patterns of Llama 4, Gemma 3, Cohere 2 (Command R7B / A), gpt-oss
and SmolLM3 with their shipped RoPE bases and scaling, at toy lengths: every sliding window, attention
chunk and temperature step is ``window`` tokens (32 by default; the real models use 512 to 8192), and
length constants inside a RoPE scaling dict become ``original_context`` (default 128, the book's training
length). ``posenc.hf_config.plan_from_hf_config`` reads the same facts from a Hugging Face config.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ._validate import check_choice, check_int, check_positive_float

ATTENTION_POSITIONS = ("none", "t5", "rope", "alibi")  # what can happen inside an attention layer
# how a layer mixes tokens: softmax attention, or a layer that carries order itself (posenc.mixers)
MIXERS = ("attention", "forgetting", "stick_breaking", "cope", "decay")
DEFAULT_COPE_POSITIONS = 64


@dataclass(frozen=True)
class Rope:
    """RoPE settings of a layer: ``base`` (None: the scaling's ``rope_theta``, else 10000), a scaling dict as
    in ``rope_frequencies`` (may carry ``partial_rotary_factor``), and the pairing (``interleaved``)."""

    base: float | None = None
    scaling: dict | None = field(default=None, hash=False)
    interleaved: bool = False

    def __post_init__(self):
        if self.base is not None:
            check_positive_float("Rope.base", self.base)
        if self.scaling is not None and not isinstance(self.scaling, dict):
            raise TypeError(f"Rope.scaling must be a dict or None, got {type(self.scaling).__name__}")


@dataclass(frozen=True)
class Temperature:
    """Llama 4's query temperature ``1 + scale * ln(1 + floor((p + 1) / floor_scale))`` (``attention_temperature``)."""

    floor_scale: float = 8192
    scale: float = 0.1

    def __post_init__(self):
        check_positive_float("Temperature.floor_scale", self.floor_scale)
        check_positive_float("Temperature.scale", self.scale)


@dataclass(frozen=True)
class LayerSpec:
    """One attention layer's handling of position.

    Args:
        position: ``"none"`` (NoPE), ``"rope"``, ``"alibi"`` or ``"t5"``; default ``"rope"``, or ``"none"`` for a
            ``mixer`` other than attention.
        rope: ``Rope`` settings when position is ``"rope"`` (default ``Rope()``); must be None otherwise.
        window: sliding window (each query sees itself and the ``window - 1`` tokens before it), or None.
        chunk: chunked local attention (Llama 4: attention restarts every ``chunk`` tokens), or None.
        temperature: a ``Temperature`` that scales the queries with their position, or None.
        sinks: learn one sink logit per head (gpt-oss).
        gate: multiply each head's output, element by element, by a sigmoid of the layer's input before the
            output projection (gated attention, Qiu et al. 2025, the G1 gate; Qwen3-Next's full-attention
            layers): a head can then output nothing without attending to a sink.
        softmax_scale: the score scale, default ``head_dim ** -0.5`` (Gemma 3's ``query_pre_attn_scalar``
            and DeepSeek's YaRN ``mscale`` change it: ``posenc.mla.yarn_softmax_scale``).
        head_dim: the width of each head's queries, keys and values, when it is not ``dim / n_heads`` (Gemma 3,
            gpt-oss, Qwen3, Mistral Small 3 set it apart from the model width); None: ``dim // n_heads``. RoPE's
            frequencies and the default softmax scale are computed over it.
        mixer: how the layer mixes tokens. ``"attention"`` (default): softmax attention with the fields
            above. The others carry order themselves, with ``position="none"`` and none of the attention
            fields: ``"forgetting"`` (FoX's forget gate, ``posenc.mixers.forgetting``), ``"stick_breaking"``
            (``posenc.mixers.stick_breaking``), ``"cope"`` (contextual positions, ``posenc.mixers.cope``) and ``"decay"``
            (gated linear attention with a data-dependent decay, ``posenc.mixers.decay``); ``gate`` applies to all.
        conv: the width of a short causal depthwise convolution added to the layer's input before its mixer
            (a Canon layer, ``posenc.mixers.conv``), or None.
        cope_positions: for ``mixer="cope"``, how many contextual positions it learns (default
            ``DEFAULT_COPE_POSITIONS``); None otherwise.
    """

    position: str | None = None  # default: "rope" for attention, "none" for the other mixers
    rope: Rope | None = None
    window: int | None = None
    chunk: int | None = None
    temperature: Temperature | None = None
    sinks: bool = False
    gate: bool = False
    softmax_scale: float | None = None
    head_dim: int | None = None
    mixer: str = "attention"
    conv: int | None = None
    cope_positions: int | None = None

    def __post_init__(self):
        check_choice("LayerSpec.mixer", self.mixer, MIXERS)
        if self.position is None:
            object.__setattr__(self, "position", "rope" if self.mixer == "attention" else "none")
        if self.conv is not None:
            check_int("LayerSpec.conv", self.conv)
        if self.mixer == "cope" and self.cope_positions is None:
            object.__setattr__(self, "cope_positions", DEFAULT_COPE_POSITIONS)
        if self.cope_positions is not None:
            if self.mixer != "cope":
                raise ValueError(f"LayerSpec.cope_positions is only for mixer='cope', got mixer={self.mixer!r}")
            check_int("LayerSpec.cope_positions", self.cope_positions, minimum=2)
        if self.mixer != "attention":
            self._check_no_attention_fields()
        if self.position in ("sinusoidal", "learned"):
            raise ValueError(f"LayerSpec.position={self.position!r} is an absolute encoding, added to the token "
                             f"embeddings (TransformerLM's `absolute`), not inside a layer; use one of "
                             f"{list(ATTENTION_POSITIONS)}")
        check_choice("LayerSpec.position", self.position, ATTENTION_POSITIONS)
        if self.position == "rope" and self.rope is None:
            object.__setattr__(self, "rope", Rope())
        if self.position != "rope" and self.rope is not None:
            raise ValueError(f"LayerSpec.rope is only for position='rope', got position={self.position!r}")
        if self.rope is not None and not isinstance(self.rope, Rope):
            raise TypeError(f"LayerSpec.rope must be a Rope, got {type(self.rope).__name__}")
        if self.temperature is not None and not isinstance(self.temperature, Temperature):
            raise TypeError(f"LayerSpec.temperature must be a Temperature, got {type(self.temperature).__name__}")
        if self.window is not None:
            check_int("LayerSpec.window", self.window)
        if self.chunk is not None:
            check_int("LayerSpec.chunk", self.chunk)
        if self.window is not None and self.chunk is not None:
            raise ValueError("LayerSpec takes window or chunk, not both")
        if self.softmax_scale is not None:
            check_positive_float("LayerSpec.softmax_scale", self.softmax_scale)
        if self.head_dim is not None:
            check_int("LayerSpec.head_dim", self.head_dim)

    def _check_no_attention_fields(self) -> None:
        """A mixer other than softmax attention carries order itself: no position method, window, chunk,
        temperature, sinks, softmax scale or head width (posenc builds none of them for it)."""
        if self.position != "none":
            raise ValueError(f"LayerSpec(mixer={self.mixer!r}) carries order itself: position must be 'none', "
                             f"got {self.position!r}")
        for name in ("window", "chunk", "temperature", "softmax_scale", "head_dim"):
            if getattr(self, name) is not None:
                raise ValueError(f"LayerSpec.{name} is for mixer='attention'; mixer={self.mixer!r} does not use it")
        if self.sinks:
            raise ValueError(f"LayerSpec.sinks is for mixer='attention'; mixer={self.mixer!r} does not use it")

    def describe(self) -> str:
        """One line, e.g. ``rope(base=10000, linear x8) window=32``."""
        if self.mixer != "attention":
            text = self.mixer + (f"(positions={self.cope_positions})" if self.cope_positions else "")
            return text + (" gate" if self.gate else "") + (f" conv={self.conv}" if self.conv else "")
        text = self.position
        if self.rope is not None:
            scaling = self.rope.scaling or {}
            base = self.rope.base if self.rope.base is not None else scaling.get("rope_theta")
            parts = [] if base is None else [f"base={base:g}"]
            rope_type = scaling.get("rope_type", scaling.get("type", "default"))
            if rope_type != "default":
                parts.append(f"{rope_type} x{scaling['factor']:g}" if "factor" in scaling else rope_type)
            if "partial_rotary_factor" in scaling:
                parts.append(f"partial {scaling['partial_rotary_factor']:g}")
            if self.rope.interleaved:
                parts.append("interleaved")
            text += f"({', '.join(parts)})" if parts else ""
        for name in ("window", "chunk"):
            if getattr(self, name) is not None:
                text += f" {name}={getattr(self, name)}"
        if self.temperature is not None:
            text += f" temperature(floor_scale={self.temperature.floor_scale:g}, scale={self.temperature.scale:g})"
        if self.sinks:
            text += " sinks"
        if self.gate:
            text += " gate"
        if self.softmax_scale is not None:
            text += f" softmax_scale={self.softmax_scale:.4g}"
        if self.head_dim is not None:
            text += f" head_dim={self.head_dim}"
        if self.conv is not None:
            text += f" conv={self.conv}"
        return text


def _checked_plan(plan) -> list[LayerSpec]:
    plan = list(plan)
    if not plan:
        raise ValueError("plan must have at least one LayerSpec")
    for i, spec in enumerate(plan):
        if not isinstance(spec, LayerSpec):
            raise TypeError(f"plan[{i}] must be a LayerSpec, got {type(spec).__name__}")
    return plan


def describe_plan(plan) -> str:
    """One line per layer: ``layer 0: rope(base=10000) window=32``."""
    return "\n".join(f"layer {i}: {spec.describe()}" for i, spec in enumerate(_checked_plan(plan)))


def repeat_pattern(specs: dict, pattern: str, n_layers: int) -> list[LayerSpec]:
    """Repeat ``pattern`` (one letter per layer, each a key of ``specs``) to ``n_layers`` layers.

    ``repeat_pattern({"L": local, "G": global_}, "LLLLLG", 12)`` is Gemma 3's 5 local : 1 global.
    """
    n_layers = check_int("n_layers", n_layers)
    if not pattern:
        raise ValueError("pattern must have at least one letter")
    unknown = sorted(set(pattern) - set(specs))
    if unknown:
        raise ValueError(f"pattern letters {unknown} are not keys of specs {sorted(specs)}")
    return _checked_plan(specs[pattern[i % len(pattern)]] for i in range(n_layers))


def every_nth(spec: LayerSpec, n: int, *, otherwise: LayerSpec, n_layers: int) -> list[LayerSpec]:
    """``spec`` on layers n-1, 2n-1, ... (every n-th, counting from 1), ``otherwise`` elsewhere (Llama 4, SmolLM3)."""
    n, n_layers = check_int("n", n), check_int("n_layers", n_layers)
    return _checked_plan(spec if (i + 1) % n == 0 else otherwise for i in range(n_layers))


def plan_to_dict(plan) -> list[dict]:
    """The plan as JSON-ready dicts (one per layer)."""
    return [asdict(spec) for spec in _checked_plan(plan)]


def plan_from_dict(layers: list[dict]) -> list[LayerSpec]:
    """Inverse of ``plan_to_dict``."""
    specs = []
    for layer in layers:
        layer = dict(layer)
        rope = layer.pop("rope", None)
        temperature = layer.pop("temperature", None)
        specs.append(LayerSpec(**layer, rope=None if rope is None else Rope(**rope),
                               temperature=None if temperature is None else Temperature(**temperature)))
    return _checked_plan(specs)


PLAN_FAMILIES = ("llama4", "gemma3", "cohere2", "gpt-oss", "smollm3")


def family_plan(family: str, n_layers: int, *, window: int = 32, original_context: int = 128) -> list[LayerSpec]:
    """The per-layer pattern of a 2025-26 model family at toy size (see the module docstring).

    - ``"llama4"``: iRoPE. RoPE layers (base 5e5, interleaved, Llama 4 Scout's llama3 scaling with an empty
      blend band: factor 16, low = high = 1) with chunked attention; every 4th layer global NoPE with
      ``Temperature(floor_scale=window, scale=0.1)``.
    - ``"gemma3"``: 5 sliding-window layers (RoPE base 1e4) : 1 global layer (base 1e6, linear factor 8).
    - ``"cohere2"``: 3 sliding-window RoPE layers (base 5e4, interleaved) : 1 global NoPE layer.
    - ``"gpt-oss"``: sliding-window and full layers alternating, all RoPE (base 1.5e5, YaRN factor 32,
      beta 32/1, truncate False) with learned sinks.
    - ``"smollm3"``: RoPE (base 5e6, as SmolLM3-3B ships it after its long-context stages; ``SmolLM3Config``'s
      class default is 2e6) everywhere but every 4th layer, which is NoPE; no windows.
    """
    check_choice("family", family, PLAN_FAMILIES)
    window, original_context = check_int("window", window), check_int("original_context", original_context)
    if family == "llama4":
        scaling = {"rope_type": "llama3", "factor": 16.0, "low_freq_factor": 1.0, "high_freq_factor": 1.0,
                   "original_max_position_embeddings": original_context}
        rope = LayerSpec("rope", rope=Rope(base=5e5, scaling=scaling, interleaved=True), chunk=window)
        nope = LayerSpec("none", temperature=Temperature(floor_scale=window, scale=0.1))
        return every_nth(nope, 4, otherwise=rope, n_layers=n_layers)
    if family == "gemma3":
        local = LayerSpec("rope", rope=Rope(base=1e4), window=window)
        global_ = LayerSpec("rope", rope=Rope(base=1e6, scaling={"rope_type": "linear", "factor": 8.0}))
        return repeat_pattern({"L": local, "G": global_}, "LLLLLG", n_layers)
    if family == "cohere2":
        local = LayerSpec("rope", rope=Rope(base=5e4, interleaved=True), window=window)
        return repeat_pattern({"L": local, "G": LayerSpec("none")}, "LLLG", n_layers)
    if family == "gpt-oss":
        scaling = {"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": original_context,
                   "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False}
        rope = Rope(base=1.5e5, scaling=scaling)
        sliding, full = LayerSpec("rope", rope=rope, window=window, sinks=True), LayerSpec("rope", rope=rope, sinks=True)
        return repeat_pattern({"S": sliding, "F": full}, "SF", n_layers)
    nope, rope = LayerSpec("none"), LayerSpec("rope", rope=Rope(base=5e6))
    return every_nth(nope, 4, otherwise=rope, n_layers=n_layers)
