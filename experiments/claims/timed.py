"""The claims study at equal model FLOPs inside a time budget: ``python -m experiments.claims --train-seconds S``.

What a lent GPU runs (the device check's claims stage calls this command with the ``h200`` plan; its CPU dry
run with ``toy --dry-run``): the plan's arms (the MLM baseline, CrossBERT r=0.5 single view and complementary,
the fastest complementary setting, the untrained reference), shapes and study stages (``study/``: the data
stage, one ``crossbert-pretrain`` process per arm, then the probe stage: HF export, frozen features, linear
and k-NN probes on the full GLUE dev sets, MTEB-lite scored by mteb). What differs from a plan's own run is
the budget: a few minutes cannot run the plan's step counts, so the steps come from the time given.

Equal compute: the arms' speeds are measured first by the interleaved throughput benchmark at the claims
shape; every arm then gets the same model-FLOPs budget F, chosen so that all arms together train for
``train_seconds``: F = T / sum_i 1 / (flops_i * samples_per_s_i). Steps per arm are F / (flops per sample *
batch). A dry run measures the speeds the same way but uses a fixed budget of a few BERT steps, so its length
does not depend on the CPU's load. Probing runs in parallel processes (sklearn is CPU-bound), which split the
checkpoints through the probe stage's lock files. A further seed runs only when the ones before left time for
it inside ``time_budget``; the result says how many seeds ran. The result JSON is rewritten after every step
(training done, probes done), so a run stopped at its deadline leaves what it measured.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from megatron_crossbert.benchmarking.report import fmt, markdown_table
from megatron_crossbert.fsutil import atomic_write_text

from .study.commands import module_argv, read_command_log, run_logged
from .study.plan import (ModelShape, Plan, RunSpec, arm_flops_per_sample, arm_of, arm_run, chosen_arms,
                         flops_per_sample, reference_run, resolve_plan, run_flops_per_sample)
from .study.stats import mean_interval
from .study.stopping import stop_requested, stopping

REPO_ROOT = Path(__file__).resolve().parents[2]
BENCH_ROWS = {"bert": "bert", "crossbert-single": "crossbert r=0.5 single", "crossbert-compl": "crossbert r=0.5 compl",
              "crossbert-fast": "crossbert r=0.75 compl dec h/2x1L"}
"""The ``crossbert-bench throughput`` row that measures each arm's speed (the benchmark's setting names)."""


@dataclass
class TimedStudy:
    """One equal-FLOPs run of the claims study inside a time budget."""

    plan: str
    """A named plan or a plan file (the arms, shapes, batch, optimizer and probe settings)."""
    work_dir: str
    """Tokenizer, data, checkpoints, probe results and logs."""
    corpus: str
    glue_dir: str
    result_json: str
    """Rewritten after every step: what a stopped run measured survives it."""
    train_seconds: float
    """Wall time all arms' training together should take; sets the shared FLOPs budget."""
    time_budget: float | None = None
    """Wall seconds for the whole run: a seed after the first runs only if the slowest one so far still fits."""
    mteb_lite_dir: str | None = None
    seeds: list[int] = field(default_factory=list)
    """Seeds in order (empty: the plan's)."""
    probe_max_train: int | None = None
    """Train rows per probe task (None: the plan's; dev sets are used in full, except in a dry run)."""
    probe_workers: int = 4
    dry_run: bool = False
    """The CPU dry run: a fixed budget of two BERT steps, a tiny fp32 calibration, subsampled dev sets."""

    def __post_init__(self) -> None:
        if self.train_seconds <= 0 or self.probe_workers < 1 or (self.time_budget or 1) <= 0:
            raise ValueError("--train-seconds and --time-budget must be > 0, --probe-workers >= 1")
        if self.probe_max_train is not None and self.probe_max_train < 2:
            raise ValueError(f"--probe-max-train must be >= 2, got {self.probe_max_train}")
        if len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"--seeds must be distinct, got {self.seeds}")


def glue_tasks(study: TimedStudy, plan: Plan) -> list[str]:
    """The plan's GLUE tasks, each of which must have a dev set (a dry run uses those its fixture has)."""
    present = [task for task in plan.glue_tasks if (Path(study.glue_dir) / task / "dev.tsv").is_file()]
    missing = sorted(set(plan.glue_tasks) - set(present))
    if missing and not study.dry_run:
        raise FileNotFoundError(f"{study.glue_dir}: missing GLUE dev sets {missing}")
    if not present:
        raise FileNotFoundError(f"{study.glue_dir}: no GLUE dev.tsv of {list(plan.glue_tasks)}")
    return present


