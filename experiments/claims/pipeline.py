"""The sample-efficiency experiment end to end: data -> train -> probe -> report, resumable.

Every stage skips what is already on disk, so re-running the same command continues a partial
run. A failing stage does not lose the others' results: the error is recorded in ``status.json``
and the report stage still writes ``docs/results.md`` from whatever was measured, marking the
rest as not completed.
"""

from __future__ import annotations

import json
import os
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from megatron_crossbert.benchmarking.study.plan import Plan, RunSpec, compute_budget_flops

from . import analysis as an
from .plan import PLANS, all_runs

STAGES = ("data", "train", "probe", "report")

CAVEATS = [
    "Tiny models, minutes of training: absolute probe scores are near the floor of what these tasks allow, "
    "and differences of ~1 point are within run-to-run noise (one seed per model; not repeated).",
    "Probe sets are subsampled (see the plan), so GLUE numbers are not comparable to published dev scores.",
    "MTEB-lite avg is mteb's main score averaged over STS12-16 and Banking77 (crossbert-mteb's protocol), on "
    "test sets subsampled to `mteb_lite_max_test` rows (see the plan): compare rows with each other, not with "
    "MTEB's published scores.",
    "Throughput on 2 CPU cores shared with other jobs is noisy; only the interleaved ratios are meaningful, "
    "and CPU ratios need not match GPU ratios (attention/GEMM efficiency differs).",
    "The LR is constant after warm-up (no decay), so intermediate checkpoints are comparable across budgets, "
    "but no run reaches the quality a decayed schedule would. Runs were extended by resuming their "
    "checkpoints with a larger step count (the constant schedule makes that identical to a longer run, "
    "except that the data order past the old end is drawn for the new length).",
    "The corpus subset holds ~12k sequences of 64 tokens: runs beyond that (the longest single-view run) "
    "see part of the data a second time.",
]


@dataclass
class ExperimentPaths:
    work_dir: str
    corpus: str
    glue_dir: str
    probe_dir: str
    results_md: str = "docs/results.md"
    figures_dir: str = "docs/figures"
    throughput_json: list[str] = field(default_factory=lambda: ["benchmarks/out/throughput.json",
                                                               "benchmarks/out/throughput_L512.json"])
    """Throughput reports (``crossbert-bench throughput``) the page shows, those that exist: the CPU shape
    and the same encoder at L=512 (``--seq-length 512``)."""
    mteb_lite_dir: str | None = None
    """MTEB-lite folders (STS12-16, Banking77) each checkpoint is also scored on; None: not scored."""


def _status_path(work_dir: Path) -> Path:
    return work_dir / "status.json"


def _load_status(work_dir: Path) -> dict:
    path = _status_path(work_dir)
    return json.loads(path.read_text()) if path.is_file() else {}


def _save_status(work_dir: Path, status: dict) -> None:
    """Merge into the file: a training process and a probing process may both update it."""
    merged = {**_load_status(work_dir), **status}
    tmp = _status_path(work_dir).with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(merged, indent=2))
    tmp.replace(_status_path(work_dir))


def _run_stage(name: str, fn, work_dir: Path) -> bool:
    """Run one stage, recording running/done/failed (with the error) in status.json; never raises."""
    start = time.time()
    _save_status(work_dir, {name: "running"})
    try:
        fn()
        _save_status(work_dir, {name: f"done ({time.time() - start:.0f}s this invocation)"})
        return True
    except Exception as err:  # recorded and reported, so a partial run still yields a results page
        _save_status(work_dir, {name: f"FAILED: {type(err).__name__}: {err}"})
        (work_dir / "logs").mkdir(exist_ok=True)
        (work_dir / "logs" / f"stage-{name}.traceback").write_text(traceback.format_exc())
        print(f"[sample-efficiency] stage {name} failed: {err}", flush=True)
        return False


