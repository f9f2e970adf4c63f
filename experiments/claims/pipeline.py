"""The claims study end to end: data -> train -> probe -> report, resumable.

Every stage skips what is already on disk, so re-running the same command continues a partial
run; what each stage's outputs were made with is recorded in the work dir and checked first
(``study/stage_keys.py``), so a changed plan or changed data is refused instead of reported
over the old numbers. A failing stage does not lose the others' results: the error is recorded in ``status.json``
and the report stage still writes ``docs/results.md`` from whatever was measured, marking the
rest as not completed.
"""

from __future__ import annotations

import json
import os
import socket
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from .study.commands import heartbeat, running_child_cpu
from .study.plan import Plan, RunSpec, arm_of, compute_budget_flops, reference_run, resolve_plan
from .study.stopping import StudyStopped, stop_requested, stopping
from megatron_crossbert.fsutil import pid_start_time, process_is_alive

from . import analysis as an
from .plan import CPU_KEY, all_runs

STAGES = ("data", "train", "probe", "report")

FIXED_CAVEATS = [
    "MTEB-lite is mteb's main score over the shared `mteb_lite/` folders (named under What was run) on test sets "
    "subsampled to the plan's `mteb_lite_max_test` rows: compare rows with each other, not with MTEB's published "
    "scores.",
    "Every probe reads frozen, mean-pooled last-layer features with the project's recipe (PCA-whitened for its "
    "own architectures, see the whitening section); the k-NN probe reads the same features. The linear probe and "
    "MTEB-lite are also reported on both readouts, raw (the paper's protocol) and whitened, each with its own "
    "verdict.",
    "MTEB (frozen, pooler trained) is the paper's MTEB protocol at this scale: a linear pooler over the frozen "
    "mean pooling, trained with MultipleNegativesRankingLoss on span pairs of the study's corpus (checked "
    "against the MTEB-lite test sets), at the budget points only.",
]


def _schedule_caveat(plan: Plan) -> str:
    if not plan.decays:
        return ("The LR is constant after warm-up (no decay), so a checkpoint is the end of a shorter run and the "
                "curves can be read at any budget; no run gets the end-of-training gain a decayed schedule would give.")
    min_lr = plan.training_schedule(plan.sample_steps)["min_lr"]
    return (f"The LR decays (WSD: {plan.lr_wsd_decay_style} to {min_lr} over the last "
            f"{plan.lr_wsd_decay_fraction:.0%} of each run), so only a run's last checkpoint is decayed. The earlier "
            "curve points are stable-phase checkpoints at the peak LR, below what a run that ended there would "
            "reach, and so is the equal-compute point of an arm that trains past BERT's FLOPs.")


def caveats(plan: Plan) -> list[str]:
    """The page's caveats for ``plan``: its scale, the intervals, its LR schedule, MTEB-lite, the readouts."""
    widths = "-".join(str(h) for h in sorted({plan.main_shape.hidden_size,
                                               *(shape.hidden_size for shape in plan.sweep_shapes)}))
    tokens = plan.sample_steps * plan.global_batch * plan.seq_length
    return [f"Tiny encoders (h={widths}, L={plan.seq_length}) trained on 2 CPU cores, {tokens / 1e6:.1f}M tokens "
            "a run at the sample budget: the paper's models are BERT-base and larger, trained for days. Verdicts "
            "here are about this scale only.",
            f"Intervals are Student-t over the seeds (n={len(plan.seeds) or 1}), so only large, consistent gaps "
            "resolve; differences are paired by seed (the same data order for every arm of a seed).",
            _schedule_caveat(plan), *FIXED_CAVEATS]


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
    records: str | None = None
    """The study's records folder (``study/records.py``): finished runs are sealed there and a fresh work dir is
    seeded from it, so a study outlives its work dir; None: the work dir is the only record."""
    session: str | None = None
    """The working session this invocation belongs to, recorded in ``sessions.json`` (``records.count_sessions``
    counts distinct labels); None: inferred from machine boots and pauses."""


def _status_path(work_dir: Path) -> Path:
    return work_dir / "status.json"


RUNNER_KEY = "runner:"
"""``status.json`` keys ``runner:<stage>``: the process running a stage (host, pid, start time), so a stage
whose process is gone (SIGKILL, a lost node) is reported as interrupted, not "running"."""


def _load_status(work_dir: Path) -> dict:
    path = _status_path(work_dir)
    return _settled(json.loads(path.read_text())) if path.is_file() else {}


def _runner() -> dict:
    pid = os.getpid()
    return {"host": socket.gethostname(), "pid": pid, "start": pid_start_time(pid)}


def _settled(status: dict) -> dict:
    """``status`` with every "running" stage whose process ended on this host marked interrupted."""
    for name, state in list(status.items()):
        runner = status.get(RUNNER_KEY + name)
        if state == "running" and isinstance(runner, dict) and runner.get("host") == socket.gethostname() \
                and not process_is_alive(int(runner["pid"]), str(runner.get("start", ""))):
            status[name] = (f"interrupted: its process ({runner['pid']}) ended without finishing it "
                            "(rerun the command to resume)")
    return status


