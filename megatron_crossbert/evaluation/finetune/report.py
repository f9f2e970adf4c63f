"""Summaries of a fine-tuning grid: ``results.json`` and the markdown table.

Per task and lr, the median over seeds of each metric and of the task score (the mean of the task's GLUE
metrics, ``tasks/metrics.py``); the chosen lr is the one whose median task score on dev is best (ties: the
smaller lr), and that lr's medians are the reported numbers: ModernBERT's protocol, named in the output.
With one lr and one seed (the Cramming preset) this is simply that run's dev score. The mean over seeds
(what ModernBERT's ``glue.py`` prints) is kept beside the median.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from megatron_crossbert.evaluation.encoders import ResolvedModel, model_card
from megatron_crossbert.evaluation.tasks.glue import GLUE_FORMATS
from megatron_crossbert.evaluation.tasks.metrics import average_scores

from .presets import Preset

SELECTION = ("median over seeds; the lr with the best median dev score is chosen and reported on the same dev "
             "set (ModernBERT's protocol: selection on dev)")
REPORTED_HYPER_PARAMETERS = ("lr", "epochs", "batch_size", "max_len", "schedule", "warmup_ratio", "betas", "eps",
                             "weight_decay", "decay_all_params", "grad_clip", "max_train", "max_dev")


def _seed_stats(seeds: Sequence[dict], names: Sequence[str]) -> tuple[dict, dict]:
    """(median, mean) over seeds of the task score and each metric."""
    values = {name: np.asarray([seed[name] for seed in seeds], np.float64) for name in ("score", *names)}
    return ({name: float(np.median(v)) for name, v in values.items()},
            {name: float(np.mean(v)) for name, v in values.items()})


def per_lr_table(runs: Sequence[dict], metrics: Sequence[str]) -> dict[str, dict]:
    """``{"<lr>": {"lr", "seeds": {seed: {score, metrics...}}, "median", "mean"}}`` over finished runs."""
    table: dict[str, dict] = {}
    for run in sorted(runs, key=lambda r: (r["key"]["spec"]["lr"], r["key"]["spec"]["seed"])):
        spec, result = run["key"]["spec"], run["result"]
        entry = table.setdefault(f"{spec['lr']:g}", {"lr": spec["lr"], "seeds": {}})
        entry["seeds"][str(spec["seed"])] = {"score": result["score"], **result["metrics"]}
    for entry in table.values():
        entry["median"], entry["mean"] = _seed_stats(list(entry["seeds"].values()), metrics)
    return table


def summarize_task(task: str, runs: Sequence[dict], preset: Preset) -> dict:
    """The chosen lr's medians (and per-seed scores), the full per-lr table, and the cost."""
    fmt = GLUE_FORMATS[task]
    table = per_lr_table(runs, fmt.metrics)
    best = max(table.values(), key=lambda entry: (entry["median"]["score"], -entry["lr"]))
    spec = next(run["key"]["spec"] for run in runs if run["key"]["spec"]["lr"] == best["lr"])
    return {
        "task": task, "metrics": list(fmt.metrics), "headline": fmt.metrics[0], "preset": preset.label,
        "median": best["median"], "mean": best["mean"], "per_seed": best["seeds"], "best_lr": best["lr"],
        "n_seeds": len(best["seeds"]), "per_lr": table,
        "hyper_parameters": {key: spec[key] for key in REPORTED_HYPER_PARAMETERS},
        "wall_s": sum(run["result"]["wall_s"] for run in runs), "cpu_s": sum(run["result"]["cpu_s"] for run in runs),
        "device": runs[0]["result"]["device"], "threads": runs[0]["result"]["threads"],
        "n_train": runs[0]["result"]["n_train"], "n_dev": runs[0]["result"]["n_dev"],
    }


def build_report(resolved: ResolvedModel, glue_dir, preset: Preset, per_task: dict[str, dict],
                 skipped: Sequence[str], subsampled_dev: bool) -> dict:
    """The whole run as one JSON-able dict (what results.json holds)."""
    tasks = {name: summarize_task(name, done["runs"], preset) for name, done in per_task.items()}
    return {
        "tool": "crossbert-finetune", "preset": preset.to_json(), "selection": SELECTION,
        "model": model_card(resolved), "glue_dir": str(glue_dir), "tasks": tasks, "skipped_tasks": list(skipped),
        "runs": {"resumed": sum(d["resumed"] for d in per_task.values()),
                 "run_now": sum(len(d["runs"]) - d["resumed"] for d in per_task.values())},
        "glue_score_partial": average_scores({name: task["median"]["score"] for name, task in tasks.items()}),
        "scored_on": "GLUE dev (test labels are hidden)" + (" -- SUBSAMPLED, not comparable" if subsampled_dev else ""),
    }


def render_markdown(report: dict) -> str:
    """One table row per task: metrics at the chosen lr, seeds, hyper-parameters, per-seed scores, CPU time."""
    preset = report["preset"]
    overrides = f" (overrides: {', '.join(preset['overrides'])})" if preset["overrides"] else ""
    lines = [f"GLUE dev after fine-tuning `{report['model']['hf_path']}`, preset **{preset['label']}**{overrides}",
             "", "| task | metric | median | seeds | lr | epochs | batch | per-seed task scores | CPU s |",
             "|---|---|---:|---:|---:|---:|---:|---|---:|"]
    for task in report["tasks"].values():
        hp = task["hyper_parameters"]
        medians = " / ".join(f"{task['median'][m]:.2f}" for m in task["metrics"])
        seeds = ", ".join(f"{seed}: {value['score']:.2f}" for seed, value in task["per_seed"].items())
        lines.append(f"| {task['task']} | {' / '.join(task['metrics'])} | {medians} | {task['n_seeds']} | "
                     f"{hp['lr']:g} | {hp['epochs']} | {hp['batch_size']} | {seeds} | {task['cpu_s']:.0f} |")
    partial = report["glue_score_partial"]
    lines += ["", f"Mean task score over the tasks above (a partial GLUE score): {partial:.2f}",
              f"Selection: {report['selection']}.", f"Scored on: {report['scored_on']}."]
    if report["skipped_tasks"]:
        lines.append("Left out: " + "; ".join(report["skipped_tasks"]) + ".")
    return "\n".join(lines) + "\n"
