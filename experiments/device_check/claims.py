"""Stage 3: the claims study on one H200, in the stage's time. Equal-FLOPs bf16 pretraining, then frozen probes.

This is the claims study (``python -m experiments.claims``) with its ``h200`` plan (the CPU dry run: its
``toy`` plan), both in the library's plan format (``benchmarking/study/plans``): the same arms (the MLM
baseline, CrossBERT r=0.5 single view and complementary, the fastest complementary setting, the untrained
reference), shapes, probes and study stages (``benchmarking.study``: the data stage, one
``crossbert-pretrain`` process per arm, then the probe stage: HF export, frozen features, linear and
k-NN probes on the full GLUE dev sets, MTEB-lite scored by mteb). What differs is the budget: a 330 s
stage cannot run the plan's step counts, so the steps come from the time it has.

Equal compute: the arms' speeds are measured first by the interleaved throughput benchmark at the
claims shape; every arm then gets the same model-FLOPs budget F, chosen so that all arms together
train for ``train_seconds``: F = T / sum_i 1 / (flops_i * samples_per_s_i). Steps per arm are
F / (flops per sample * batch). The toy dry run measures the speeds the same way but uses a fixed
budget of a few BERT steps, so its length does not depend on the CPU's load. Probing runs in
parallel processes (sklearn is CPU-bound), which split the checkpoints through the probe stage's
lock files. A second seed runs only when the first left time for it inside the stage budget; the
result says how many seeds ran.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from megatron_crossbert.benchmarking.study.plan import (ModelShape, Plan, RunSpec, arm_flops_per_sample, arm_of,
                                                        arm_run, chosen_arms, flops_per_sample, reference_run,
                                                        resolve_plan, run_flops_per_sample)

from .plan import GLUE_TASKS, DeviceCheckConfig, config_from_dict, module_env, stage
from .stage_io import log_tails, save_partial

BENCH_ROWS = {"bert": "bert", "crossbert-single": "crossbert r=0.5 single", "crossbert-compl": "crossbert r=0.5 compl",
              "crossbert-fast": "crossbert r=0.75 compl dec h/2x1L"}
"""The ``crossbert-bench throughput`` row that measures each arm's speed (the benchmark's setting names)."""


def glue_tasks(config: DeviceCheckConfig) -> list[str]:
    """All five tasks on the device (each must exist); the toy run uses those its fixture has."""
    present = [task for task in GLUE_TASKS if (Path(config.glue_dir) / task / "dev.tsv").is_file()]
    missing = sorted(set(GLUE_TASKS) - set(present))
    if missing and not config.toy:
        raise FileNotFoundError(f"{config.glue_dir}: missing GLUE dev sets {missing} (run device_check prepare)")
    if not present:
        raise FileNotFoundError(f"{config.glue_dir}: no GLUE dev.tsv of {list(GLUE_TASKS)}")
    return present


def named_plan(config: DeviceCheckConfig) -> Plan:
    """The claims study's plan this stage runs: ``h200`` on the device, ``toy`` for the CPU dry run."""
    return resolve_plan("toy" if config.toy else "h200")


def claims_plan(config: DeviceCheckConfig, seed: int) -> Plan:
    """The named plan for one seed of this stage: one checkpoint per run at its end (``arm_runs`` sets the
    steps from the time budget), GLUE only; the CLI's ``--probe-max-train`` overrides the plan's rows.
    The device probes the full GLUE dev sets; the toy run subsamples them like the train sets."""
    plan = named_plan(config)
    rows = config.claims.probe_max_train or plan.probe_max_train
    return dataclasses.replace(plan, seed=seed, seeds=[], sample_steps=1, save_interval=1, sweep_shapes=[],
                               sweep_steps=1, probe_max_train=rows, probe_max_test=rows if config.toy else None,
                               glue_tasks=glue_tasks(config), jsonl_tasks=[], eval_iters=0)


