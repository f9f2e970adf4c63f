"""Stage 3: frozen linear probes of every saved checkpoint (``evaluation.probing.runner.run_probing``).

Main runs are probed at every checkpoint (the curves); sweep runs at their final checkpoint. The
checkpoint goes through the project's HF export (``run_probing`` resolves native checkpoints), so
what is probed is exactly what a user would download. Every task is subsampled with a fixed seed
(``max_train``/``max_test``), identical for all checkpoints. One JSON per checkpoint; existing
files are skipped, so the stage resumes where it stopped.

With an MTEB-lite directory (STS12-16, Banking77) the same checkpoint is also scored by mteb, as
``crossbert-mteb --benchmark-dir`` would (``plan.mteb_lite_max_test`` subsamples the test splits once);
the JSON gets ``mteb_lite: {average, tasks}``, kept apart from ``tasks`` so the probe averages never
mix in MTEB scores. With ``plan.pooler_pairs`` a budget-point checkpoint also gets ``mteb_pooler``: MTEB-lite
after a pooler is trained on its frozen features (span pairs of the corpus, checked against the test sets).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from .plan import (Plan, RunSpec, compute_budget_flops, run_flops_per_sample,
                                                        steps_for_flops)
from .claims_lock import claim, release
from .train_stage import checkpoints, run_dir
from megatron_crossbert.checkpoint.directories import latest_iteration


def probe_path(work_dir: Path, run: RunSpec, iteration: int) -> Path:
    return work_dir / "probes" / run.name / f"iter_{iteration:07d}.json"


def load_tasks(plan: Plan, glue_dir: str, probe_dir: str) -> list:
    from megatron_crossbert.evaluation.probing.runner import collect_tasks

    jsonl = [str(Path(probe_dir) / name) for name in plan.jsonl_tasks if (Path(probe_dir) / name).is_dir()]
    return collect_tasks(glue_dir=glue_dir, glue_tasks=plan.glue_tasks, jsonl=jsonl)


def probe_config(plan: Plan, work_dir: Path):
    from megatron_crossbert.evaluation.probing.runner import ProbeRunConfig

    return ProbeRunConfig(max_train=plan.probe_max_train, max_test=plan.probe_max_test,
                          max_len=plan.probe_max_len, cache_dir=str(work_dir / "eval_cache"), device=plan.probe_device,
                          knn=plan.probe_knn)


def key_iterations(plan: Plan, run: RunSpec) -> list[int]:
    """The checkpoints the comparisons read: sample budget, nearest-to-compute budget, sweep step."""
    if run.group != "main":
        return [plan.sweep_steps if run.group == "sweep" else run.train_steps]
    per_sample = run_flops_per_sample(plan, run)
    flops_step = steps_for_flops(plan, compute_budget_flops(plan), per_sample)
    nearest = max(plan.save_interval, round(flops_step / plan.save_interval) * plan.save_interval)
    return list(dict.fromkeys([plan.sample_steps, nearest, plan.sweep_steps]))


def targets(work_dir: Path, run: RunSpec, plan: Plan) -> list[tuple[int, Path]]:
    """Checkpoints to probe, key budget points first (they decide the tables), then the curve's points
    (``plan.probe_at``, else every ``plan.probe_every`` steps); sweep runs only at the sweep step; never beyond
    ``latest``."""
    latest = latest_iteration(run_dir(work_dir, run)) or 0
    keys = key_iterations(plan, run)
    found = [(it, path) for it, path in checkpoints(work_dir, run) if it <= latest and
             (it in keys or (run.group == "main" and _curve_point(plan, it)))]
    return sorted(found, key=lambda item: (item[0] not in keys, item[0]))


def _curve_point(plan: Plan, iteration: int) -> bool:
    """Whether a main run's checkpoint at ``iteration`` is one of the plan's curve points."""
    if plan.probe_at:
        return iteration in plan.probe_at
    return plan.probe_every is None or iteration % plan.probe_every == 0


def load_mteb_lite(plan: Plan, mteb_lite_dir: str | None) -> list:
    """The MTEB-lite tasks (``evaluation.mteb.tasks.BuiltTask``), or none without the directory."""
    if not mteb_lite_dir:
        return []
    from megatron_crossbert.evaluation.mteb.adapter import benchmark_tasks

    return benchmark_tasks(mteb_lite_dir, max_test=plan.mteb_lite_max_test)


def mteb_lite_scores(path: Path, tasks: list, config) -> dict:
    """The checkpoint's MTEB-lite main scores by folder and their average (its own embedding recipe), and
    ``readouts``: both readouts' averages and task scores (raw, the paper's, and whitened) from the same features."""
    from megatron_crossbert.evaluation.mteb.adapter import build_mteb_encoder, evaluate_mteb, other_readout

    wrapper = build_mteb_encoder(str(path), cache_dir=config.cache_dir, device=config.device)
    summary, _ = evaluate_mteb(wrapper, tasks, raise_error=True)
    return {"average": summary["average"], "tasks": {row["folder"]: row["main_score"] for row in summary["tasks"]},
            "names": {row["folder"]: row["task"] for row in summary["tasks"]}, "seconds": summary["timing"]["wall_s"],
            "readouts": other_readout(wrapper, tasks, summary)}


def pooler_scores(path: Path, tasks: list, config, pairs, dense_dir: Path) -> dict:
    """MTEB-lite of the checkpoint after a pooler is trained on its frozen features (the Dense module kept
    in ``dense_dir``), and the training log."""
    from megatron_crossbert.evaluation.mteb.adapter import build_mteb_encoder, evaluate_mteb
    from megatron_crossbert.evaluation.pooler.runner import pooled_variant, train_on_pairs
    from megatron_crossbert.evaluation.pooler.train import PoolerConfig, dense_module

    wrapper = build_mteb_encoder(str(path), cache_dir=config.cache_dir, device=config.device)
    _, layer, log = train_on_pairs(wrapper, pairs, PoolerConfig())  # the default pooling: mean, then the map
    dense_dir.mkdir(parents=True, exist_ok=True)
    dense_module(layer).save(str(dense_dir))
    summary, _ = evaluate_mteb(pooled_variant(wrapper, dense_dir), tasks, raise_error=True)
    return {"average": summary["average"], "tasks": {row["folder"]: row["main_score"] for row in summary["tasks"]},
            "pairs": pairs.source, "training": log}


def probe_checkpoint(path: Path, out: Path, tasks: list, config, mteb_tasks: list = (), pairs=None) -> dict:
    """Probe one checkpoint (both readouts), MTEB-lite with ``mteb_tasks``, and with ``pairs`` the pooler column."""
    from megatron_crossbert.evaluation.probing.runner import run_probing

    start = time.time()
    report = run_probing(str(path), tasks, config)
    if mteb_tasks:
        report["mteb_lite"] = mteb_lite_scores(path, list(mteb_tasks), config)
    if mteb_tasks and pairs is not None:
        report["mteb_pooler"] = pooler_scores(path, list(mteb_tasks), config, pairs, out.with_suffix(".pooler"))
    report["probe_seconds"] = round(time.time() - start, 1)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(report, indent=1, default=str))
    tmp.replace(out)
    return report


_TASKS_CACHE: dict[tuple, tuple[list, list]] = {}


def _cached_tasks(plan: Plan, glue_dir: str, probe_dir: str, mteb_lite_dir: str | None) -> tuple[list, list]:
    """Probe tasks and MTEB-lite tasks, loaded once per process."""
    key = (plan.name, glue_dir, probe_dir, mteb_lite_dir)
    if key not in _TASKS_CACHE:
        _TASKS_CACHE[key] = (load_tasks(plan, glue_dir, probe_dir), load_mteb_lite(plan, mteb_lite_dir))
    return _TASKS_CACHE[key]


def pending(plan: Plan, runs: list[RunSpec], work_dir: Path) -> list[tuple[RunSpec, int, Path]]:
    """Unprobed checkpoints: every run's key budget points first, then the remaining curve points."""
    items = [(run, it, path) for run in runs for it, path in targets(work_dir, run, plan)
             if not probe_path(work_dir, run, it).is_file()]
    return sorted(items, key=lambda item: item[1] not in key_iterations(plan, item[0]))


