"""A study killed outright (SIGKILL, as a session's hard end does) at any stage resumes from its own records with
the same command: a tiny WSD plan is killed during its data stage, during a training run and during probing, then
rerun to the end; every run reaches its steps with its held-out losses, every curve point is probed once, and
nothing is reported interrupted or failed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from experiments.claims.__main__ import main
from experiments.claims.study.plan import load_plan
from experiments.claims.plan import all_runs
from experiments.claims.study.probe_stage import probe_path, targets
from experiments.claims.study.train_stage import is_complete, valid_losses
from tests.experiments.test_claims import _write_fixtures
from tests.support import REPO_ROOT

PLAN = """name: tinywsd
vocab_size: 512
tokenizer_docs: 500
corpus_bytes: 100000
seq_length: 32
global_batch: 4
micro_batch: 4
sample_steps: 8
save_interval: 2
lr: 0.002
warmup: 2
lr_decay_style: WSD
lr_wsd_decay_fraction: 0.25
hidden_dropout: 0.0
attention_dropout: 0.0
main_shape: {hidden_size: 32, num_layers: 1, num_attention_heads: 2}
sweep_shapes: []
sweep_steps: 8
probe_max_train: 40
probe_max_test: 20
probe_max_len: 32
probe_at: [2, 4, 8]
probe_knn: 0
glue_tasks: [SST-2]
jsonl_tasks: []
main_settings: [bert, crossbert-compl]
seeds: [1]
eval_iters: 1
split: "90,10,0"
"""


def _status(work) -> dict:
    path = work / "status.json"
    try:
        return json.loads(path.read_text()) if path.is_file() else {}
    except json.JSONDecodeError:  # read while being replaced
        return {}


def _kill_when(argv: list[str], ready, timeout: float = 240.0, module: str = "experiments.claims") -> None:
    """Start the study (or another command of it: ``module``) in its own process group and SIGKILL the whole
    group once ``ready()`` holds."""
    study = subprocess.Popen([sys.executable, "-m", module, *argv], cwd=REPO_ROOT,
                             start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + timeout
    try:
        while not ready():
            assert study.poll() is None, "the study ended before the kill point"
            assert time.time() < deadline, "the kill point was never reached"
            time.sleep(0.1)
    finally:
        os.killpg(study.pid, signal.SIGKILL)
        study.wait(timeout=60)


@pytest.mark.e2e
def test_a_study_killed_in_each_stage_resumes_to_the_end_with_the_same_command(tmp_path):
    corpus, glue = _write_fixtures(tmp_path)
    plan_file, work = tmp_path / "tinywsd.yaml", tmp_path / "work"
    plan_file.write_text(PLAN)
    argv = ["--plan", str(plan_file), "--work-dir", str(work), "--corpus", str(corpus), "--glue-dir", str(glue),
            "--probe-dir", str(tmp_path / "none"), "--mteb-lite-dir", "none", "--threads", "1",
            "--results-md", str(tmp_path / "results.md"), "--figures-dir", str(tmp_path / "figures"),
            "--throughput-json", str(tmp_path / "absent.json")]
    plan = load_plan(plan_file)
    runs = all_runs(plan)
    compl = next(run for run in runs if run.name == "crossbert-compl-s1")
    _kill_when(argv, lambda: _status(work).get("data") == "running")
    _kill_when(argv, lambda: (work / "runs" / compl.name / "iter_0000002").is_dir())
    _kill_when(argv, lambda: str(_status(work).get(f"probe:{compl.name}", "")) == "running")
    assert main(argv) == 0
    status = _status(work)
    assert not [v for v in status.values() if isinstance(v, str) and not v.startswith("done")], status
    for run in runs:
        assert is_complete(work, run), run.name
        losses = valid_losses(work, run)
        assert sorted(losses) == list(range(run.save_interval, run.train_steps + 1, run.save_interval)), run.name
        for iteration, _ in targets(work, run, plan):
            assert probe_path(work, run, iteration).is_file(), (run.name, iteration)
    assert sorted(it for it, _ in targets(work, compl, plan)) == [2, 4, 8]  # probe_at (with the budget points)
    assert "<!-- claims-tinywsd:start" in (tmp_path / "results.md").read_text()
