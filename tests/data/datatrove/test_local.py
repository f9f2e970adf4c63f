"""Local datatrove runs and their processes: a task process that dies fails the launch in one line naming it
(the other tasks finish; nothing hangs) and a merge then names the missing task; a SIGKILLed launcher (the
launcher alone, not its process group) takes every task process with it. Process trees are read from /proc."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from megatron_crossbert.cli.merge import main as merge_main
from tests.support import REPO_ROOT
from tests.support.processes import alive, descendants
from tests.support.synthetic_text import synthetic_documents, write_jsonl

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG and /proc are Linux's")


def _start(tmp_path: Path, tokenizer: Path, tasks: int, stalled: list[int]) -> subprocess.Popen:
    files = [str(write_jsonl(tmp_path / f"in{i}.jsonl", synthetic_documents(9 + i, seed=i, max_sentences=3)))
             for i in range(tasks)]
    (tmp_path / "marks").mkdir()
    argv = ["--input", *files, "--output-dir", str(tmp_path / "dt"), "--tokenizer", str(tokenizer),
            "--tasks", str(tasks), "--parallel-tasks", str(tasks)]
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), TOKENIZERS_PARALLELISM="false")
    return subprocess.Popen([sys.executable, "-m", "tests.support.stalling_tasks", str(tmp_path / "marks"),
                             ",".join(map(str, stalled)), *argv], cwd=REPO_ROOT, env=env, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _stalled_pids(tmp_path: Path, launcher: subprocess.Popen, ranks: list[int], timeout: float = 180) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and launcher.poll() is None:
        marks = {int(p.name): p.read_text() for p in (tmp_path / "marks").iterdir()}
        if sorted(marks) == sorted(ranks) and all(marks.values()):
            return {rank: int(pid) for rank, pid in marks.items()}
        time.sleep(0.05)
    pytest.fail(f"the stalled tasks did not start: {launcher.poll()=}")


def _gone(pids: list[int], timeout: float = 10) -> list[int]:
    """The processes still alive after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


def _cleanup(launcher: subprocess.Popen, pids: list[int]) -> None:
    """Whatever the test started and left (only when it failed)."""
    for pid in [launcher.pid] + pids:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
    launcher.wait()


@pytest.mark.parametrize("tasks, killed", [(3, 1), (4, 0)])
def test_a_dead_task_fails_the_launch_in_one_line_and_the_merge_names_it(tmp_path, bpe_tokenizer, tasks, killed):
    launcher = _start(tmp_path, bpe_tokenizer, tasks, [killed])
    tree: list[int] = []
    try:
        pid = _stalled_pids(tmp_path, launcher, [killed])[killed]
        tree = descendants(launcher.pid)
        os.kill(pid, signal.SIGKILL)
        _, err = launcher.communicate(timeout=120)  # before: "3/4 tasks completed." and asleep for good
        assert launcher.returncode == 2
        errors = [line for line in err.splitlines() if line.startswith("error: ")]
        assert len(errors) == 1 and f"1 of {tasks} tasks failed: task {killed} (killed by SIGKILL)" in errors[0]
        assert not _gone(tree)
    finally:
        _cleanup(launcher, tree)
    reports = sorted(p.name[:5] for p in (tmp_path / "dt").glob("*_preprocess_report.json"))
    assert reports == [f"{r:05d}" for r in range(tasks) if r != killed]  # the other tasks finished
    assert merge_main(["--input", str(tmp_path / "dt"), "--blend-file", str(tmp_path / "b.blend.json")]) == 2


@pytest.mark.parametrize("tasks", [2, 3])
def test_a_sigkilled_launcher_leaves_no_task_process(tmp_path, bpe_tokenizer, tasks):
    launcher = _start(tmp_path, bpe_tokenizer, tasks, list(range(tasks)))
    tree: list[int] = []
    try:
        stalled = _stalled_pids(tmp_path, launcher, list(range(tasks)))
        tree = descendants(launcher.pid)
        assert set(stalled.values()) <= set(tree)
        launcher.send_signal(signal.SIGKILL)  # the launcher alone, as a job's OOM kill or `kill -9 PID` does
        launcher.wait()
        assert _gone(tree) == []
    finally:
        _cleanup(launcher, tree)