def pooler_pairs(plan: Plan, corpus: str | None, mteb_lite_dir: str | None):
    """The plan's span pairs from the corpus (a file or a folder of ``*.jsonl[.gz]``), checked against the
    MTEB-lite test sets (refused on overlap); None without a pooler column."""
    if not plan.pooler_pairs or not corpus or not mteb_lite_dir:
        return None
    from megatron_crossbert.evaluation.pooler.leaks import check_leaks
    from megatron_crossbert.evaluation.pooler.pairs import span_pairs

    files = sorted(Path(corpus).glob("*.jsonl*")) if Path(corpus).is_dir() else [Path(corpus)]
    pairs = span_pairs(files, plan.pooler_pairs, seed=plan.seed)
    check_leaks(pairs, mteb_lite_dir)
    return pairs


def run_probe_stage(plan: Plan, runs: list[RunSpec], work_dir: Path, glue_dir: str, probe_dir: str,
                    limit: int | None = None, mteb_lite_dir: str | None = None, corpus: str | None = None) -> int:
    """Probe pending checkpoints (at most ``limit``), and score them on MTEB-lite when ``mteb_lite_dir`` is
    given (budget points also after a pooler trained on ``corpus`` spans, ``plan.pooler_pairs``); tasks and
    pairs load once per process. Returns the count."""
    pairs = pooler_pairs(plan, corpus, mteb_lite_dir)
    config, done = probe_config(plan, work_dir), 0
    for run, iteration, path in pending(plan, runs, work_dir):
        out = probe_path(work_dir, run, iteration)
        if (limit is not None and done >= limit) or not claim(out.with_suffix(".lock")):
            continue
        print(f"[study] probing {run.name} step {iteration}", flush=True)
        tasks, mteb_tasks = _cached_tasks(plan, glue_dir, probe_dir, mteb_lite_dir)
        try:
            probe_checkpoint(path, out, tasks, config, mteb_tasks,
                             pairs if iteration in key_iterations(plan, run) else None)
        finally:
            release(out.with_suffix(".lock"))
        done += 1
    return done


def load_probe_results(work_dir: Path, run: RunSpec) -> dict[int, dict]:
    """{iteration: probe report} for every finished probe of ``run``."""
    folder = work_dir / "probes" / run.name
    results = {}
    for path in sorted(folder.glob("iter_*.json")):
        results[int(path.stem[len("iter_"):])] = json.loads(path.read_text())
    return results
