"""The book's two generated images, committed under book/_static/ so that the build needs nothing extra.

    .venv/bin/python book/_ext/book_figures.py     # rewrite both after a chapter's Prerequisites change

- ``chapter_graph.svg``: which chapter builds on which, from each chapter's ``**Prerequisites.**``
  paragraph (``book_chapters``). An arrow implied by a longer path is left out (the transitive reduction);
  the teaching page's table lists every prerequisite a chapter names. Each arrow is an SVG group with the
  id ``edge-A-B`` and each chapter ``chapter-N``, so ``tests/test_book_pages.py`` can check the drawing
  against the notebooks.
- ``social-card.png``: the Open Graph image (1200 x 630) that link previews show.

Both are drawn with matplotlib's own DejaVu Sans turned into paths: no font is needed to view them.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import matplotlib
import yaml

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch  # noqa: E402
from matplotlib.path import Path as MplPath  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from book_chapters import ROOT, Chapter, chapters, prerequisite_edges, transitive_reduction  # noqa: E402

STATIC = ROOT / "book" / "_static"
NAVY, GOLD, SKY, INK = "#1f4e79", "#ffd166", "#9fc5e8", "#1b1b1b"
# soft fills, one per part of _toc.yml in order (they repeat if there are more parts)
PART_COLOURS = ["#e8e8e8", "#dbe8f5", "#fde9b8", "#d9ead3", "#cfe8e2", "#ead1dc", "#f4cccc"]
BOX_W, BOX_H, ROW_GAP, COL_GAP = 2.0, 0.62, 1.0, 0.45


def _deterministic():
    plt.rcParams.update({"svg.hashsalt": "posenc-book", "svg.fonttype": "path", "font.family": "DejaVu Sans"})


def _layers(numbers: list[int], edges: set[tuple[int, int]]) -> dict[int, int]:
    """Each chapter's row: the length of the longest chain of prerequisites that leads to it."""
    layer: dict[int, int] = {}

    def depth(n: int) -> int:
        if n not in layer:
            layer[n] = max((depth(a) + 1 for a, b in edges if b == n), default=0)
        return layer[n]

    for n in numbers:
        depth(n)
    return layer


def _layout(numbers: list[int], edges: set[tuple[int, int]]):
    """Positions of the chapters, and the points each arrow passes through.

    Rows top to bottom. An arrow that skips rows gets a way point in each row it crosses, which takes room
    in that row like a narrow box, so that no arrow runs through a chapter. In a row, each box sits as near
    the mean x of what points at it as the boxes beside it allow.
    """
    layer = _layers(numbers, edges)
    members: dict[int, list] = {}  # row -> chapter numbers and way points ("via", a, b, row)
    parents: dict = {n: [] for n in numbers}
    for n in numbers:
        members.setdefault(layer[n], []).append(n)
    for a, b in sorted(edges):
        previous = a
        for row in range(layer[a] + 1, layer[b]):
            point = ("via", a, b, row)
            members[row].append(point)
            parents[point] = [previous]
            previous = point
        parents[b].append(previous)
    x: dict = {}
    for row in sorted(members):
        row_members = members[row]
        wanted = {m: sum(x[p] for p in parents[m]) / len(parents[m]) if parents[m] else 0.0 for m in row_members}
        row_members.sort(key=lambda m: (wanted[m], m if isinstance(m, int) else 100 + m[1]))
        width = {m: BOX_W if isinstance(m, int) else 0.2 for m in row_members}
        placed = [wanted[row_members[0]]]
        for before, m in zip(row_members, row_members[1:]):  # push each right of the one before it
            placed.append(max(wanted[m], placed[-1] + (width[before] + width[m]) / 2 + COL_GAP))
        shift = sum(wanted.values()) / len(row_members) - sum(placed) / len(placed)  # keep the row's centre
        for m, at in zip(row_members, placed):
            x[m] = at + shift
    y = lambda row: -row * (BOX_H + ROW_GAP)  # noqa: E731
    boxes = {n: (x[n], y(layer[n])) for n in numbers}
    routes = {}
    for a, b in edges:
        via = [(x[("via", a, b, row)], y(row)) for row in range(layer[a] + 1, layer[b])]
        first, last = (via or [boxes[b]])[0][0], (via or [boxes[a]])[-1][0]
        start = boxes[a][0] + _spread(first - boxes[a][0])  # arrows leave and arrive side by side
        end = boxes[b][0] + _spread(last - boxes[b][0])
        routes[(a, b)] = [(start, boxes[a][1] - BOX_H / 2), *via, (end, boxes[b][1] + BOX_H / 2)]
    return boxes, routes


def _spread(dx: float) -> float:
    """Where on a box's edge an arrow leaves or arrives: towards the other end, within the middle half."""
    return max(-BOX_W / 4, min(BOX_W / 4, dx / 4))


def _part_colours(chapter_list: list[Chapter]) -> dict[str, str]:
    """A fill colour for each part of _toc.yml, in the order the parts come."""
    parts = list(dict.fromkeys(c.part for c in chapter_list))
    return {part: PART_COLOURS[i % len(PART_COLOURS)] for i, part in enumerate(parts)}