def seed_plan(study: TimedStudy, seed: int) -> Plan:
    """The plan for one seed: one checkpoint per run at its end (``arm_runs`` sets the steps from the budget),
    GLUE only; ``probe_max_train`` overrides the plan's rows; a dry run subsamples the dev sets too."""
    plan = resolve_plan(study.plan)
    rows = study.probe_max_train or plan.probe_max_train
    return dataclasses.replace(plan, seed=seed, seeds=[], sample_steps=1, save_interval=1, sweep_shapes=[],
                               sweep_steps=1, probe_max_train=rows, probe_max_test=rows if study.dry_run else None,
                               glue_tasks=glue_tasks(study, plan), jsonl_tasks=[], eval_iters=0)


def calibrate(study: TimedStudy, plan: Plan, work: Path) -> dict[str, float]:
    """Samples/s of each trained arm at the claims shape, by the interleaved throughput benchmark (its row of
    ``BENCH_ROWS``; the MLM reference row is always measured)."""
    out = work / "calibration.json"
    rows = [BENCH_ROWS[arm.name] for arm in chosen_arms(plan) if arm.name != "bert"]
    dry = study.dry_run
    argv = module_argv("megatron_crossbert.cli.bench", "throughput", "--size", "tiny" if dry else "claims",
                       "--precision", "fp32" if dry else "bf16", "--steps", "1" if dry else "6",
                       "--warmup", "0" if dry else "3", "--clock", "wall", "--only", *rows, "--out", str(out))
    run_logged(argv, work, "calibration")
    measured = {r["name"]: r["samples_per_s"] for r in json.loads(out.read_text())["results"]}
    return {arm.name: measured[BENCH_ROWS[arm.name]] for arm in chosen_arms(plan) if BENCH_ROWS[arm.name] in measured}


def flops_budget(plan: Plan, rates: dict[str, float], train_seconds: float) -> float:
    """Model FLOPs per arm such that all arms together train for ``train_seconds`` at ``rates``."""
    seconds_per_flop = sum(1.0 / (arm_flops_per_sample(plan, arm) * rates[arm.name]) for arm in chosen_arms(plan))
    return train_seconds / seconds_per_flop


def dry_run_flops_budget(plan: Plan, bert_steps: int = 2) -> float:
    """The dry run's budget: BERT's FLOPs for a few steps (a timing-based one would vary with the CPU's load)."""
    return flops_per_sample(plan, "bert", 0.5, False, plan.main_shape) * plan.global_batch * bert_steps


def arm_runs(plan: Plan, budget_flops: float) -> list[RunSpec]:
    """One run per arm for ``plan.seed``: the trained arms to ``budget_flops``, then the reference."""
    runs = []
    for arm in chosen_arms(plan):
        steps = max(1, round(budget_flops / (arm_flops_per_sample(plan, arm) * plan.global_batch)))
        runs.append(arm_run(plan, arm, plan.seed, steps, steps))
    return runs + ([reference_run(plan, plan.seed)] if plan.reference else [])


def _log_tail(work: Path, name: str, lines: int = 30) -> str:
    path = work / "logs" / name
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.is_file() else ""


def train_arms(plan: Plan, runs: list[RunSpec], work: Path) -> dict[str, str]:
    """Train each run (``crossbert-pretrain``); a failing arm is recorded and the next still trains."""
    from .study.data_stage import data_prefix, tokenizer_dir
    from .study.train_stage import run_train_stage

    errors = {}
    for run in runs:
        try:
            run_train_stage(plan, [run], work, data_prefix(work), str(tokenizer_dir(work)))
        except Exception as err:  # StageError names the command; its log's tail travels with the error
            errors[run.name] = f"{type(err).__name__}: {err}\n" + _log_tail(work, f"train-{run.name}.log")
            print(f"[claims] training {run.name} failed: {errors[run.name]}", flush=True)
        _stop_if_asked()
    return errors


def _stop_if_asked() -> None:
    """Raise the stop a signal asked for while a child command ran (``study.stopping``): no next arm starts."""
    stop = stop_requested()
    if stop is not None:
        raise stop


def probe_in_parallel(study: TimedStudy, work: Path, seed: int) -> list[int]:
    """Start ``probe_workers`` processes over this seed's checkpoints; returns their exit codes."""
    workers = 1 if study.dry_run else study.probe_workers  # dry run: one process fewer to start
    settings = work / "timed_study.json"
    settings.write_text(json.dumps(dataclasses.asdict(study)))
    threads = str(max(1, (os.cpu_count() or 1) // workers))
    path = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": threads,
           "TQDM_DISABLE": "1", "TOKENIZERS_PARALLELISM": "false"}
    argv = [sys.executable, "-m", __name__, str(settings), str(seed)]
    procs = []
    try:
        for index in range(workers):
            log = (work / "logs" / f"probe-s{seed}-{index}.log").open("a")
            procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env))
        return [proc.wait() for proc in procs]
    except BaseException:  # a stop: the workers' checkpoints are probed again by a rerun (their writes are atomic)
        for proc in procs:
            proc.terminate()
        raise


