"""What an MTEB run leaves behind: one mteb result JSON per task, ``mteb_summary.json`` and ``mteb_summary.md``.

The per-task files are ``TaskResult.to_dict()``, mteb's own result format, so a registered task's file
diffs against MTEB's public results (embeddings-benchmark/results). The summary has one row per task
(main score on MTEB's 0-100 scale, the mteb task it reproduces, rows per split, a note), the average,
the model and its embedding recipe, the mteb version and the timing; with a reference file
(``--reference``: published scores) each row also carries the reference value and the difference.

An output directory that already holds a summary is refused unless ``overwrite``: results a user kept
are never replaced by accident. Files are written atomically.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np

from megatron_crossbert.evaluation.recipe import EmbeddingRecipe, describe
from megatron_crossbert.fsutil import atomic_write_text
from megatron_crossbert.outputs import require_output_dir, writing

if TYPE_CHECKING:
    from megatron_crossbert.evaluation.embedder import Embedder

SUMMARY_JSON, SUMMARY_MD = "mteb_summary.json", "mteb_summary.md"
COVERAGE_BENCHMARK = "MTEB(eng, v2)"
"""The benchmark whose tasks an offline run is averaged over too (the paper's MTEB numbers)."""


def benchmark_coverage(rows: Sequence[dict], benchmark: str = COVERAGE_BENCHMARK) -> dict | None:
    """The average over the rows that are tasks of ``benchmark`` (mteb's registered task, the benchmark's
    own subset), and how many of its tasks that is: an offline run holds only some of them."""
    import mteb

    wanted = {task.metadata.name: list(task.hf_subsets or []) for task in mteb.get_benchmark(benchmark).tasks}
    present = [r for r in rows if r["mteb_task"] in wanted
               and (r.get("subset") is None or r["subset"] in wanted[r["mteb_task"]])]
    if not present:
        return None
    return {"benchmark": benchmark, "tasks": [r["task"] for r in present], "of": len(wanted),
            "average": float(np.mean([r["main_score"] for r in present]))}


def load_reference(path: str | Path | None) -> dict:
    """A reference file: ``{"label": ..., "source": ..., "scores": {task name: score (0-100)}}``."""
    if path is None:
        return {}
    data = json.loads(Path(path).read_text())
    scores = data.get("scores") if isinstance(data, dict) else None
    if not isinstance(scores, dict) or not all(isinstance(v, (int, float)) for v in scores.values()):
        raise ValueError(f"{path}: expected an object with a 'scores' mapping of task name -> score (0-100)")
    return {"label": str(data.get("label", "reference")), "source": data.get("source"), "path": str(path),
            "scores": {str(k): float(v) for k, v in scores.items()}}


def _rows_per_split(task, subset: str | None = None) -> dict[str, int]:
    dataset = getattr(task, "dataset", None)
    dataset = dataset[subset] if subset and dataset is not None else dataset
    try:
        return {split: len(dataset[split]) for split in dataset} if dataset is not None else {}
    except TypeError:  # online tasks hold nested subsets
        return {}


def task_row(built, result, reference: dict) -> dict:
    """One summary row; ``built`` is a ``tasks.BuiltTask``, ``result`` mteb's ``TaskResult``."""
    score = 100.0 * float(result.get_score())
    ref = reference.get("scores", {}).get(built.name)
    metadata = built.task.metadata
    return {"task": built.name, "folder": built.folder, "mteb_task": built.mteb_name, "type": str(metadata.type),
            "main_score_name": metadata.main_score, "main_score": score, "reference": ref,
            "delta": None if ref is None else score - ref, "rows": _rows_per_split(built.task, built.subset), "note": built.note,
            "subset": built.subset}


def undefined_score(row: dict) -> str:
    """Why a task's main score is not a number (the task then counts as failed, never in an average)."""
    why = ("the model's similarities are constant (it gives every text the same embedding)"
           if row["type"] == "STS" else "mteb's metric is undefined for these predictions")
    return f"mteb returned {row['main_score_name']} {row['main_score']}: {why}"


def summarize(tasks: Sequence, outcome, reference: dict) -> dict:
    """Rows, errors and averages of one ``mteb.evaluate`` outcome. A task whose main score is not a finite
    number is an error with its reason, not a row: no NaN reaches a table, an average or the JSON."""
    by_name = {result.task_name: result for result in outcome.task_results}
    rows = [task_row(built, by_name[built.name], reference) for built in tasks if built.name in by_name]
    errors = {err.task_name: str(err.exception) for err in (outcome.exceptions or [])}
    errors.update({row["task"]: undefined_score(row) for row in rows if not np.isfinite(row["main_score"])})
    rows = [row for row in rows if np.isfinite(row["main_score"])]
    paired = [r for r in rows if r["reference"] is not None]
    return {"tasks": rows, "errors": errors,
            "average": float(np.mean([r["main_score"] for r in rows])) if rows else None,
            "coverage": benchmark_coverage(rows),
            "reference": {k: v for k, v in reference.items() if k != "scores"} or None,
            "paired_average": ({"ours": float(np.mean([r["main_score"] for r in paired])),
                                "reference": float(np.mean([r["reference"] for r in paired])),
                                "tasks": len(paired)} if paired else None)}


def summary_markdown(summary: dict) -> str:
    """The table a person reads: ours per task, the average, and the reference column when there is one."""
    label = (summary.get("reference") or {}).get("label")
    head = ["task", "mteb task", "main score", "ours"] + ([label, "Δ"] if label else [])
    model = summary.get("model") or {}
    lines = [f"# MTEB: `{model.get('identity', 'model')}`", "", "| " + " | ".join(head) + " |",
             "|---|---|---|---:|" + ("---:|---:|" if label else "")]
    for r in summary["tasks"]:
        cells = [r["task"], r["mteb_task"] or "(local)", r["main_score_name"], f"{r['main_score']:.2f}"]
        if label:
            cells += [f"{r['reference']:.2f}", f"{round(r['delta'], 2) + 0.0:+.2f}"] if r["reference"] is not None else ["–", ""]
        lines.append("| " + " | ".join(cells) + " |")
    if summary["average"] is not None:
        errors = summary["errors"]
        count = (f"{len(summary['tasks'])} of {len(summary['tasks']) + len(errors)} tasks; "
                 f"{', '.join(errors)} failed" if errors else f"{len(summary['tasks'])} tasks")
        lines.append(f"| **average ({count})** | | | **{summary['average']:.2f}** |" + (" | |" if label else ""))
    coverage = summary.get("coverage")
    if coverage:
        lines.append(f"| average of the {len(coverage['tasks'])} of {coverage['benchmark']}'s {coverage['of']} tasks "
                     f"present | | | {coverage['average']:.2f} |" + (" | |" if label else ""))
    paired = summary.get("paired_average")
    if label and paired:
        lines.append(f"| average of the {paired['tasks']} tasks with a {label} value | | | {paired['ours']:.2f} | "
                     f"{paired['reference']:.2f} | {round(paired['ours'] - paired['reference'], 2) + 0.0:+.2f} |")
    for name, err in summary["errors"].items():
        lines.append(f"| {name} | error | {err.splitlines()[0][:100] if err else ''} | |" + (" | |" if label else ""))
    lines += [""] + [f"- {r['task']}: {r['note']}" for r in summary["tasks"] if r["note"]]
    lines += readouts_markdown(summary.get("readouts"))
    recipe, timing = model.get("recipe"), summary.get("timing")
    if recipe:
        lines.append(f"- {describe(EmbeddingRecipe(**recipe))}; mteb {summary.get('mteb_version')}")
    if timing and "texts_encoded" in timing:
        lines.append(f"- {timing['texts_encoded']} texts encoded in {timing['encode_wall_s']} s "
                     f"({timing['encode_cpu_s']} CPU-s); whole run {timing['wall_s']} s wall, {timing['cpu_s']} CPU-s")
    return "\n".join(lines).rstrip() + "\n"


def readouts_markdown(readouts: dict | None) -> list[str]:
    """Raw (the paper's) and whitened scores side by side, the average of each, and the MTEB(eng, v2) part;
    nothing when no task has a score (every task failed: the errors above say why)."""
    if not readouts or not readouts["tasks"]:
        return []
    fmt = lambda v: "–" if v is None else f"{v:.2f}"  # noqa: E731
    lines = ["", f"Readouts (this run's own: {readouts['primary']}):", "", "| task | raw | whitened |", "|---|---:|---:|"]
    lines += [f"| {task} | {fmt(s['raw'])} | {fmt(s['whitened'])} |" for task, s in readouts["tasks"].items()]
    lines.append(f"| **average** | {fmt(readouts['average'].get('raw'))} | {fmt(readouts['average'].get('whitened'))} |")
    cov = {name: c for name, c in (readouts.get("coverage") or {}).items() if c}
    if cov:
        first = next(iter(cov.values()))
        cells = [fmt((cov.get(name) or {}).get("average")) for name in ("raw", "whitened")]
        lines.append(f"| {first['benchmark']} ({len(first['tasks'])} of {first['of']}) | {cells[0]} | {cells[1]} |")
    return lines + [""]


def check_out_dir(out_dir: str | Path, overwrite: bool) -> Path:
    """Before any work: ``out_dir`` can be a directory, and holds no summary unless ``overwrite`` (results a
    user kept are never replaced by accident). Creates nothing."""
    out_dir = require_output_dir(out_dir, "--out")
    if (out_dir / SUMMARY_JSON).exists() and not overwrite:
        raise FileExistsError(f"{out_dir / SUMMARY_JSON} exists: pass --overwrite to replace those results, "
                              "or choose another --out")
    return out_dir


def write_outputs(results: Sequence, summary: dict, out_dir: Path, embedder: Embedder | None = None) -> None:
    """Per-task mteb result JSONs, the summary JSON (strict: no NaN) and markdown, and what ``embedder`` resolved
    (``embedder.json``), all atomic; a full disk is one line naming ``out_dir``, and a directory this created is
    removed again."""
    with writing(out_dir, "the MTEB results", directory=out_dir):
        out_dir.mkdir(parents=True, exist_ok=True)
        for result in (r for r in results if r.task_name not in summary["errors"]):  # no NaN score on disk
            atomic_write_text(out_dir / f"{result.task_name}.json",
                              json.dumps(result.to_dict(), indent=2, default=str))
        atomic_write_text(out_dir / SUMMARY_JSON, json.dumps(summary, indent=2, default=str, allow_nan=False) + "\n")
        atomic_write_text(out_dir / SUMMARY_MD, summary_markdown(summary))
        if embedder is not None:
            from megatron_crossbert.evaluation.embedder import write_embedder_json

            write_embedder_json(embedder, out_dir)
