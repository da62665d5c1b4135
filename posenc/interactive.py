"""Interactive figures for the HTML book: computed by posenc when a notebook runs, drawn in the browser by
plotly.js, with no kernel and no network.

Each figure is a list of *frames* (the traces for one setting of a control) and one slider over them.
``slider_html(name, frames, layout, control)`` returns the HTML a notebook cell displays: the slider, a
plot area and a short script that draws the chosen frame with ``Plotly.react``. The book loads
plotly.js from its own build (``book/_ext`` copies the file the ``plotly`` package ships), so the page
reads offline; outside the book (Jupyter, Colab) the same cell shows a note instead, and
``posenc.interactive`` figures can be opened with plotly there (``plotly.io.show``).

The six figures of the book:

- ``rope_clock(head_dim, positions)``: every pair's rotation at a position, as hands on a clock;
- ``rope_base(head_dim, bases, train_len)``: wavelength of each pair, and the score's decay with distance,
  against RoPE's base;
- ``recipe_scales(head_dim, train_len, factors)``: how much PI, dynamic NTK, YaRN and Llama 3 slow down each
  pair's frequency, against the scale factor, with YaRN's band boundaries;
- ``longrope_factors()``: LongRoPE's searched factors, Phi-3.5-mini's short and long sets, beside PI, YaRN and
  Llama 3 for the same head;
- ``mask_gallery(seq)``: causal, sliding-window, chunked and sink masks, with what each lets the last
  query see and the key-value cache it implies;
- ``mrope_layout(text, grids)``: Qwen2-VL's M-RoPE ids (t, h, w) along a text-image-video sequence, against
  the image's size.
"""

from __future__ import annotations

import html
import json
import math

import torch

from .masks import causal_mask, chunked_mask, sliding_window_mask
from .rope import mrope_positions, rope_frequencies

COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]


def _rounded(values, digits: int = 5) -> list:
    return [round(float(v), digits) for v in values]


def _significant(values, digits: int = 3) -> list:
    """Each value to ``digits`` significant digits: the ratios of two float32 frequency tables differ in
    their last bits from one CPU to another (float32 ``pow``), far below what a figure can show."""
    return [float(f"{float(v):.{digits}g}") for v in values]


def _inv_freq64(head_dim: int, base: float) -> torch.Tensor:
    """Plain RoPE's ``base ** (-2i / head_dim)`` in float64, ``[head_dim // 2]``: the float32 table of
    ``rope_frequencies`` can differ in its last bit between CPUs, and a figure's angles at thousands of
    positions would show it in their printed digits."""
    return base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)


def slider_html(name: str, frames: list[dict], layout: dict, control: str, start: int = 0,
                height: int = 380) -> str:
    """The HTML of one interactive figure: a range input over ``frames`` (each ``{"label", "title",
    "data": [plotly traces]}``), a plot area, and the script that draws the chosen frame. ``name`` makes
    the element's id (``posenc-<name>``); the browser test finds the figure by it."""
    element = f"posenc-{name}"
    payload = json.dumps({"frames": frames, "layout": layout}, separators=(",", ":"))
    return f"""<div class="posenc-interactive" id="{element}">
<label class="posenc-control">{html.escape(control)}: <input type="range" min="0" max="{len(frames) - 1}"
 step="1" value="{start}" aria-label="{html.escape(control)}"> <output>{html.escape(frames[start]['label'])}</output></label>
<div class="posenc-plot" style="width:100%;height:{height}px"></div>
<script type="application/json" class="posenc-figure">{payload}</script>
<script>
(function () {{
  const root = document.getElementById("{element}");
  const figure = JSON.parse(root.querySelector(".posenc-figure").textContent);
  const input = root.querySelector("input"), output = root.querySelector("output");
  const plot = root.querySelector(".posenc-plot");
  function draw() {{
    const frame = figure.frames[+input.value];
    output.textContent = frame.label;
    if (!window.Plotly) {{
      plot.textContent = "This figure is drawn by plotly.js, which the built book includes.";
      return;
    }}
    const layout = Object.assign({{}}, figure.layout, {{title: {{text: frame.title}}}});
    Plotly.react(plot, frame.data, layout, {{displaylogo: false, responsive: true}});
    root.dataset.drawn = input.value;
  }}
  input.addEventListener("input", draw);
  if (document.readyState === "complete") draw(); else window.addEventListener("load", draw);
}})();
</script>
</div>"""


