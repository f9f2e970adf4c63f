"""A stop signal to a running study (SIGTERM from a batch system) is caught: the running child command gets it
and finishes (a trainer saves its stop checkpoint), and ``status.json`` says the stage was stopped by the
signal instead of "running" forever; the study exits with 128 + the signal number. A stage whose process was
killed outright (SIGKILL) is reported as interrupted by the next reader."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from tests.support import REPO_ROOT

SCRIPT = """
import sys
from pathlib import Path
from experiments.claims import pipeline
from experiments.claims.study.commands import run_logged
try:
    from experiments.claims.study.stopping import StudyStopped, stopping
except ImportError:  # a version without stop handling: the signal's default action
    from contextlib import nullcontext as stopping
    StudyStopped = KeyboardInterrupt

work = Path(sys.argv[1])
if len(sys.argv) > 2:  # --exit-duration-in-mins
    from experiments.claims.study.stopping import exit_after
    exit_after(float(sys.argv[2]))
child = "import signal, sys, time; signal.signal(signal.SIGTERM, lambda *a: sys.exit(0)); time.sleep(60)"
try:
    with stopping():
        pipeline._run_stage("train:toy", lambda: run_logged([sys.executable, "-c", child], work, "toy"), work)
        pipeline._run_stage("probe:toy", lambda: None, work)
except StudyStopped as stop:
    sys.exit(128 + stop.signum)
"""


def _status(work) -> dict:
    path = work / "status.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def test_sigterm_records_the_stage_as_stopped_after_its_child_finished(tmp_path):
    study = subprocess.Popen([sys.executable, "-c", SCRIPT, str(tmp_path)], cwd=REPO_ROOT)
    deadline = time.time() + 120
    while _status(tmp_path).get("train:toy") != "running" or not (tmp_path / "logs" / "toy.log").is_file():
        assert time.time() < deadline and study.poll() is None
        time.sleep(0.2)
    time.sleep(1.0)  # the child is up and has its handler
    study.send_signal(signal.SIGTERM)
    assert study.wait(timeout=60) == 128 + signal.SIGTERM
    status = _status(tmp_path)
    assert status["train:toy"] == "stopped by SIGTERM (rerun the command to resume)", status
    assert "probe:toy" not in status  # no stage after the stop
    log = [json.loads(line) for line in (tmp_path / "commands.jsonl").read_text().splitlines()]
    assert log[-1]["exit_code"] == 0  # the child got the signal and finished on its own terms


def test_a_stage_whose_process_was_killed_is_reported_interrupted(tmp_path):
    """SIGKILL cannot be caught: the next reader of ``status.json`` sees the stage's process is gone."""
    study = subprocess.Popen([sys.executable, "-c", SCRIPT, str(tmp_path)], cwd=REPO_ROOT, start_new_session=True)
    deadline = time.time() + 120
    while _status(tmp_path).get("train:toy") != "running":
        assert time.time() < deadline and study.poll() is None
        time.sleep(0.2)
    os.killpg(study.pid, signal.SIGKILL)  # the study and its child command, as a lost node would
    study.wait(timeout=60)
    from experiments.claims.pipeline import _load_status

    state = _load_status(tmp_path)["train:toy"]
    assert state.startswith(f"interrupted: its process ({study.pid}) ended"), state


def test_exit_duration_stops_the_study_as_sigterm_does_once_the_minutes_pass(tmp_path):
    """``--exit-duration-in-mins``: the study stops itself at the deadline; its trainer finishes (saves) first."""
    start = time.time()
    study = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path), "0.05"], cwd=REPO_ROOT, timeout=120,
                           capture_output=True, text=True)
    assert study.returncode == 128 + signal.SIGTERM, study.stderr
    assert time.time() - start < 50  # not the child's 60 s sleep: the deadline (3 s) ended it
    assert "--exit-duration-in-mins 0.05 reached" in study.stdout
    assert _status(tmp_path)["train:toy"] == "stopped by SIGTERM (rerun the command to resume)"
    log = [json.loads(line) for line in (tmp_path / "commands.jsonl").read_text().splitlines()]
    assert log[-1]["exit_code"] == 0 and log[-1]["seconds"] < 50
