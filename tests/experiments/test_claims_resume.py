"""A study killed outright (SIGKILL, as a session's hard end does) at any stage resumes from its own records with
the same command: a tiny WSD plan is killed during its data stage, during a training run and during probing, then
rerun to the end; every run reaches its steps with its held-out losses, every curve point is probed once, and
nothing is reported interrupted or failed.

The same study then outlives its work dir through its records (``--records``): the records as they were at the
kill during training (the first run sealed, the second not) go to a fresh work dir (a new session's machine),
and the same command finishes the study there, training only the run that was not sealed; the sealed run comes
back from the records with its probes and held-out losses (``test_claims_records`` checks the refusals).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from experiments.claims.__main__ import main
from experiments.claims.study import records as rec
from experiments.claims.study.commands import read_command_log
from experiments.claims.study.plan import load_plan
from experiments.claims.plan import all_runs
from experiments.claims.study.probe_stage import load_probe_results, probe_path, targets
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


def _argv(tmp_path, plan_file, work, records) -> list[str]:
    return ["--plan", str(plan_file), "--work-dir", str(work), "--corpus", str(tmp_path / "corpus.jsonl"),
            "--glue-dir", str(tmp_path / "glue"), "--probe-dir", str(tmp_path / "none"), "--mteb-lite-dir", "none",
            "--threads", "1", "--records", str(records), "--results-md", str(tmp_path / "results.md"),
            "--figures-dir", str(tmp_path / "figures"), "--throughput-json", str(tmp_path / "absent.json")]


def _pretrained(work) -> list[str]:
    """The runs this work dir's commands trained (their ``--config`` file names)."""
    return [entry["argv"][-1].rsplit("/", 1)[-1] for entry in read_command_log(work)
            if "cli.pretrain" in " ".join(entry["argv"])]


def _check_finished(work, plan, runs) -> None:
    """Every run reached its steps with a held-out loss at every save and a probe at every target."""
    status = _status(work)
    assert not [v for v in status.values() if isinstance(v, str) and not v.startswith("done")], status
    for run in runs:
        assert is_complete(work, run), run.name
        losses = valid_losses(work, run)
        assert sorted(losses) == list(range(run.save_interval, run.train_steps + 1, run.save_interval)), run.name
        for iteration, _ in targets(work, run, plan):
            assert probe_path(work, run, iteration).is_file(), (run.name, iteration)


@pytest.mark.e2e
def test_a_study_killed_in_each_stage_resumes_to_the_end_and_on_a_new_machine_from_its_records(tmp_path):
    _write_fixtures(tmp_path)
    plan_file, work, records = tmp_path / "tinywsd.yaml", tmp_path / "work", tmp_path / "records"
    plan_file.write_text(PLAN)
    argv = _argv(tmp_path, plan_file, work, records)
    plan = load_plan(plan_file)
    runs = all_runs(plan)
    bert, compl = (next(run for run in runs if run.name == name) for name in ("bert-s1", "crossbert-compl-s1"))
    _kill_when(argv, lambda: _status(work).get("data") == "running")
    _kill_when(argv, lambda: rec.is_sealed(records, bert.name) and (work / "runs" / compl.name / "iter_0000002").is_dir())
    assert not rec.is_sealed(records, compl.name)
    at_kill = shutil.copytree(records, tmp_path / "records-at-kill")  # what a session ended here leaves behind
    _kill_when(argv, lambda: str(_status(work).get(f"probe:{compl.name}", "")) == "running")
    assert main(argv) == 0
    _check_finished(work, plan, runs)
    assert sorted(it for it, _ in targets(work, compl, plan)) == [2, 4, 8]  # probe_at (with the budget points)
    assert "<!-- claims-tinywsd:start" in (tmp_path / "results.md").read_text()

    fresh = tmp_path / "new-machine"  # only the records of the session killed in training are left
    assert main(_argv(tmp_path, plan_file, fresh, at_kill)) == 0
    assert not (fresh / "logs" / f"train-{bert.name}.log").exists()  # not trained again: no log, no checkpoint
    assert not list((fresh / "runs" / bert.name).glob("iter_*"))
    assert (fresh / "logs" / f"train-{compl.name}.log").is_file()
    assert _pretrained(fresh).count("bert-s1.yaml") == 1  # its first session's command, restored for the page
    assert load_probe_results(fresh, bert) == load_probe_results(work, bert)
    _check_finished(fresh, plan, runs)
    assert all(rec.is_sealed(at_kill, run.name) for run in runs)
    assert _status(fresh)["cpu_seconds:train:bert-s1"] > 0  # the first session's cost, restored
    summary = rec.sessions_summary(at_kill)
    assert summary["invocations"] >= 2 and summary["cpu_hours"] > 0
    page = (tmp_path / "results.md").read_text()
    assert f"--records {at_kill.relative_to(tmp_path.parent)} " in page and str(tmp_path.parent) not in page