def rope_clock(head_dim: int = 16, positions=(0, 1, 2, 3, 5, 10, 20, 50, 100, 500, 1000),
               base: float = 10000.0) -> tuple[list[dict], dict]:
    """Frames of the RoPE clock: at each position p, pair i's hand points at angle ``p * theta_i`` (mod
    2 pi), on a unit circle whose radius grows with i so that the hands do not overlap."""
    inv_freq = _inv_freq64(head_dim, base)
    frames = []
    for p in positions:
        angles = p * inv_freq
        data = []
        for i, angle in enumerate(angles.tolist()):
            radius = 1 + i
            data.append({"type": "scatter", "mode": "lines+markers", "name": f"pair {i}",
                         "x": [0, round(radius * math.cos(angle), 4)], "y": [0, round(radius * math.sin(angle), 4)],
                         "line": {"color": COLORS[i % len(COLORS)]}, "marker": {"size": [0, 8]},
                         "hovertemplate": f"pair {i}: {angle % (2 * math.pi):.3f} rad<extra></extra>"})
        frames.append({"label": f"position {p}", "data": data,
                       "title": f"RoPE at position {p}: pair i turned by {p} x theta_i (pair 0 fastest)"})
    limit = head_dim // 2 + 1
    layout = {"xaxis": {"range": [-limit, limit], "scaleanchor": "y", "title": {"text": "cos component"}},
              "yaxis": {"range": [-limit, limit], "title": {"text": "sin component"}}, "showlegend": False,
              "margin": {"t": 40}}
    return frames, layout