def draw_chapter_graph(chapter_list: list[Chapter], path: Path) -> set[tuple[int, int]]:
    """Draw the reduced prerequisite graph to ``path`` (SVG); return the edges drawn."""
    _deterministic()
    edges = transitive_reduction(prerequisite_edges(chapter_list))
    numbers = [c.number for c in sorted(chapter_list, key=lambda c: c.number)]
    pos, routes = _layout(numbers, edges)
    xs = [p[0] for route in routes.values() for p in route] + [p[0] for p in pos.values()]
    ys = [p[1] for p in pos.values()]
    left, right = min(xs) - BOX_W / 2 - 0.1, max(xs) + BOX_W / 2 + 0.1
    bottom, top = min(ys) - BOX_H / 2 - 1.2, max(ys) + BOX_H / 2 + 0.1
    fig = plt.figure(figsize=(right - left, top - bottom))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(left, right)
    ax.set_ylim(bottom, top)
    ax.axis("off")
    by_number = {c.number: c for c in chapter_list}
    colours = _part_colours(chapter_list)
    for n in numbers:
        cx, cy = pos[n]
        box = FancyBboxPatch((cx - BOX_W / 2, cy - BOX_H / 2), BOX_W, BOX_H, boxstyle="round,pad=0,rounding_size=0.1",
                             facecolor=colours[by_number[n].part], edgecolor=NAVY, linewidth=1.2, gid=f"chapter-{n}")
        ax.add_patch(box)
        label = "\n".join(textwrap.wrap(f"{n}. {by_number[n].short_title}", 22))
        ax.text(cx, cy, label, ha="center", va="center", fontsize=9.5, color=INK)
    for a, b in sorted(edges):
        points = routes[(a, b)]
        line = MplPath(points, [MplPath.MOVETO] + [MplPath.LINETO] * (len(points) - 1))
        ax.add_patch(FancyArrowPatch(path=line, arrowstyle="-|>", mutation_scale=12, color=NAVY, linewidth=1.1,
                                     shrinkA=1, shrinkB=1, gid=f"edge-{a}-{b}"))
    for i, (name, colour) in enumerate(colours.items()):  # the legend: one swatch per part
        x = left + 0.15 + (i % 3) * (right - left) / 3
        y = bottom + 0.85 - (i // 3) * 0.3
        ax.add_patch(FancyBboxPatch((x, y - 0.1), 0.3, 0.2, boxstyle="round,pad=0,rounding_size=0.04",
                                    facecolor=colour, edgecolor=NAVY, linewidth=0.8))
        ax.text(x + 0.42, y, name, va="center", fontsize=8.5, color=INK)
    fig.savefig(path, format="svg", metadata={"Date": None}, transparent=False, facecolor="white")
    plt.close(fig)
    return edges


def draw_social_card(path: Path) -> None:
    """The 1200 x 630 image link previews show: the logo's motif, the title and what the book is."""
    _deterministic()
    import numpy as np

    fig = plt.figure(figsize=(12, 6.3), dpi=100)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, 12)
    ax.set_ylim(0, 6.3)
    ax.axis("off")
    ax.add_patch(plt.Rectangle((0, 0), 12, 6.3, color=NAVY))
    # the logo's motif: a turning pair of features and the sinusoid its tip traces
    cx, cy, r = 1.5, 4.6, 0.8
    ax.add_patch(plt.Circle((cx, cy), r, fill=False, color=SKY, linewidth=3))
    ax.plot([cx, cx], [cy, cy + r], color="white", linewidth=5, solid_capstyle="round")
    ax.plot([cx + 0.15, 2.9], [cy + r, cy + r], color=SKY, linewidth=2, linestyle=(0, (3, 3)))
    t = np.linspace(0, 4 * np.pi, 400)
    ax.plot(3.05 + t / (4 * np.pi) * 8.0, cy + r * np.cos(t), color=GOLD, linewidth=6, solid_capstyle="round")
    ax.add_patch(plt.Circle((cx, cy + r), 0.17, color=GOLD))
    title = yaml.safe_load((ROOT / "_config.yml").read_text())["title"]
    ax.text(0.7, 2.85, title, color="white", fontsize=42, fontweight="bold", va="center")
    ax.text(0.7, 1.95, "How transformers are told about order, derived from scratch,\n"
            "implemented in a tested package and measured: an executable book.",
            color="white", fontsize=20, va="center", linespacing=1.4)
    methods = "Sinusoidal · learned · T5 · RoPE · YaRN · ALiBi · NoPE · hybrid layers · sinks · M-RoPE"
    ax.text(0.7, 0.75, methods, color=GOLD, fontsize=16, va="center")
    fig.savefig(path, format="png", dpi=100, metadata={"Software": None})
    plt.close(fig)


def main() -> None:
    edges = draw_chapter_graph(chapters(), STATIC / "chapter_graph.svg")
    draw_social_card(STATIC / "social-card.png")
    print(f"wrote {STATIC / 'chapter_graph.svg'} ({len(edges)} arrows) and {STATIC / 'social-card.png'}")


if __name__ == "__main__":
    main()
