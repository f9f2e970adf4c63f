"""A study's record of CPU includes the training child still running: a working session's hard end kills the
child before its parent reaps it, and ``os.times()`` counts a child only once reaped, so without the heartbeat
a killed run's CPU would be missing from the records."""

from __future__ import annotations

import os
import sys

from experiments.claims import pipeline
from experiments.claims.study import commands, records
from megatron_crossbert.fsutil import pid_cpu_seconds

BUSY = "import time\nstart = time.process_time()\nwhile time.process_time() - start < 0.8:\n    pass\ntime.sleep(0.3)\n"
"""A child that burns 0.8 CPU-seconds, then idles while the heartbeat still reads it."""


def test_pid_cpu_seconds_reads_this_process_and_nothing_for_a_missing_pid():
    own = os.times()
    assert pid_cpu_seconds(os.getpid()) >= 0.9 * (own.user + own.system) - 0.05
    assert pid_cpu_seconds(2 ** 22 + 7) == 0.0


def test_the_heartbeat_reports_a_running_childs_cpu_before_it_exits(tmp_path, monkeypatch):
    monkeypatch.setattr(commands, "HEARTBEAT_S", 0.1)
    noted: list[float] = []
    monkeypatch.setattr(records, "note_session", lambda folder, started, cpu, session=None: noted.append(cpu))
    own = os.times()
    parent = own.user + own.system + own.children_user + own.children_system
    ran = lambda: commands.run_logged([sys.executable, "-c", BUSY], tmp_path, "busy")  # noqa: E731
    assert pipeline._run_stage("train:busy", ran, tmp_path, records=str(tmp_path / "records"))
    live = noted[:-1]  # the last note comes after the child is reaped
    assert live, "no heartbeat while the child ran"
    assert max(live) - parent > 0.5, f"the running child's CPU is missing: {live} against {parent:.2f} before"
    assert noted[-1] >= max(live) - 0.05  # reaped, it moves to os.times() and is counted once, not twice
    assert noted[-1] - parent < 3.0
    entry = commands.read_command_log(tmp_path)[-1]
    assert 0.7 < entry["cpu_s"] < 3.0 and entry["seconds"] >= 1.0  # the command's own CPU, beside its wall time


def test_no_heartbeat_outside_the_block(tmp_path, monkeypatch):
    monkeypatch.setattr(commands, "HEARTBEAT_S", 0.05)
    calls: list[int] = []
    with commands.heartbeat(lambda: calls.append(1)):
        pass
    commands.run_logged([sys.executable, "-c", "import time; time.sleep(0.3)"], tmp_path, "idle")
    assert calls == [] and commands.running_child_cpu() == 0.0
