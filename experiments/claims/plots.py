"""PNG figures for the results page, each with 95% bands over the seeds.

matplotlib with the Agg backend (headless). Every curve is the mean over seeds at each checkpoint and
its band the Student-t interval (``stats.mean_interval``); the untrained encoder is a horizontal band.
"""

from __future__ import annotations

from pathlib import Path

from .study.stats import mean_interval

from .analysis import HEADLINE, METRICS, Point

STYLES = {"bert": ("BERT (sparse MLM, 15%)", "tab:gray", "s"),
          "crossbert-single": ("CrossBERT r=0.5 single view", "tab:blue", "o"),
          "crossbert-compl": ("CrossBERT r=0.5 complementary", "tab:red", "^"),
          "crossbert-fast": ("CrossBERT r=0.75 compl, decoder h/2x1", "tab:orange", "v")}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _band(by_seed: dict[int, list[Point]], x: str, metric: str) -> list[tuple[float, float, float, float]]:
    """(x, mean, low, high) per checkpoint over the seeds (low = high = mean with one seed)."""
    iterations = sorted({p.iteration for points in by_seed.values() for p in points})
    rows = []
    for it in iterations:
        points = [p for pts in by_seed.values() for p in pts if p.iteration == it and getattr(p, metric) is not None]
        interval = mean_interval([getattr(p, metric) for p in points])
        if interval is not None:
            xval = sum(getattr(p, x) for p in points) / len(points)
            rows.append((xval, interval.mean, interval.low if interval.low is not None else interval.mean,
                         interval.high if interval.high is not None else interval.mean))
    return rows


def plot_curves(curves: dict[str, dict[int, list[Point]]], x: str, budget: float, out: Path,
                reference: list[float], metric: str = HEADLINE) -> Path | None:
    """``metric`` against ``x`` ('samples' or 'flops') per arm with bands; the untrained band as a floor."""
    if not any(points for by_seed in curves.values() for points in by_seed.values()):
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    scale = 1e12 if x == "flops" else 1
    for arm, by_seed in curves.items():
        label, color, marker = STYLES.get(arm, (arm, None, "x"))
        rows = _band(by_seed, x, metric)
        ax.plot([r[0] / scale for r in rows], [r[1] for r in rows], marker=marker, color=color, label=label)
        ax.fill_between([r[0] / scale for r in rows], [r[2] for r in rows], [r[3] for r in rows], color=color,
                        alpha=0.15)
    _reference_band(ax, reference)
    ax.axvline(budget / scale, color="black", linestyle=":", linewidth=1,
               label="sample budget" if x == "samples" else "BERT's FLOPs budget")
    ax.set_xlabel("samples seen (sequences)" if x == "samples" else "model FLOPs (TFLOP, fwd+bwd)")
    ax.legend(fontsize=7)
    return _save(plt, fig, ax, out, f"Frozen {METRICS[metric]} average vs {x} (mean, 95% band)", METRICS[metric])


def _reference_band(ax, reference: list[float]) -> None:
    interval = mean_interval(reference)
    if interval is None:
        return
    ax.axhline(interval.mean, color="tab:green", linestyle="--", linewidth=1, label="untrained encoder")
    if interval.low is not None:
        ax.axhspan(interval.low, interval.high, color="tab:green", alpha=0.1)


def plot_loss_vs_probe(curves: dict[str, dict[int, list[Point]]], out: Path) -> Path | None:
    """The paper's motivating figure: probe score against held-out loss per arm (mean over seeds)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    drawn = False
    for arm, by_seed in curves.items():
        losses = {r[0]: r[1] for r in _band(by_seed, "iteration", "valid_loss")}
        scores = {r[0]: r[1] for r in _band(by_seed, "iteration", HEADLINE)}
        common = sorted(set(losses) & set(scores))
        if common:
            label, color, marker = STYLES.get(arm, (arm, None, "x"))
            ax.plot([losses[i] for i in common], [scores[i] for i in common], marker=marker, color=color, label=label)
            drawn = True
    if not drawn:
        plt.close(fig)
        return None
    ax.invert_xaxis()
    ax.set_xlabel("held-out loss (MLM for BERT, reconstruction for CrossBERT); training goes right")
    ax.legend(fontsize=7)
    return _save(plt, fig, ax, out, "Frozen GLUE (linear) vs held-out loss, checkpoint by checkpoint", METRICS[HEADLINE])


def _loss_band(by_seed: dict[int, dict[int, float]]) -> tuple[list[int], list]:
    """(steps, intervals): every step any seed evaluated, over the seeds that reached it, so a seed still training
    neither hides nor truncates the others' curve (one seed: its value, no band)."""
    steps = sorted({step for curve in by_seed.values() for step in curve})
    return steps, [mean_interval([curve[step] for curve in by_seed.values() if step in curve]) for step in steps]


def plot_loss_curves(losses: dict[str, dict[int, dict[int, float]]], tokens_per_step: int, unigram: float | None,
                     out: Path, reference: str | None = None) -> Path | None:
    """Held-out loss against training tokens per arm (mean over the seeds at each step, 95% band), with the
    unigram entropy and the untrained model's loss as floors: ``reference`` names the untrained arm, whose one
    evaluation per seed is the floor and never a curve."""
    arms = {arm: by_seed for arm, by_seed in losses.items() if arm != reference}
    if not arms:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for arm, by_seed in arms.items():
        label, color, marker = STYLES.get(arm, (arm, None, "x"))
        steps, bands = _loss_band(by_seed)
        x = [step * tokens_per_step / 1e6 for step in steps]
        ax.plot(x, [b.mean for b in bands], marker=marker, markersize=3, color=color, label=label)
        ax.fill_between(x, [b.low if b.low is not None else b.mean for b in bands],
                        [b.high if b.high is not None else b.mean for b in bands], color=color, alpha=0.15)
    untrained = [loss for curve in losses.get(reference, {}).values() for loss in curve.values()]
    if untrained:
        ax.axhline(sum(untrained) / len(untrained), color="tab:green", linestyle="--", linewidth=1, label="untrained")
    if unigram is not None:
        ax.axhline(unigram, color="black", linestyle=":", linewidth=1, label=f"unigram entropy ({unigram:.2f})")
    ax.set_xlabel("training tokens (M)")
    ax.legend(fontsize=7)
    ax.set_ylabel("held-out loss (nats per target token)")
    ax.set_title("Held-out loss vs tokens (mean, 95% band over seeds)", fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def plot_sweep(rows: list[tuple[str, float, list[float]]], out: Path) -> Path | None:
    """Headline score (mean and interval over seeds) against FLOPs per sample for the size sweep."""
    rows = [(label, gflops, mean_interval(scores)) for label, gflops, scores in rows if scores]
    if not rows:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.6, 3.8))
    means = [r[2].mean for r in rows]
    errors = [r[2].half_width or 0.0 for r in rows]
    ax.errorbar([r[1] for r in rows], means, yerr=errors, marker="^", color="tab:red", capsize=3)
    for label, gflops, interval in rows:
        ax.annotate(label, (gflops, interval.mean), textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.set_xscale("log")
    ax.set_xlabel("model size: GFLOP per sample (fwd+bwd), log scale")
    return _save(plt, fig, ax, out, "CrossBERT r=0.5 complementary: score vs size (95% intervals)", METRICS[HEADLINE])


def _save(plt, fig, ax, out: Path, title: str, metric_label: str) -> Path:
    """The shared finish of every figure: score axis, title, grid, PNG at a fixed DPI."""
    ax.set_ylabel(f"frozen {metric_label} average (0-100)")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