def calibrate(config: DeviceCheckConfig, plan: Plan, work: Path) -> dict[str, float]:
    """Samples/s of each trained arm at the claims shape, by the interleaved throughput benchmark (its row of
    ``BENCH_ROWS``; the MLM reference row is always measured)."""
    from megatron_crossbert.benchmarking.study.commands import module_argv, run_logged

    out = work / "calibration.json"
    rows = [BENCH_ROWS[arm.name] for arm in chosen_arms(plan) if arm.name != "bert"]
    argv = module_argv("megatron_crossbert.cli.bench", "throughput", "--size", "tiny" if config.toy else "claims",
                       "--precision", "fp32" if config.toy else "bf16", "--steps", "1" if config.toy else "6",
                       "--warmup", "0" if config.toy else "3", "--clock", "wall", "--only", *rows, "--out", str(out))
    run_logged(argv, work, "calibration")
    measured = {r["name"]: r["samples_per_s"] for r in json.loads(out.read_text())["results"]}
    return {arm.name: measured[BENCH_ROWS[arm.name]] for arm in chosen_arms(plan) if BENCH_ROWS[arm.name] in measured}


def flops_budget(plan: Plan, rates: dict[str, float], train_seconds: float) -> float:
    """Model FLOPs per arm such that all arms together train for ``train_seconds`` at ``rates``."""
    seconds_per_flop = sum(1.0 / (arm_flops_per_sample(plan, arm) * rates[arm.name]) for arm in chosen_arms(plan))
    return train_seconds / seconds_per_flop


def toy_flops_budget(plan: Plan, bert_steps: int = 2) -> float:
    """The dry run's budget: BERT's FLOPs for a few steps (a timing-based one would vary with the CPU's load)."""
    return flops_per_sample(plan, "bert", 0.5, False, plan.main_shape) * plan.global_batch * bert_steps


def arm_runs(plan: Plan, budget_flops: float) -> list[RunSpec]:
    """One run per arm for ``plan.seed``: the trained arms to ``budget_flops``, then the reference."""
    runs = []
    for arm in chosen_arms(plan):
        steps = max(1, round(budget_flops / (arm_flops_per_sample(plan, arm) * plan.global_batch)))
        runs.append(arm_run(plan, arm, plan.seed, steps, steps))
    return runs + ([reference_run(plan, plan.seed)] if plan.reference else [])


def train_arms(plan: Plan, runs: list[RunSpec], work: Path) -> dict[str, str]:
    """Train each run (``crossbert-pretrain``); a failing arm is recorded and the next still trains."""
    from megatron_crossbert.benchmarking.study.data_stage import data_prefix, tokenizer_dir
    from megatron_crossbert.benchmarking.study.train_stage import run_train_stage

    errors = {}
    for run in runs:
        start = time.time()
        try:
            run_train_stage(plan, [run], work, data_prefix(work), str(tokenizer_dir(work)))
        except Exception as err:  # StageError names the command; its log's tail travels with the error
            tails = log_tails(work / "logs", start, f"train-{run.name}.log")
            errors[run.name] = f"{type(err).__name__}: {err}\n" + "\n".join(tails.values())
            print(f"[claims] training {run.name} failed: {errors[run.name]}", flush=True)
    return errors


def probe_in_parallel(config: DeviceCheckConfig, work: Path, seed: int) -> list[int]:
    """Start ``probe_workers`` processes over this seed's checkpoints; returns their exit codes."""
    workers = 1 if config.toy else config.claims.probe_workers  # toy: one process fewer to start
    config_path = work / "claims_config.json"
    config_path.write_text(json.dumps(dataclasses.asdict(config)))
    threads = str(max(1, (os.cpu_count() or 1) // workers))
    env = module_env(OMP_NUM_THREADS=threads, TQDM_DISABLE="1", TOKENIZERS_PARALLELISM="false")
    argv = [sys.executable, "-m", f"{__package__}.claims", str(config_path), str(seed)]
    procs = []
    for index in range(workers):
        log = (work / "logs" / f"probe-s{seed}-{index}.log").open("a")
        procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env))
    return [proc.wait() for proc in procs]


def probe_worker(config: DeviceCheckConfig, seed: int) -> int:
    """One probing process: probe pending checkpoints of this seed's runs (lock files split them)."""
    from megatron_crossbert.benchmarking.study.probe_stage import run_probe_stage

    plan = claims_plan(config, seed)
    runs = [RunSpec(**{**raw, "shape": ModelShape(**raw["shape"])})
            for raw in json.loads((Path(config.work_dir) / f"arms-s{seed}.json").read_text())]
    return run_probe_stage(plan, runs, Path(config.work_dir), config.glue_dir, probe_dir="",
                           mteb_lite_dir=config.mteb_lite_dir)