def make_figures(plan: Plan, runs: list[RunSpec], work_dir: Path, figures_dir: Path) -> dict[str, Path | None]:
    from . import plots

    curves = {r.name: an.curve(plan, r, work_dir) for r in runs if r.group == "main"}
    suffix = "" if plan.name == "cpu" else f"_{plan.name}"
    ref = an.reference_point(plan, runs, work_dir)
    floor = ref.average if ref else None
    return {
        "vs samples": plots.plot_curves(curves, "samples", plan.sample_steps * plan.global_batch,
                                        figures_dir / f"probe_vs_samples{suffix}.png",
                                        "Frozen-probe score vs samples seen", floor),
        "vs FLOPs": plots.plot_curves(curves, "flops", compute_budget_flops(plan),
                                      figures_dir / f"probe_vs_flops{suffix}.png",
                                      "Frozen-probe score vs model FLOPs", floor),
        "sweep": plots.plot_sweep(an.sweep_table(plan, runs, work_dir), figures_dir / f"size_sweep{suffix}.png",
                                  "CrossBERT (r=0.5, complementary): score vs size"),
    }


def _report(plan: Plan, runs: list[RunSpec], work: Path, paths: ExperimentPaths) -> None:
    from .results_page import write_results_page

    figures = make_figures(plan, runs, work, Path(paths.figures_dir))
    throughput = [Path(path) for path in paths.throughput_json if Path(path).is_file()]
    status = {k: v for k, v in _load_status(work).items() if k != "report"}
    write_results_page(Path(paths.results_md), plan=plan, runs=runs, work_dir=work, figures=figures,
                       status=status, throughput_jsons=throughput, caveats=CAVEATS)


def follow_probes(plan: Plan, runs: list[RunSpec], work: Path, paths: ExperimentPaths, poll_s: float = 30.0) -> None:
    """Probe checkpoints as a concurrent training process writes them, until every run is done.

    Lets probing overlap training (``--stages probe report --follow`` beside ``--stages data train``);
    the page is rewritten after every probed checkpoint.
    """
    from megatron_crossbert.benchmarking.study.probe_stage import run_probe_stage
    from megatron_crossbert.benchmarking.study.train_stage import is_complete

    while True:
        finished = all(is_complete(work, run) for run in runs)
        probed = run_probe_stage(plan, runs, work, paths.glue_dir, paths.probe_dir, limit=1,
                                 mteb_lite_dir=paths.mteb_lite_dir)
        if probed:
            _run_stage("report", lambda: _report(plan, runs, work, paths), work)
        elif finished:
            return
        else:
            time.sleep(poll_s)


def run_experiment(paths: ExperimentPaths, plan_name: str = "cpu", stages: list[str] | None = None,
                   follow: bool = False) -> dict:
    """Run the requested stages (default all); returns the final status dict.

    Training and probing go run by run (train BERT, probe it, rewrite the page, then the next run),
    so an interrupted experiment still has complete, reported comparisons for the runs it finished.
    ``follow=True`` (probe/report only) instead waits for checkpoints from a concurrent trainer.
    """
    from megatron_crossbert.benchmarking.study.data_stage import data_prefix, run_data_stage, tokenizer_dir
    from megatron_crossbert.benchmarking.study.probe_stage import run_probe_stage
    from megatron_crossbert.benchmarking.study.train_stage import run_train_stage

    plan, work = PLANS[plan_name], Path(paths.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    runs, wanted = all_runs(plan), stages or list(STAGES)
    if follow:
        follow_probes(plan, runs, work, paths)
        return _load_status(work)
    data_ok = "data" not in wanted or _run_stage("data", lambda: run_data_stage(plan, work, paths.corpus), work)
    for run in runs:
        if data_ok and "train" in wanted:
            _run_stage(f"train:{run.name}", lambda: run_train_stage(
                plan, [run], work, data_prefix(work), str(tokenizer_dir(work))), work)
        if "probe" in wanted:
            _run_stage(f"probe:{run.name}", lambda: run_probe_stage(
                plan, [run], work, paths.glue_dir, paths.probe_dir, mteb_lite_dir=paths.mteb_lite_dir), work)
        if "report" in wanted:
            _run_stage("report", lambda: _report(plan, runs, work, paths), work)
    return _load_status(work)
