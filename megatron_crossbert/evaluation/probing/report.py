"""Probe reports: JSON, a markdown table and (per-layer runs) a PNG plot of score against depth.

Everything here reads the report dict that ``runner.run_probing`` returns, so the CLI, the
benchmarks and notebooks render identical tables.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from megatron_crossbert.evaluation.recipe import EmbeddingRecipe, describe
from megatron_crossbert.fsutil import atomic_open, atomic_write_text
from megatron_crossbert.outputs import writing

if TYPE_CHECKING:
    from megatron_crossbert.evaluation.embedder import Embedder

_METRIC_LABELS = {"accuracy": "acc", "f1": "F1", "macro_f1": "macro-F1", "matthews": "MCC",
                  "pearson": "Pearson", "spearman": "Spearman"}


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"


def metrics_text(metrics: dict[str, float]) -> str:
    """``'F1 81.2 / acc 72.3'`` in the task's metric order."""
    return " / ".join(f"{_METRIC_LABELS.get(k, k)} {_fmt(v)}" for k, v in metrics.items())


def markdown_table(report: dict) -> str:
    """One row per task (metrics, score, sizes, chosen regularisation; the k-NN score where it ran) and
    summary rows."""
    knn = any("knn" in entry for entry in report["tasks"].values())
    both = report["summary"].get("readouts")
    extra = " k-NN |" if knn else ""
    lines = [f"| task | metrics | score |{' raw | whitened |' if both else ''}{extra} train | test | probe reg. |",
             "|---|---|---:|" + ("---:|---:|" if both else "") + ("---:|" if knn else "") + "---:|---:|---|"]
    for name, entry in report["tasks"].items():
        chosen = ", ".join(f"{k}={v:g}" for k, v in entry["chosen"].items())
        cell = f" {_fmt(entry['knn']['score'])} (k={entry['knn']['k']}) |" if knn and "knn" in entry else extra and " |"
        readouts = "".join(f" {_fmt(entry['readouts'][r])} |" for r in ("raw", "whitened")) if both else ""
        lines.append(f"| {name} | {metrics_text(entry['metrics'])} | {_fmt(entry['score'])} |{readouts}{cell} "
                     f"{entry['n_train']} | {entry['n_test']} | {chosen} |")
    summary = report["summary"]
    if summary["glue_tasks"]:
        label = "GLUE average" if len(summary["glue_tasks"]) >= 9 else "GLUE-style average (tasks run)"
        cell = f" **{_fmt(summary.get('knn_glue_average'))}** |" if knn else ""
        readouts = "".join(f" {_fmt(both[r]['glue_average'])} |" for r in ("raw", "whitened")) if both else ""
        lines.append(f"| **{label}** | {', '.join(summary['glue_tasks'])} | **{_fmt(summary['glue_average'])}** |"
                     f"{readouts}{cell} | | |")
    failed = summary.get("failed") or []
    label = f"average ({len(summary['tasks']) - len(failed)} of {len(summary['tasks'])} tasks; " \
            f"{', '.join(failed)} failed)" if failed else "average (all tasks)"
    cell = f" **{_fmt(summary.get('knn_average'))}** |" if knn else ""
    readouts = "".join(f" {_fmt(both[r]['average'])} |" for r in ("raw", "whitened")) if both else ""
    lines.append(f"| **{label}** | | **{_fmt(summary['average'])}** |{readouts}{cell} | | |")
    lines += [f"| {name} | failed: {report['tasks'][name]['failed']} |{' |' * (2 if both else 0)}{extra} | | | |"
              for name in failed]
    return "\n".join(lines)