def _save_status(work_dir: Path, status: dict) -> None:
    """Merge into the file: a training process and a probing process may both update it."""
    merged = {**_load_status(work_dir), **status}
    tmp = _status_path(work_dir).with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(merged, indent=2))
    tmp.replace(_status_path(work_dir))


def _cpu_seconds() -> float:
    """User + system CPU seconds of this process, its finished children and the one running now (the training
    processes)."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system + running_child_cpu()


_STARTED = time.time()
"""This invocation's start (wall time), for its ``sessions.json`` entry in the records."""
_SESSION: dict[str, str | None] = {"label": None}
"""This invocation's ``ExperimentPaths.session``, set once by ``run_experiment``."""


def _note_session(records: str | None) -> None:
    if records:
        from .study.records import note_session

        note_session(Path(records), _STARTED, _cpu_seconds(), _SESSION["label"])


def _run_stage(name: str, fn, work_dir: Path, records: str | None = None) -> bool:
    """Run one stage, recording running/done/failed (with the error) and its CPU seconds in status.json; raises
    only ``StudyStopped`` (a stop signal, ``study.stopping``), after recording the stage as stopped."""
    start, cpu = time.time(), _cpu_seconds()
    _save_status(work_dir, {name: "running", RUNNER_KEY + name: _runner()})
    try:
        with heartbeat(lambda: _note_session(records)):
            fn()
        ok, state = True, f"done ({time.time() - start:.0f}s this invocation)"
    except StudyStopped as stop:
        _save_status(work_dir, {name: stop.state, **_add_cpu(work_dir, name, _cpu_seconds() - cpu)})
        _note_session(records)
        raise
    except Exception as err:  # recorded and reported, so a partial run still yields a results page
        ok, state = False, f"FAILED: {type(err).__name__}: {err}"
        (work_dir / "logs").mkdir(exist_ok=True)
        (work_dir / "logs" / f"stage-{name}.traceback").write_text(traceback.format_exc())
        print(f"[claims] stage {name} failed: {err}", flush=True)
    stop = stop_requested()  # a child command stopped by the signal returns (or fails) first
    _save_status(work_dir, {name: stop.state if stop else state, **_add_cpu(work_dir, name, _cpu_seconds() - cpu)})
    _note_session(records)
    if stop:
        raise stop
    return ok


def _add_cpu(work_dir: Path, name: str, seconds: float) -> dict:
    """The status entry of ``name``'s CPU seconds with ``seconds`` added (to pass to ``_save_status``)."""
    key = CPU_KEY + name
    return {key: round(_load_status(work_dir).get(key, 0.0) + seconds, 1)}


def make_figures(plan: Plan, curves: an.StudyCurves, figures_dir: Path, runs: list[RunSpec] | None = None,
                 work: Path | None = None) -> dict[str, Path | None]:
    from .study.data_stage import data_prefix, has_dataset, tokenizer_dir
    from .study.floors import unigram_entropy
    from .study.plan import flops_per_sample

    from . import plots

    floor = list(an.values(curves.reference, an.HEADLINE).values())
    suffix = "" if plan.name == "cpu" else f"_{plan.name}"
    sweep = [(shape.label, flops_per_sample(plan, "crossbert", 0.5, True, shape) / 1e9,
              list(an.values(points, an.HEADLINE).values())) for shape, points in an.sweep_points(plan, curves)]
    figures = {
        "vs samples": plots.plot_curves(curves.main, "samples", plan.sample_steps * plan.global_batch,
                                        figures_dir / f"claims_vs_samples{suffix}.png", floor),
        "vs FLOPs": plots.plot_curves(curves.main, "flops", compute_budget_flops(plan),
                                      figures_dir / f"claims_vs_flops{suffix}.png", floor),
        "vs held-out loss": plots.plot_loss_vs_probe(curves.main, figures_dir / f"claims_vs_loss{suffix}.png"),
        "sweep": plots.plot_sweep(sweep, figures_dir / f"claims_size_sweep{suffix}.png"),
    }
    if runs is not None and work is not None:
        unigram = unigram_entropy(data_prefix(work), str(tokenizer_dir(work)))["nats"] if has_dataset(work) else None
        figures["held-out loss vs tokens"] = plots.plot_loss_curves(
            an.held_out_losses(plan, runs, work), plan.global_batch * plan.seq_length, unigram,
            figures_dir / f"claims_loss{suffix}.png", reference=arm_of(reference_run(plan, None)))
    return figures


