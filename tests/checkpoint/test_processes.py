"""After SIGKILL of a trainer no process of the run outlives it (sync and async saves), and while a
trainer runs a second run into its save directory is refused.

Before issue 17 a SIGKILLed trainer left megatron's results-queue Manager server (~620 MiB, a
spawned interpreter) and multiprocessing's resource tracker behind after every save, sync or async,
and a forked async writer killed mid-save kept writing; and nothing refused a second run into a live
run's ``--save``. The end-to-end test trains two tiny runs at once (one saving synchronously, one
asynchronously with a writer held alive by a test hook), starts a second run into the live sync
run's directory, kills both trainers with SIGKILL and looks for survivors 5 s later.
"""

from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import REPO_ROOT
from tests.support.training import tiny_overrides

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG and /proc are Linux's")

PARENT = """
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", '''
import os, sys, time
from megatron_crossbert.checkpoint.processes import die_with_parent
die_with_parent(int(sys.argv[1]))
print(os.getpid(), flush=True)
time.sleep(60)
''', str(os.getpid())], stdout=subprocess.PIPE, text=True)
print(child.stdout.readline().strip(), flush=True)
time.sleep(60)
"""


def _alive(pid: int) -> bool:
    """Running and not a zombie (a zombie has exited; only its parent's wait is missing)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _descendants(pid: int) -> list[int]:
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    parents[int(entry)] = int(handle.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        kids = [child for child, ppid in parents.items() if ppid == parent]
        found += kids
        todo += kids
    return found


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), env.get("PYTHONPATH", "")])
    return env


@linux_only
def test_a_child_armed_with_die_with_parent_dies_with_a_sigkilled_parent():
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True, env=_env())
    child = int(parent.stdout.readline())
    assert _alive(child)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.time() + 5
    while _alive(child) and time.time() < deadline:
        time.sleep(0.05)
    assert not _alive(child)


def test_sync_saves_need_no_server_process():
    from megatron_crossbert.checkpoint.processes import results_queue

    before = set(_descendants(os.getpid()))
    assert isinstance(results_queue(asynchronous=False), queue.Queue)
    assert set(_descendants(os.getpid())) == before


def _pretrain_argv(corpus: str, save: Path, mode: str) -> list[str]:
    over = tiny_overrides("crossbert", corpus, save, training__train_iters=400, checkpoint__save_interval=2,
                          checkpoint__async_save=mode == "async")
    return [a for o in over for a in ("--set", o)]


def _trainer(corpus: str, save: Path, mode: str) -> subprocess.Popen:
    env = dict(_env(), CROSSBERT_TEST_SLOW_WRITER="60") if mode == "async" else _env()
    argv = _pretrain_argv(corpus, save, mode)
    return subprocess.Popen([sys.executable, "-m", "megatron_crossbert.cli.pretrain", *argv], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _second_run(corpus: str, save: Path, capfd) -> tuple[int, list[str]]:
    """The same command again, in this process, while the first run is alive: (status, error lines)."""
    from megatron_crossbert.cli.pretrain import main

    capfd.readouterr()
    rc = main(_pretrain_argv(corpus, save, "sync"))
    return rc, [line for line in capfd.readouterr().err.splitlines() if line.startswith("error: ")]


def _ready(trainer: subprocess.Popen, save: Path, mode: str) -> bool:
    """sync: the first save is complete; async: its forked writer is alive (manager, tracker, writer)."""
    if mode == "sync":
        return (save / "iter_0000002" / "run_config.json").exists()
    return len(_descendants(trainer.pid)) >= 3


@pytest.mark.slow
@linux_only
def test_sigkill_of_a_trainer_leaves_no_process_and_a_second_run_is_refused(indexed_corpus, tmp_path, capfd):
    trainers = {mode: _trainer(indexed_corpus, tmp_path / mode, mode) for mode in ("sync", "async")}
    helpers: dict[str, list[int]] = {}
    try:
        deadline = time.time() + 300
        while len(helpers) < len(trainers):
            for mode, trainer in trainers.items():
                if mode not in helpers and _ready(trainer, tmp_path / mode, mode):
                    if mode == "sync":
                        second = _second_run(indexed_corpus, tmp_path / mode, capfd)
                    helpers[mode] = _descendants(trainer.pid)
                    trainer.send_signal(signal.SIGKILL)
                assert trainer.poll() is None or mode in helpers, trainer.stderr.read()[-3000:]
            assert time.time() < deadline, f"not ready after 300 s: {sorted(helpers)}"
            time.sleep(0.1)
    finally:
        for trainer in trainers.values():
            trainer.kill()
            trainer.wait()
    time.sleep(5)
    survivors = {mode: [pid for pid in pids if _alive(pid)] for mode, pids in helpers.items()}
    for pid in sum(survivors.values(), []):
        os.kill(pid, signal.SIGKILL)  # started by this test's trainers
    assert len(helpers["async"]) >= 3, helpers
    assert survivors == {"sync": [], "async": []}, (helpers, survivors)
    rc, errors = second
    assert rc == 2 and len(errors) == 1, second
    holder = f"host {socket.gethostname()}, pid {trainers['sync'].pid}, started 20"
    assert errors[0].startswith(f"error: {tmp_path / 'sync' / 'run.lock'}: another training run uses this save "
                                f"directory ({holder}"), errors
    assert errors[0].endswith("); wait for it to finish or pass another --save"), errors
