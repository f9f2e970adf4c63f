"""PNG figures for the results page: probe score vs samples, vs FLOPs, and vs model size.

matplotlib with the Agg backend (headless); every figure marks the budget it is read at, so a
reader can see where the tables' numbers come from.
"""

from __future__ import annotations

from pathlib import Path

from .analysis import Point

STYLES = {"bert": ("BERT (megatron BertModel, 15%)", "tab:gray", "s"),
          "crossbert-single": ("CrossBERT r=0.5 single view", "tab:blue", "o"),
          "crossbert-compl": ("CrossBERT r=0.5 complementary", "tab:red", "^")}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_curves(curves: dict[str, list[Point]], x: str, budget: float, out: Path, title: str,
                reference: float | None = None) -> Path | None:
    """Average probe score against ``x`` ('samples' or 'flops') for every main run; ``reference``
    (the untrained encoder's score) is drawn as a horizontal floor."""
    if not any(curves.values()):
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for name, points in curves.items():
        label, color, marker = STYLES.get(name, (name, None, "x"))
        xs = [getattr(p, x) / (1e12 if x == "flops" else 1) for p in points if p.average is not None]
        ys = [p.average for p in points if p.average is not None]
        ax.plot(xs, ys, marker=marker, color=color, label=label)
    if reference is not None:
        ax.axhline(reference, color="tab:green", linestyle="--", linewidth=1, label="untrained encoder (1 step)")
    ax.axvline(budget / (1e12 if x == "flops" else 1), color="black", linestyle=":", linewidth=1,
               label="budget (equal samples)" if x == "samples" else "budget (BERT's FLOPs)")
    ax.set_xlabel("samples seen (sequences)" if x == "samples" else "model FLOPs (TFLOP, fwd+bwd)")
    ax.legend(fontsize=8)
    return _save(plt, fig, ax, out, title)


def plot_sweep(rows: list[dict], out: Path, title: str) -> Path | None:
    """Average probe score against parameters-ish size (FLOPs per sample) for the size sweep."""
    points = [(r["flops_per_sample"] / 1e9, r["point"].average, r["shape"].label) for r in rows
              if r["point"] is not None and r["point"].average is not None]
    if not points:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.6, 3.8))
    ax.plot([p[0] for p in points], [p[1] for p in points], marker="^", color="tab:red")
    for xval, yval, label in points:
        ax.annotate(label, (xval, yval), textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.set_xscale("log")
    ax.set_xlabel("model size: GFLOP per sample (fwd+bwd), log scale")
    return _save(plt, fig, ax, out, title)


def _save(plt, fig, ax, out: Path, title: str) -> Path:
    """The shared finish of every figure: probe-score axis, title, grid, PNG at a fixed DPI."""
    ax.set_ylabel("mean frozen-probe score (0-100)")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
