"""Stage 3: frozen linear probes of every saved checkpoint (``evaluation.probing.run_probing``).

Main runs are probed at every checkpoint (the curves); sweep runs at their final checkpoint. The
checkpoint goes through the project's HF export (``run_probing`` resolves native checkpoints), so
what is probed is exactly what a user would download. Every task is subsampled with a fixed seed
(``max_train``/``max_test``), identical for all checkpoints. One JSON per checkpoint; existing
files are skipped, so the stage resumes where it stopped.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from megatron_crossbert.benchmarking.sample_efficiency.plan import Plan, RunSpec
from megatron_crossbert.benchmarking.sample_efficiency.train_stage import checkpoints, run_dir
from megatron_crossbert.checkpoint_format import latest_iteration


def probe_path(work_dir: Path, run: RunSpec, iteration: int) -> Path:
    return work_dir / "probes" / run.name / f"iter_{iteration:07d}.json"


def load_tasks(plan: Plan, glue_dir: str, probe_dir: str) -> list:
    from megatron_crossbert.evaluation.probing import collect_tasks

    jsonl = [str(Path(probe_dir) / name) for name in plan.jsonl_tasks if (Path(probe_dir) / name).is_dir()]
    return collect_tasks(glue_dir=glue_dir, glue_tasks=plan.glue_tasks, jsonl=jsonl)


def probe_config(plan: Plan, work_dir: Path):
    from megatron_crossbert.evaluation.probing import ProbeRunConfig

    return ProbeRunConfig(max_train=plan.probe_max_train, max_test=plan.probe_max_test,
                          max_len=plan.probe_max_len, cache_dir=str(work_dir / "eval_cache"), device="cpu")


def targets(work_dir: Path, run: RunSpec, plan: Plan) -> list[tuple[int, Path]]:
    """Checkpoints to probe: all (main) or the sweep step (sweep), never beyond ``latest``."""
    latest = latest_iteration(run_dir(work_dir, run)) or 0
    found = [(it, path) for it, path in checkpoints(work_dir, run) if it <= latest]
    if run.group == "sweep":
        found = [(it, path) for it, path in found if it == plan.sweep_steps]
    return found


def probe_checkpoint(path: Path, out: Path, tasks: list, config) -> dict:
    from megatron_crossbert.evaluation.probing import run_probing

    start = time.time()
    report = run_probing(str(path), tasks, config)
    report["probe_seconds"] = round(time.time() - start, 1)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(report, indent=1, default=str))
    tmp.replace(out)
    return report


def run_probe_stage(plan: Plan, runs: list[RunSpec], work_dir: Path, glue_dir: str, probe_dir: str) -> int:
    """Probe every pending checkpoint (tasks are loaded only if something is pending); returns the count."""
    tasks, config, done = None, probe_config(plan, work_dir), 0
    for run in runs:
        for iteration, path in targets(work_dir, run, plan):
            out = probe_path(work_dir, run, iteration)
            if out.is_file():
                continue
            tasks = tasks if tasks is not None else load_tasks(plan, glue_dir, probe_dir)
            print(f"[sample-efficiency] probing {run.name} step {iteration}", flush=True)
            probe_checkpoint(path, out, tasks, config)
            done += 1
    return done


def load_probe_results(work_dir: Path, run: RunSpec) -> dict[int, dict]:
    """{iteration: probe report} for every finished probe of ``run``."""
    folder = work_dir / "probes" / run.name
    results = {}
    for path in sorted(folder.glob("iter_*.json")):
        results[int(path.stem[len("iter_"):])] = json.loads(path.read_text())
    return results