def rope_base(head_dim: int = 64, bases=(1e2, 1e3, 1e4, 1e5, 5e5, 1e6, 1e7), train_len: int = 4096,
              distance: int = 8192) -> tuple[list[dict], dict]:
    """Frames over RoPE's base: left, each pair's wavelength ``2 pi / theta_i`` (log scale) beside the
    training length; right, the mean over pairs of ``cos(n theta_i)`` against the distance n (the score
    of a query and key that are equal and whose pairs all have the same size: its decay with distance)."""
    n = torch.unique(torch.logspace(0, math.log10(distance), 200).round()).double()
    frames = []
    for base in bases:
        inv_freq = _inv_freq64(head_dim, base)
        wavelength = 2 * math.pi / inv_freq
        decay = torch.cos(n[:, None] * inv_freq[None, :]).mean(-1)
        above = int((wavelength > train_len).sum())
        frames.append({"label": f"base {base:g}", "title": f"base {base:g}: {above} of {head_dim // 2} pairs turn "
                                                          f"less than once within L = {train_len}",
                       "data": [{"type": "scatter", "mode": "markers", "name": "wavelength",
                                 "x": list(range(head_dim // 2)), "y": _rounded(wavelength, 2),
                                 "xaxis": "x", "yaxis": "y"},
                                {"type": "scatter", "mode": "lines", "name": "L", "x": [0, head_dim // 2 - 1],
                                 "y": [train_len, train_len], "line": {"dash": "dash", "color": "#7f7f7f"},
                                 "xaxis": "x", "yaxis": "y"},
                                {"type": "scatter", "mode": "lines", "name": "mean cos(n theta_i)",
                                 "x": _rounded(n, 0), "y": _rounded(decay, 4), "xaxis": "x2", "yaxis": "y2"}]})
    layout = {"grid": {"rows": 1, "columns": 2, "pattern": "independent"}, "showlegend": False,
              "xaxis": {"title": {"text": "pair index i"}},
              "yaxis": {"type": "log", "title": {"text": "wavelength (tokens)"}},
              "xaxis2": {"type": "log", "title": {"text": "distance n (tokens)"}},
              "yaxis2": {"range": [-0.3, 1.05], "title": {"text": "mean over pairs of cos(n theta_i)"}},
              "margin": {"t": 40}}
    return frames, layout


RECIPES = {"PI": lambda s, L: ({"rope_type": "linear", "factor": s}, None),
           "dynamic NTK (at s L)": lambda s, L: ({"rope_type": "dynamic", "factor": s,
                                                  "original_max_position_embeddings": L}, int(s * L)),
           "YaRN": lambda s, L: ({"rope_type": "yarn", "factor": s, "original_max_position_embeddings": L}, None),
           "Llama 3": lambda s, L: ({"rope_type": "llama3", "factor": s, "low_freq_factor": 1.0,
                                     "high_freq_factor": 4.0, "original_max_position_embeddings": L}, None)}


def _yarn_bands(head_dim: int, base: float, train_len: int) -> tuple[torch.Tensor, int, int]:
    """RoPE's float64 frequencies ``[head_dim // 2]``, and how many pairs YaRN keeps (wavelength under
    ``train_len / 32``) and interpolates (over ``train_len``)."""
    original = rope_frequencies(head_dim, base=base)[0].double()
    wavelength = 2 * math.pi / original
    return original, int((wavelength < train_len / 32).sum()), int((wavelength > train_len).sum())


def _slowdown_layout(head_dim: int, base: float, train_len: int, kept: int, interpolated: int) -> dict:
    """Axes of a pair-index against slow-down figure, with YaRN's two band boundaries dotted."""
    return {"xaxis": {"title": {"text": f"pair index i (head_dim {head_dim}, base {base:g}, L {train_len:,})"}},
            "yaxis": {"type": "log", "title": {"text": "slow-down of pair i: theta_i / theta_i'"}},
            "shapes": [{"type": "line", "x0": x, "x1": x, "y0": 0, "y1": 1, "yref": "paper",
                        "line": {"dash": "dot", "color": "#7f7f7f"}}
                       for x in (kept - 0.5, head_dim // 2 - interpolated - 0.5)],
            "margin": {"t": 40}}


def recipe_scales(head_dim: int = 128, train_len: int = 8192, factors=(2, 4, 8, 16, 32),
                  base: float = 500000.0) -> tuple[list[dict], dict]:
    """Frames over the scale factor s: for each recipe, ``theta_i / theta_i'`` (how many times slower pair
    i turns after the recipe) against the pair index, with the pairs YaRN keeps (wavelength under
    ``L / 32``) and interpolates (over ``L``) marked. LongRoPE's factors are searched per model and
    have no closed form: ``longrope_factors`` draws a published set for its own head."""
    original, kept, interpolated = _yarn_bands(head_dim, base, train_len)
    frames = []
    for s in factors:
        data = []
        for k, (name, recipe) in enumerate(RECIPES.items()):
            scaling, seq_len = recipe(float(s), train_len)
            scaled = rope_frequencies(head_dim, base=base, scaling=scaling, seq_len=seq_len)[0].double()
            data.append({"type": "scatter", "mode": "lines", "name": name, "x": list(range(head_dim // 2)),
                         "y": _significant(original / scaled), "line": {"color": COLORS[k]}})
        frames.append({"label": f"s = {s}", "data": data,
                       "title": f"s = {s}: pairs 0-{kept - 1} turn faster than L/32 (YaRN keeps them); "
                                f"the last {interpolated} turn less than once in L (YaRN divides by s)"})
    return frames, _slowdown_layout(head_dim, base, train_len, kept, interpolated)


# Phi-3.5-mini's LongRoPE (microsoft/Phi-3.5-mini-instruct's config.json: head_dim 3072 / 32 = 96, rope_theta
# 10,000, original_max_position_embeddings 4,096, max_position_embeddings 131,072): one factor per pair, as the
# config writes them.
PHI35_MINI_LONGROPE = {
    "head_dim": 96, "base": 10000.0, "original_max_position_embeddings": 4096, "max_position_embeddings": 131072,
    "short_factor": [1.0, 1.0199999809265137, 1.0299999713897705, 1.0299999713897705, 1.0499999523162842, 1.0499999523162842,
                    1.0499999523162842, 1.0499999523162842, 1.0499999523162842, 1.0699999332427979, 1.0999999046325684,
                    1.1099998950958252, 1.1599998474121094, 1.1599998474121094, 1.1699998378753662, 1.2899998426437378,
                    1.339999794960022, 1.679999828338623, 1.7899998426437378, 1.8199998140335083, 1.8499997854232788,
                    1.8799997568130493, 1.9099997282028198, 1.9399996995925903, 1.9899996519088745, 2.0199997425079346,
                    2.0199997425079346, 2.0199997425079346, 2.0199997425079346, 2.0199997425079346, 2.0199997425079346,
                    2.0299997329711914, 2.0299997329711914, 2.0299997329711914, 2.0299997329711914, 2.0299997329711914,
                    2.0299997329711914, 2.0299997329711914, 2.0299997329711914, 2.0299997329711914, 2.0799996852874756,
                    2.0899996757507324, 2.189999580383301, 2.2199995517730713, 2.5899994373321533, 2.729999542236328,
                    2.749999523162842, 2.8399994373321533],
    "long_factor": [1.0800000429153442, 1.1100000143051147, 1.1399999856948853, 1.340000033378601, 1.5899999141693115,
                   1.600000023841858, 1.6200000047683716, 2.620000123977661, 3.2300000190734863, 3.2300000190734863,
                   4.789999961853027, 7.400000095367432, 7.700000286102295, 9.09000015258789, 12.199999809265137,
                   17.670000076293945, 24.46000099182129, 28.57000160217285, 30.420001983642578, 30.840002059936523,
                   32.590003967285156, 32.93000411987305, 42.320003509521484, 44.96000289916992, 50.340003967285156,
                   50.45000457763672, 57.55000305175781, 57.93000411987305, 58.21000289916992, 60.1400032043457,
                   62.61000442504883, 62.62000274658203, 62.71000289916992, 63.1400032043457, 63.1400032043457,
                   63.77000427246094, 63.93000411987305, 63.96000289916992, 63.970001220703125, 64.02999877929688,
                   64.06999969482422, 64.08000183105469, 64.12000274658203, 64.41000366210938, 64.4800033569336,
                   64.51000213623047, 64.52999877929688, 64.83999633789062],
}


def longrope_factors(published: dict = PHI35_MINI_LONGROPE) -> tuple[list[dict], dict]:
    """Frames over a LongRoPE model's two factor sets (short: used up to ``original_max_position_embeddings``;
    long: beyond it): the slow-down ``theta_i / theta_i'`` of each pair, from ``rope_frequencies`` with the
    published factors, beside PI, YaRN and Llama 3 at the model's own scale ``s = max / original`` for the
    same head, with YaRN's band boundaries (wavelength under ``L / 32``, over ``L``) dotted."""
    head_dim, base = published["head_dim"], published["base"]
    train_len, longest = published["original_max_position_embeddings"], published["max_position_embeddings"]
    s = longest / train_len
    original, kept, interpolated = _yarn_bands(head_dim, base, train_len)
    pairs = list(range(head_dim // 2))
    references = []
    for k, name in enumerate(("PI", "YaRN", "Llama 3")):
        scaling, _ = RECIPES[name](s, train_len)
        scaled = rope_frequencies(head_dim, base=base, scaling=scaling)[0].double()
        references.append({"type": "scatter", "mode": "lines", "name": f"{name} at s = {s:g}", "x": pairs,
                           "y": _significant(original / scaled), "line": {"color": COLORS[k], "dash": "dash"}})
    longrope = {"rope_type": "longrope", "short_factor": published["short_factor"],
                "long_factor": published["long_factor"], "original_max_position_embeddings": train_len,
                "max_position_embeddings": longest}
    frames = []
    for label, seq_len, when in (("short factors", train_len, f"up to {train_len:,} tokens"),
                                 ("long factors", longest, f"beyond {train_len:,} tokens")):
        scaled = rope_frequencies(head_dim, base=base, scaling=longrope, seq_len=seq_len)[0].double()
        slow = original / scaled
        frames.append({"label": label, "data": [*references, {
            "type": "scatter", "mode": "lines+markers", "name": f"LongRoPE, {label}", "x": pairs,
            "y": _significant(slow), "line": {"color": COLORS[4], "width": 3}, "marker": {"size": 5}}],
            "title": f"LongRoPE's {label} ({when}): pair slow-downs {float(slow.min()):.2f} to "
                     f"{float(slow.max()):.2f}; PI slows every pair by {s:g}"})
    return frames, _slowdown_layout(head_dim, base, train_len, kept, interpolated)


def _masks(seq: int) -> dict:
    masks = {"causal": causal_mask(seq, seq)}
    for w in (4, 8, 16):
        masks[f"sliding window {w}"] = sliding_window_mask(seq, seq, w)
    for c in (8, 16):
        masks[f"chunks of {c}"] = chunked_mask(seq, seq, c)
    i, j = torch.arange(seq)[:, None], torch.arange(seq)[None, :]
    masks["4 sinks + window 12 (StreamingLLM)"] = (j <= i) & ((j < 4) | (i - j < 12))
    return masks


def mask_gallery(seq: int = 32) -> tuple[list[dict], dict]:
    """Frames over the masks of ``posenc.masks`` (and StreamingLLM's sinks with a window): the mask as a
    grid (query rows, key columns), with how many keys the last query sees and how many tokens a decoder's
    key-value cache must hold at the end (the most any later query needs)."""
    frames = []
    for name, mask in _masks(seq).items():
        needed = int(mask.sum(-1).max())  # keys one query sees at most: the cache a decoder keeps
        frames.append({"label": name, "title": f"{name}: the last query sees {int(mask[-1].sum())} of {seq} keys; "
                                               f"the cache holds at most {needed} tokens",
                       "data": [{"type": "heatmap", "z": mask.int().tolist(), "showscale": False,
                                 "colorscale": [[0, "#ffffff"], [1, "#4c72b0"]], "xgap": 1, "ygap": 1,
                                 "hovertemplate": "query %{y}, key %{x}: %{z}<extra></extra>"}]})
    layout = {"xaxis": {"title": {"text": "key j"}, "side": "top"},
              "yaxis": {"title": {"text": "query i"}, "autorange": "reversed", "scaleanchor": "x"},
              "margin": {"t": 60}}
    return frames, layout


def mrope_layout(text: int = 4, sizes=(2, 3, 4, 6), frames_in_video: int = 3) -> tuple[list[dict], dict]:
    """Frames over the image size h = w: M-RoPE's t, h, w ids (``posenc.mrope_positions``) along a sequence
    of text, an image of h x w tokens, text, a video of ``frames_in_video`` frames of 2 x 2 tokens, text."""
    frames = []
    for size in sizes:
        layout_ = [text, (1, size, size), text, (frames_in_video, 2, 2), text]
        ids = mrope_positions(layout_)
        tokens = list(range(ids.shape[1]))
        data = [{"type": "scatter", "mode": "lines+markers", "name": axis, "x": tokens, "y": ids[k].tolist(),
                 "line": {"color": COLORS[k], "shape": "hv"}, "marker": {"size": 5}}
                for k, axis in enumerate(("t", "h", "w"))]
        frames.append({"label": f"image {size} x {size}", "data": data,
                       "title": f"text, a {size} x {size} image, text, a {frames_in_video}-frame video, text: "
                                f"{ids.shape[1]} tokens, largest id {int(ids.max())}"})
    layout = {"xaxis": {"title": {"text": "token index"}}, "yaxis": {"title": {"text": "position id"}},
              "margin": {"t": 40}}
    return frames, layout