def probe_worker(study: TimedStudy, seed: int) -> int:
    """One probing process: probe pending checkpoints of this seed's runs (lock files split them)."""
    from .study.probe_stage import run_probe_stage

    plan = seed_plan(study, seed)
    runs = [RunSpec(**{**raw, "shape": ModelShape(**raw["shape"])})
            for raw in json.loads((Path(study.work_dir) / f"arms-s{seed}.json").read_text())]
    return run_probe_stage(plan, runs, Path(study.work_dir), study.glue_dir, probe_dir="",
                           mteb_lite_dir=study.mteb_lite_dir)


def arm_scores(work: Path, run: RunSpec) -> dict | None:
    """Task scores, GLUE average and MTEB-lite average (with its per-task scores) of the run's final
    checkpoint, or None if it was not probed."""
    from .study.probe_stage import load_probe_results

    report = load_probe_results(work, run).get(run.train_steps)
    if report is None:
        return None
    mteb = report.get("mteb_lite") or {}
    return {"tasks": {name: entry["score"] for name, entry in report["tasks"].items()},
            "glue_average": report["summary"]["glue_average"], "mteb_lite_average": mteb.get("average"),
            "mteb_lite": mteb.get("tasks", {})}


def _arm_records(plan: Plan, runs: list[RunSpec], work: Path, rates: dict[str, float],
                 errors: dict[str, str]) -> list[dict]:
    """Per run: steps, samples, model FLOPs, predicted and measured training seconds, error, scores."""
    seconds = {Path(e["log"]).stem.removeprefix("train-"): e["seconds"] for e in read_command_log(work)}
    records = []
    for run in runs:
        samples = run.train_steps * plan.global_batch
        per_sample = run_flops_per_sample(plan, run)
        records.append({"run": run.name, "arm": arm_of(run), "seed": plan.seed, "steps": run.train_steps,
                        "samples": samples, "model_flops": per_sample * samples,
                        "predicted_train_s": samples / rates[arm_of(run)] if arm_of(run) in rates else None,
                        "process_s": seconds.get(run.name), "error": errors.get(run.name),
                        "scores": arm_scores(work, run)})
    return records


def run_seed(study: TimedStudy, work: Path, seed: int, budget_flops: float, rates: dict[str, float],
             progress) -> dict:
    """Train and probe every arm of one seed; ``progress(partial)`` is called once training is done."""
    plan = seed_plan(study, seed)
    runs = arm_runs(plan, budget_flops)
    (work / f"arms-s{seed}.json").write_text(json.dumps([dataclasses.asdict(run) for run in runs]))
    start = time.time()
    errors = train_arms(plan, runs, work)
    result = {"seed": seed, "train_s": round(time.time() - start, 1), "probe_s": None,
              "arms": _arm_records(plan, runs, work, rates, errors)}
    progress(result)
    _stop_if_asked()
    codes = probe_in_parallel(study, work, seed)
    result.update(probe_s=round(time.time() - start - result["train_s"], 1), probe_exit_codes=codes,
                  arms=_arm_records(plan, runs, work, rates, errors))
    if any(codes):
        result["probe_logs"] = {f"probe-s{seed}-{i}.log": _log_tail(work, f"probe-s{seed}-{i}.log")
                                for i, code in enumerate(codes) if code}
    return result


def _plan_facts(plan: Plan, budget: float, rates: dict[str, float]) -> dict:
    return {"name": plan.name, "shape": dataclasses.asdict(plan.main_shape), "seq_length": plan.seq_length,
            "global_batch": plan.global_batch, "lr": plan.lr, "warmup": plan.warmup, "precision": plan.precision,
            "vocab_size": plan.vocab_size, "glue_tasks": plan.glue_tasks, "probe_max_train": plan.probe_max_train,
            "mteb_lite_max_test": plan.mteb_lite_max_test,
            "probe_max_test": plan.probe_max_test, "budget_flops_per_arm": budget, "calibration_samples_per_s": rates}


def _save(study: TimedStudy, result: dict) -> None:
    """The result as it stands, with its table, atomically (a reader never sees half a file)."""
    atomic_write_text(study.result_json, json.dumps({**result, "markdown": timed_markdown(result)}, indent=1) + "\n")


def run_timed(study: TimedStudy) -> dict:
    """Data, calibration, then each seed while the time budget allows; ``ok`` if every arm scored."""
    with stopping():  # a stop signal reaches the running trainer, which saves; no later arm or seed starts
        return _run_timed(study)


