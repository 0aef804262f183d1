"""A PNG of the relative change per parameter, ‖new − old‖ / ‖old‖, of each commit against its first parent."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

# long parameter-name pieces → short ones, in order, so that every name of the model fits under one axis
_SHORTER = (("bert.", ""), ("encoder.layer.", "L"), ("_embeddings.", "."), ("embeddings.", "emb."),
            ("attention.self.", "attn."), ("attention.output.dense", "attn.out"),
            ("attention.output.LayerNorm", "attn.ln"), ("intermediate.dense", "ffn.in"), ("output.dense", "ffn.out"),
            ("output.LayerNorm", "ffn.ln"), ("LayerNorm", "ln"), (".weight", ".w"), (".bias", ".b"))


def short_name(parameter: str) -> str:
    """``bert.encoder.layer.0.attention.self.query.weight`` → ``L0.attn.query.w``."""
    for long, short in _SHORTER:
        parameter = parameter.replace(long, short)
    return parameter


def relative_change_figure(parameters: Sequence[str], changes: Mapping[str, Mapping[str, float]], title: str):
    """``changes``: commit label → {parameter: relative change}; one row of markers per commit, on a log
    scale (fine-tuning moves a weight by 1e-5 to 1e-2 of its norm: a linear axis would show only the
    largest). A parameter a commit leaves as it was (0) has no marker. A matplotlib Figure on the Agg
    canvas (no pyplot, no global backend switch)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(12, 5.5), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    markers = "os^vD<>ph*"
    for i, (label, change) in enumerate(changes.items()):
        points = [(x, change[p]) for x, p in enumerate(parameters) if change.get(p, 0.0) > 0]
        if points:
            xs, ys = zip(*points)
            ax.plot(xs, ys, linestyle="none", marker=markers[i % len(markers)], markersize=5, alpha=0.8, label=label)
    ax.set_yscale("log")
    ax.set_xticks(range(len(parameters)), [short_name(p) for p in parameters], rotation=90, fontsize=7)
    ax.set_xlim(-1, len(parameters))
    ax.set_ylabel("‖new − old‖ / ‖old‖  (log scale)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, ncol=2)
    ax.grid(axis="y", which="major", alpha=0.3)
    fig.tight_layout()
    return fig


def relative_change_png(path: Path, parameters: Sequence[str], changes: Mapping[str, Mapping[str, float]],
                        title: str) -> None:
    """:func:`relative_change_figure` written to ``path`` as a PNG, without the tag naming matplotlib's version."""
    relative_change_figure(parameters, changes, title).savefig(path, format="png", metadata={"Software": None})
