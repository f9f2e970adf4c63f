"""Several processes of one study split its work by lock files: a run or checkpoint a live process holds is
skipped, one whose owner died is taken over."""

from __future__ import annotations

import subprocess

from experiments.claims.study import train_stage
from experiments.claims.study.claims_lock import claim, release
from experiments.claims.study.plan import resolve_plan
from experiments.claims.plan import all_runs


def test_a_live_owner_keeps_its_lock_and_a_dead_ones_is_taken_over(tmp_path):
    lock = tmp_path / "runs" / "bert-s1.lock"
    owner = subprocess.Popen(["sleep", "30"])
    try:
        lock.parent.mkdir()
        lock.write_text(str(owner.pid))
        assert not claim(lock)
    finally:
        owner.kill()
        owner.wait()
    assert claim(lock) and claim(lock)  # taken over, and this process may take its own lock again
    release(lock)
    assert not lock.exists() and claim(lock)


def test_a_trainer_skips_the_runs_another_live_trainer_holds(tmp_path, monkeypatch):
    plan = resolve_plan("smoke")
    runs = all_runs(plan)[:2]
    trained = []
    monkeypatch.setattr(train_stage, "train_run", lambda plan, run, *args: trained.append(run.name))
    monkeypatch.setattr("megatron_crossbert.data.tokenizers.tokenizer.load_tokenizer",
                        lambda path: type("Tok", (), {"vocab_size": 64})())
    other = subprocess.Popen(["sleep", "30"])
    try:
        (tmp_path / "runs").mkdir()
        (tmp_path / "runs" / f"{runs[0].name}.lock").write_text(str(other.pid))
        train_stage.run_train_stage(plan, runs, tmp_path, "prefix", "tok")
    finally:
        other.kill()
        other.wait()
    assert trained == [runs[1].name]
    assert not (tmp_path / "runs" / f"{runs[1].name}.lock").exists()  # released after its run