def _run_timed(study: TimedStudy) -> dict:
    from .study.data_stage import run_data_stage

    start, work = time.time(), Path(study.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    seeds = study.seeds or resolve_plan(study.plan).seeds
    plan = seed_plan(study, seeds[0])
    data = run_data_stage(plan, work, study.corpus)
    rates = calibrate(study, plan, work)
    _stop_if_asked()
    budget = dry_run_flops_budget(plan) if study.dry_run else flops_budget(plan, rates, study.train_seconds)
    result = {"plan": _plan_facts(plan, budget, rates), "data": data["subset"], "seeds": [], "skipped_seeds": []}
    _save(study, result)
    for seed in seeds:
        needed = max((s["train_s"] + s["probe_s"] for s in result["seeds"]), default=0.0)
        if result["seeds"] and study.time_budget and time.time() - start + needed > study.time_budget:
            result["skipped_seeds"].append(seed)
            continue
        result["seeds"].append(run_seed(study, work, seed, budget, rates, lambda partial: _save(
            study, {**result, "seeds": [*result["seeds"], partial]})))
        _save(study, result)
    result["ok"] = all(arm["scores"] is not None and not arm["error"]
                       for seed in result["seeds"] for arm in seed["arms"])
    _save(study, result)
    return result


def _mean_spread(values: list[float]) -> str:
    """Mean ± the 95% Student-t half-width over the seeds (``study.stats``)."""
    interval = mean_interval(values)
    return "—" if interval is None else interval.text()


def timed_rows(result: dict) -> list[list[str]]:
    """One row per arm: each task's score, the GLUE and MTEB-lite averages, mean ± 95% interval over seeds."""
    tasks = result["plan"]["glue_tasks"]
    arms = [arm for seed in result["seeds"] for arm in seed["arms"]]
    rows = []
    for name in dict.fromkeys(arm["arm"] for arm in arms):
        mine = [arm for arm in arms if arm["arm"] == name]
        scored = [arm["scores"] for arm in mine if arm["scores"]]
        cells = [_mean_spread([s["tasks"][t] for s in scored if t in s["tasks"]]) for t in tasks]
        errors = ("; ".join(arm["error"].splitlines()[0] for arm in mine if arm["error"])
                  or ("" if scored else "not probed"))
        mteb = [s["mteb_lite_average"] for s in scored if s.get("mteb_lite_average") is not None]
        process = [a["process_s"] for a in mine]
        rows.append([name, fmt(mine[0]["steps"], 0), f"{mine[0]['model_flops']:.3g}",
                     fmt(sum(process) / len(process) if all(process) else None, 0),
                     *cells, _mean_spread([s["glue_average"] for s in scored]), _mean_spread(mteb), errors or "ok"])
    return rows


def _mteb_folders(result: dict) -> str:
    """The MTEB-lite folders the timed run's arms were scored on."""
    folders = {name for seed in result["seeds"] for arm in seed["arms"]
               for name in ((arm.get("scores") or {}).get("mteb_lite") or {})}
    return ", ".join(sorted(folders)) or "no folder"


def timed_markdown(result: dict) -> str:
    """The equal-compute table of a timed run, with the settings it ran under."""
    plan, seeds = result["plan"], [s["seed"] for s in result["seeds"]]
    shape = plan["shape"]
    head = (f"Equal compute: {plan['budget_flops_per_arm']:.3g} model FLOPs per trained arm, "
            f"{plan['precision']}, h={shape['hidden_size']}, {shape['num_layers']} layers, L={plan['seq_length']}, "
            f"batch {plan['global_batch']}, lr {plan['lr']} constant after {plan['warmup']} warm-up steps. Frozen "
            f"mean-pooled probes, {plan['probe_max_train']} train rows per task, dev sets "
            f"{'in full' if plan['probe_max_test'] is None else 'subsampled'}. MTEB-lite avg: mteb's main score "
            f"over {_mteb_folders(result)} (`crossbert-mteb`'s protocol), test sets "
            f"{'in full' if plan.get('mteb_lite_max_test') is None else 'subsampled'}. "
            f"{'One seed' if len(seeds) == 1 else f'{len(seeds)} seeds (mean ± 95% interval)'}: {seeds}"
            + (f"; seeds {result['skipped_seeds']} skipped for lack of time." if result["skipped_seeds"] else "."))
    headers = ["arm", "steps", "model FLOPs", "train process s", *plan["glue_tasks"], "GLUE avg", "MTEB-lite avg",
               "status"]
    return head + "\n\n" + markdown_table(headers, timed_rows(result))


if __name__ == "__main__":  # a probe worker: python -m experiments.claims.timed SETTINGS_JSON SEED
    sys.exit(0 if probe_worker(TimedStudy(**json.loads(Path(sys.argv[1]).read_text())), int(sys.argv[2])) >= 0
             else 1)
