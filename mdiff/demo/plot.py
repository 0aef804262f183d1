"""A PNG of the relative change per parameter, ‖new − old‖ / ‖old‖, for each commit against its first parent."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence


def relative_change_png(path: Path, parameters: Sequence[str], changes: Mapping[str, Mapping[str, float]],
                        title: str) -> None:
    """``changes``: commit label → {parameter: relative change}; one group of bars per parameter.

    Drawn with matplotlib's Agg canvas directly (no pyplot, no global backend switch).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 4.5), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    labels = list(changes)
    width = 0.8 / max(1, len(labels))
    for i, label in enumerate(labels):
        xs = [j + (i - (len(labels) - 1) / 2) * width for j in range(len(parameters))]
        values = [changes[label].get(p, 0.0) for p in parameters]
        bars = ax.bar(xs, values, width, label=label)
        for bar, v in zip(bars, values):  # a zero is a parameter the commit leaves as it was
            ax.annotate("0" if v == 0 else f"{v:.2g}", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                        ha="center", va="bottom", fontsize=7, xytext=(0, 2), textcoords="offset points")
    ax.set_xticks(range(len(parameters)), parameters)
    ax.set_ylabel("‖new − old‖ / ‖old‖")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, format="png", metadata={"Software": None})