def arm_scores(work: Path, run: RunSpec) -> dict | None:
    """Task scores, GLUE average and MTEB-lite average (with its per-task scores) of the run's final
    checkpoint, or None if it was not probed."""
    from megatron_crossbert.benchmarking.study.probe_stage import load_probe_results

    report = load_probe_results(work, run).get(run.train_steps)
    if report is None:
        return None
    tasks = {name: entry["score"] for name, entry in report["tasks"].items()}
    mteb = report.get("mteb_lite") or {}
    return {"tasks": tasks, "glue_average": report["summary"]["glue_average"],
            "mteb_lite_average": mteb.get("average"), "mteb_lite": mteb.get("tasks", {})}


def _arm_records(plan: Plan, runs: list[RunSpec], work: Path, rates: dict[str, float],
                 errors: dict[str, str]) -> list[dict]:
    """Per run: steps, samples, model FLOPs, predicted and measured training seconds, error, scores."""
    from megatron_crossbert.benchmarking.study.commands import read_command_log

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


def run_seed(config: DeviceCheckConfig, work: Path, seed: int, budget_flops: float, rates: dict[str, float],
             progress) -> dict:
    """Train and probe every arm of one seed; ``progress(partial)`` is called once training is done."""
    plan = claims_plan(config, seed)
    runs = arm_runs(plan, budget_flops)
    (work / f"arms-s{seed}.json").write_text(json.dumps([dataclasses.asdict(run) for run in runs]))
    start = time.time()
    errors = train_arms(plan, runs, work)
    result = {"seed": seed, "train_s": round(time.time() - start, 1), "probe_s": None,
              "arms": _arm_records(plan, runs, work, rates, errors)}
    progress(result)
    codes = probe_in_parallel(config, work, seed)
    result.update(probe_s=round(time.time() - start - result["train_s"], 1), probe_exit_codes=codes,
                  arms=_arm_records(plan, runs, work, rates, errors))
    if any(codes):
        result["probe_logs"] = log_tails(work / "logs", start, f"probe-s{seed}-*.log")
    return result


def _plan_facts(plan: Plan, budget: float, rates: dict[str, float]) -> dict:
    return {"shape": dataclasses.asdict(plan.main_shape), "seq_length": plan.seq_length,
            "global_batch": plan.global_batch, "lr": plan.lr, "warmup": plan.warmup, "precision": plan.precision,
            "vocab_size": plan.vocab_size, "glue_tasks": plan.glue_tasks, "probe_max_train": plan.probe_max_train,
            "mteb_lite_max_test": plan.mteb_lite_max_test,
            "probe_max_test": plan.probe_max_test, "budget_flops_per_arm": budget, "calibration_samples_per_s": rates}


def run_claims(config: DeviceCheckConfig) -> dict:
    """Stage 3: data, calibration, then each seed while the stage budget allows; ``ok`` if all arms scored."""
    from megatron_crossbert.benchmarking.study.data_stage import run_data_stage

    start, root = time.time(), Path(config.work_dir)
    work = root / "claims"
    work.mkdir(parents=True, exist_ok=True)
    config = dataclasses.replace(config, work_dir=str(work))
    seeds = config.claims.seeds or named_plan(config).seeds
    plan = claims_plan(config, seeds[0])
    data = run_data_stage(plan, work, config.corpus)
    rates = calibrate(config, plan, work)
    budget = toy_flops_budget(plan) if config.toy else flops_budget(plan, rates, config.claims.train_seconds)
    result = {"plan": _plan_facts(plan, budget, rates), "data": data["subset"], "seeds": [], "skipped_seeds": []}
    save_partial(root, "claims", result)
    for seed in seeds:
        elapsed = time.time() - start
        needed = max((s["train_s"] + s["probe_s"] for s in result["seeds"]), default=0.0)
        if result["seeds"] and elapsed + needed > stage("claims").budget(config.toy):
            result["skipped_seeds"].append(seed)
            continue
        result["seeds"].append(run_seed(config, work, seed, budget, rates, lambda partial: save_partial(
            root, "claims", {**result, "seeds": [*result["seeds"], partial]})))
        save_partial(root, "claims", result)
    result["ok"] = all(arm["scores"] is not None and not arm["error"]
                       for seed in result["seeds"] for arm in seed["arms"])
    return result


if __name__ == "__main__":
    sys.exit(0 if probe_worker(config_from_dict(json.loads(Path(sys.argv[1]).read_text())), int(sys.argv[2])) >= 0
             else 1)
