"""The book's figure style and a few small plotting helpers (matplotlib)."""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.ticker import MaxNLocator

STYLE = {
    "figure.figsize": (7.0, 3.6),
    "figure.dpi": 110,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "legend.fontsize": 9,
    "font.size": 10,
}

# One colour per position method, used in every chapter.
METHOD_COLORS = {
    "none": "#7f7f7f",
    "sinusoidal": "#1f77b4",
    "learned": "#ff7f0e",
    "t5": "#2ca02c",
    "rope": "#d62728",
    "alibi": "#9467bd",
    "causal mask": "#8c564b",
}


def use_book_style() -> None:
    """Apply the book's matplotlib style (call once at the top of a chapter)."""
    plt.rcParams.update(STYLE)


def heatmap(ax, matrix, *, row_labels=None, col_labels=None, title: str = "", xlabel: str = "",
            ylabel: str = "", cmap: str = "viridis", annotate: bool = False, fmt: str = "{:.2f}", **imshow):
    """Draw ``matrix`` ([rows, cols], tensor or array) on ``ax`` with labels and a colour bar."""
    values = matrix.detach().cpu().numpy() if hasattr(matrix, "detach") else matrix
    image = ax.imshow(values, cmap=cmap, aspect="auto", **imshow)
    ax.grid(False)
    if row_labels is not None:
        ax.set_yticks(range(len(row_labels)), row_labels)
    else:
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    if col_labels is not None:
        ax.set_xticks(range(len(col_labels)), col_labels)
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if annotate:
        for i in range(values.shape[0]):
            for j in range(values.shape[1]):
                ax.text(j, i, fmt.format(values[i, j]), ha="center", va="center", color="w", fontsize=8)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    return image


def cost_curves(ax, curves: dict, *, title: str = "", linestyle: str = "-") -> None:
    """Milliseconds per call against T on log-log axes, one line per variant (``curves`` as
    ``posenc.bench.cost_curves`` returns it, ``{variant: {T: seconds}}``), with grey guides through the
    first curve's first point: dotted, cost growing like T; dashed, like T^2."""
    for name, points in curves.items():
        lengths = sorted(points)
        ax.plot(lengths, [points[t] * 1e3 for t in lengths], marker="o", linestyle=linestyle, label=name)
    first = next(iter(curves.values()))
    t0, lengths = min(first), sorted({t for points in curves.values() for t in points})
    for power, guide in ((1, ":"), (2, "--")):
        ax.plot(lengths, [first[t0] * 1e3 * (t / t0) ** power for t in lengths], guide, color="grey",
                linewidth=1, label=f"~ T^{power}" if power > 1 else "~ T")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("sequence length T")
    ax.set_ylabel("ms per call")
    ax.set_title(title)
