"""The claims study at equal FLOPs inside a time budget (``experiments/claims/timed.py``): the arithmetic that
the device check's claims stage relies on, without training anything."""

from __future__ import annotations

from pathlib import Path

import pytest

from experiments.claims.study.plan import run_flops_per_sample
from experiments.claims.timed import TimedStudy, arm_runs, flops_budget, seed_plan


def _glue(root: Path, tasks: tuple[str, ...]) -> Path:
    for task in tasks:
        (root / task).mkdir(parents=True)
        (root / task / "dev.tsv").write_text("sentence\tlabel\n")
    return root


def _study(glue_dir: Path, dry_run: bool = False) -> TimedStudy:
    return TimedStudy(plan="h200", work_dir="unused", corpus="unused", glue_dir=str(glue_dir),
                      result_json="unused", train_seconds=180.0, dry_run=dry_run)


def test_every_glue_task_of_the_plan_needs_its_dev_set(tmp_path):
    with pytest.raises(FileNotFoundError, match="no GLUE dev.tsv"):
        seed_plan(_study(tmp_path / "none", dry_run=True), 1234)
    with pytest.raises(FileNotFoundError, match="missing GLUE dev sets"):
        seed_plan(_study(_glue(tmp_path / "some", ("SST-2",))), 1234)
    assert seed_plan(_study(tmp_path / "some", dry_run=True), 1234).glue_tasks == ["SST-2"]


def test_equal_flops_budget_fills_the_training_time(tmp_path):
    claims = seed_plan(_study(_glue(tmp_path, ("CoLA", "SST-2", "MRPC", "STS-B", "RTE"))), 7)
    assert claims.precision == "bf16" and claims.probe_device == "cuda" and claims.probe_max_test is None
    rates = {"bert": 900.0, "crossbert-single": 1500.0, "crossbert-compl": 800.0, "crossbert-fast": 1700.0}
    budget = flops_budget(claims, rates, train_seconds=180.0)
    runs = arm_runs(claims, budget)
    assert [r.name for r in runs] == ["bert-s7", "crossbert-single-s7", "crossbert-compl-s7", "crossbert-fast-s7",
                                      "init-reference-s7"]
    trained = runs[:4]
    seconds = sum(r.train_steps * claims.global_batch / rates[r.name[:-3]] for r in trained)
    assert seconds == pytest.approx(180.0, rel=0.01)
    for run in trained:
        flops = run_flops_per_sample(claims, run)
        assert flops * run.train_steps * claims.global_batch == pytest.approx(budget, rel=0.01)