def layer_table(report: dict) -> str:
    """Task score per layer (layer 0 = embedding output); empty string when no per-layer results."""
    tasks = {name: e["per_layer"] for name, e in report["tasks"].items() if "per_layer" in e}
    if not tasks:
        return ""
    n_layers = max(len(v) for v in tasks.values())
    lines = ["| layer | " + " | ".join(tasks) + " |", "|---:|" + "---:|" * len(tasks)]
    for i in range(n_layers):
        cells = [_fmt(v[i]["score"]) if i < len(v) else "" for v in tasks.values()]
        lines.append(f"| {i} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_layers(report: dict, path: str | Path) -> Path | None:
    """Line plot of each task's score against layer index; None when there is nothing per-layer."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = {name: e["per_layer"] for name, e in report["tasks"].items() if "per_layer" in e}
    if not tasks:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, layers in tasks.items():
        ax.plot([r["layer"] for r in layers], [r["score"] for r in layers], marker="o", label=name)
    ax.set_xlabel("layer (0 = embeddings)")
    ax.set_ylabel("probe score (0-100)")
    ax.set_title(f"Frozen probes per layer: {Path(report['model']['hf_path']).name}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_open(path, "wb") as handle:
        fig.savefig(handle, format="png", dpi=120)
    plt.close(fig)
    return path


def recipe_line(recipe: dict | None) -> str:
    """The report's embedding recipe in words: whitened or not, and why (absent in older reports)."""
    return describe(EmbeddingRecipe(**recipe)) if recipe else ""


def features_line(report: dict) -> str:
    """How the features were read (when not the default) and their geometry (absent in older reports)."""
    encoding = report["config"].get("encoding") or {}
    read = "" if not encoding or (encoding["visible_fraction"] == 1.0 and
                                  encoding["hidden_state"] == "after_final_norm") else \
        f"Encoded with {encoding['visible_fraction']:g} of each text's tokens visible, read {encoding['hidden_state']}. "
    stats, tokens = report.get("feature_stats"), report.get("token_geometry")
    if stats:
        read += (f"Pooled features: effective rank {stats['effective_rank']:.1f} of {stats['dim']}, mean pairwise "
                 f"cosine {stats['mean_cosine']:.3f} ({stats['n']} sentences). ")
    if tokens:
        read += (f"Token states ({tokens['n_tokens']} of {tokens['n_texts']} texts): effective rank "
                 f"{tokens['token_effective_rank']:.1f}, {tokens['pc1_share']:.0%} of their variance on one direction; "
                 f"the token id explains {tokens['identity_share']:.0%}, the position {tokens['position_share']:.0%}; "
                 f"pooled first direction against text length |r| = {tokens['pooled_length_r']:.2f}.")
    return read.strip()


def render_markdown(report: dict) -> str:
    """The full markdown document: model line, main table and the per-layer table when present."""
    parts = [f"# Frozen probes: `{report['model']['hf_path']}`", "",
             f"pooling={report['config']['pooling']}, layers={report['config']['layers']}, "
             f"max_len={report['config']['max_len']}, max_train={report['config']['max_train']}, "
             f"max_test={report['config']['max_test']}", recipe_line(report.get("recipe")),
             features_line(report), "", markdown_table(report)]
    layers = layer_table(report)
    if layers:
        parts += ["", "## Score per layer", "", layers]
    return "\n".join(parts) + "\n"


def write_report(report: dict, out_dir: str | Path, stem: str = "probe_results",
                 embedder: Embedder | None = None) -> dict[str, Path]:
    """Write ``<stem>.json`` (strict JSON: no NaN), ``<stem>.md``, (per-layer runs) ``<stem>_layers.png`` and what
    ``embedder`` resolved (``embedder.json``), each atomically; a full disk is one line naming ``out_dir``
    (``outputs.writing``). Returns the paths."""
    out_dir = Path(out_dir)
    paths = {"json": out_dir / f"{stem}.json", "markdown": out_dir / f"{stem}.md"}
    with writing(out_dir, "the probe report", directory=out_dir):
        out_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(paths["json"], json.dumps(report, indent=2, default=str, allow_nan=False) + "\n")
        atomic_write_text(paths["markdown"], render_markdown(report))
        plot = plot_layers(report, out_dir / f"{stem}_layers.png")
        if embedder is not None:
            from megatron_crossbert.evaluation.embedder import write_embedder_json

            paths["embedder"] = write_embedder_json(embedder, out_dir)
    if plot is not None:
        paths["plot"] = plot
    return paths