def _report(plan: Plan, runs: list[RunSpec], work: Path, paths: ExperimentPaths) -> None:
    from .results_page import write_results_page
    from .study.train_stage import finished_runs

    curves = an.load_curves(plan, runs, work)  # every probe JSON and event file read once per page
    figures = make_figures(plan, curves, Path(paths.figures_dir), runs, work)
    curves = curves.of_runs(plan, finished_runs(work, runs))  # the tables compare finished runs; figures show all
    throughput = [Path(path) for path in paths.throughput_json if Path(path).is_file()]
    status = {k: v for k, v in _load_status(work).items() if k != "report"}
    write_results_page(Path(paths.results_md), plan=plan, runs=runs, work_dir=work, curves=curves, figures=figures,
                       status=status, throughput_jsons=throughput, caveats=caveats(plan),
                       records=Path(paths.records) if paths.records else None)


def follow_probes(plan: Plan, runs: list[RunSpec], work: Path, paths: ExperimentPaths, keys: dict,
                  poll_s: float = 30.0) -> None:
    """Probe checkpoints as a concurrent training process writes them, until every run is done.

    Lets probing overlap training (``--stages probe report --follow`` beside ``--stages data train``);
    the page is rewritten after every probed checkpoint, and with records every run that is ready is sealed.
    """
    from .study.probe_stage import run_probe_stage
    from .study.train_stage import is_complete

    while True:
        finished, cpu = all(is_complete(work, run) for run in runs), _cpu_seconds()
        probed = run_probe_stage(plan, runs, work, paths.glue_dir, paths.probe_dir, limit=1,
                                 mteb_lite_dir=paths.mteb_lite_dir, corpus=paths.corpus)
        _save_status(work, _add_cpu(work, "probe", _cpu_seconds() - cpu))
        _note_session(paths.records)
        if probed:
            _seal(plan, runs, work, paths, keys)
            _run_stage("report", lambda: _report(plan, runs, work, paths), work, paths.records)
        elif finished:
            return
        else:
            time.sleep(poll_s)


def _seal(plan: Plan, runs: list[RunSpec], work: Path, paths: ExperimentPaths, keys: dict) -> None:
    """Seal every finished, fully probed run of ``runs`` in the records (none without records)."""
    if paths.records:
        from .sealing import seal_finished

        seal_finished(plan, runs, work, Path(paths.records), keys, _load_status(work))


def _restore(runs: list[RunSpec], work: Path, paths: ExperimentPaths, keys: dict) -> None:
    """Seed the work dir from the records (after the data stage, whose output the records are checked against)."""
    from .study.data_stage import has_dataset

    if paths.records and has_dataset(work):
        from .sealing import restore_runs

        _save_status(work, restore_runs(Path(paths.records), runs, work, keys, _load_status(work)))


def run_experiment(paths: ExperimentPaths, plan_name: str = "cpu", stages: list[str] | None = None,
                   follow: bool = False) -> dict:
    """Run the requested stages (default all); returns the final status dict.

    Training and probing go run by run (train BERT, probe it, rewrite the page, then the next run),
    so an interrupted experiment still has complete, reported comparisons for the runs it finished.
    ``follow=True`` (probe/report only) instead waits for checkpoints from a concurrent trainer.
    A changed plan or data in a used work dir is refused first (``stage_keys``); a stop signal ends the study
    with its stage recorded as stopped (``StudyStopped``, ``study.stopping``).
    """
    from .study.stage_keys import claim_work_dir, plan_keys

    plan, work = resolve_plan(plan_name), Path(paths.work_dir)
    _SESSION["label"] = paths.session
    work.mkdir(parents=True, exist_ok=True)
    runs, wanted = all_runs(plan), stages or list(STAGES)
    keys = plan_keys(plan, runs, paths.corpus, paths.glue_dir, paths.probe_dir, paths.mteb_lite_dir)
    claim_work_dir(work, keys, ["probe"] if follow else wanted)
    with stopping():
        _run_stages(plan, runs, wanted, work, paths, follow, keys)
    return _load_status(work)


def _run_stages(plan: Plan, runs: list[RunSpec], wanted: list[str], work: Path, paths: ExperimentPaths,
                follow: bool, keys: dict) -> None:
    """``run_experiment``'s stages, in order (see there)."""
    from .study.data_stage import data_prefix, run_data_stage, tokenizer_dir
    from .study.probe_stage import run_probe_stage
    from .study.train_stage import run_train_stage

    records = paths.records
    if follow:
        _restore(runs, work, paths, keys)
        follow_probes(plan, runs, work, paths, keys)
        return
    data_ok = "data" not in wanted or _run_stage("data", lambda: run_data_stage(plan, work, paths.corpus), work,
                                                 records)
    _restore(runs, work, paths, keys)
    for run in runs:
        if data_ok and "train" in wanted:
            _run_stage(f"train:{run.name}", lambda: run_train_stage(
                plan, [run], work, data_prefix(work), str(tokenizer_dir(work))), work, records)
        if "probe" in wanted:
            _run_stage(f"probe:{run.name}", lambda: run_probe_stage(
                plan, [run], work, paths.glue_dir, paths.probe_dir, mteb_lite_dir=paths.mteb_lite_dir,
                corpus=paths.corpus), work, records)
            _seal(plan, [run], work, paths, keys)
        if "report" in wanted:
            _run_stage("report", lambda: _report(plan, runs, work, paths), work, records)
