"""After SIGKILL of a trainer no process of the run outlives it (sync and async saves), and while a
trainer runs a second run into its save directory is refused. The helpers of a save outlive the stop
signals a batch system sends to the whole job, and leave no ``pymp-*`` directory behind.

Left alone, a SIGKILLed trainer left megatron's results-queue Manager server (~620 MiB, a
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
from tests.support.processes import alive, descendants
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


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), env.get("PYTHONPATH", "")])
    return env


@linux_only
def test_a_child_armed_with_die_with_parent_dies_with_a_sigkilled_parent():
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True, env=_env())
    child = int(parent.stdout.readline())
    assert alive(child)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.time() + 5
    while alive(child) and time.time() < deadline:
        time.sleep(0.05)
    assert not alive(child)


def test_sync_saves_need_no_server_process():
    from megatron_crossbert.checkpoint.processes import results_queue

    before = set(descendants(os.getpid()))
    assert isinstance(results_queue(asynchronous=False), queue.Queue)
    assert set(descendants(os.getpid())) == before


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
    return len(descendants(trainer.pid)) >= 3


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
                    helpers[mode] = descendants(trainer.pid)
                    trainer.send_signal(signal.SIGKILL)
                assert trainer.poll() is None or mode in helpers, trainer.stderr.read()[-3000:]
            assert time.time() < deadline, f"not ready after 300 s: {sorted(helpers)}"
            time.sleep(0.1)
    finally:
        for trainer in trainers.values():
            trainer.kill()
            trainer.wait()
    time.sleep(5)
    survivors = {mode: [pid for pid in pids if alive(pid)] for mode, pids in helpers.items()}
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


HELPERS = """
import multiprocessing, os, sys, time
from megatron_crossbert.checkpoint import processes
queue = processes.results_queue(asynchronous=True)
writer = multiprocessing.get_context("fork").Process(
    target=processes._call_dying_with_parent, args=(os.getpid(), time.sleep, 120))
writer.start()
print(processes._managers[0]._process.pid, writer.pid, flush=True)
sys.stdin.readline()  # the test has signalled both helpers
queue.put("served")
print(queue.get(), writer.is_alive(), flush=True)
time.sleep(120)
"""
STOP = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGHUP)


def _ignores(pid: int) -> set[int]:
    """The signals ``pid`` ignores (``SigIgn`` of /proc/PID/status)."""
    with open(f"/proc/{pid}/status") as handle:
        mask = int(next(line for line in handle if line.startswith("SigIgn:")).split()[1], 16)
    return {signum for signum in STOP if mask >> (signum - 1) & 1}


@linux_only
def test_save_helpers_outlive_a_jobs_stop_signals_and_die_with_the_trainer(tmp_path):
    """SLURM signals every process of a job. The async save's results server kept SIGTERM's
    default and died of it mid-save (34-line traceback, no stop checkpoint); SIGUSR1 and SIGHUP killed
    the writer too. Both now ignore them, still die with a SIGKILLed trainer, and the server listens on
    an abstract socket, so no pymp-* directory stays in $TMPDIR."""
    (tmp_path / "tmp").mkdir()
    parent = subprocess.Popen([sys.executable, "-c", HELPERS], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, env=dict(_env(), TMPDIR=str(tmp_path / "tmp")))
    try:
        helpers = [int(pid) for pid in parent.stdout.readline().split()]
        deadline = time.time() + 10  # the writer arms itself first thing, the server before it serves
        while any(_ignores(pid) != set(STOP) for pid in helpers) and time.time() < deadline:
            time.sleep(0.05)
        assert [_ignores(pid) for pid in helpers] == [set(STOP)] * 2
        for pid in helpers:
            for signum in STOP:
                os.kill(pid, signum)
        parent.stdin.write("signalled\n")
        parent.stdin.flush()
        assert parent.stdout.readline().split() == ["served", "True"]
        assert all(alive(pid) for pid in helpers)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        deadline = time.time() + 5
        while any(alive(pid) for pid in helpers) and time.time() < deadline:
            time.sleep(0.05)
        assert not any(alive(pid) for pid in helpers)
        assert not list((tmp_path / "tmp").glob("pymp-*"))
    finally:
        parent.kill()
        parent.wait()


SLOW_SERVER_START = """
import os, signal, sys, threading, time
if __name__ == "__mp_main__":  # the spawned results server re-imports this file first: a slow start, as under load
    time.sleep(4)
if __name__ == "__main__":
    from megatron_crossbert.checkpoint import processes
    from megatron_crossbert.platform.signals import STOP_SIGNALS
    from tests.support.processes import cmdline, descendants
    got = []
    for signum in STOP_SIGNALS:
        signal.signal(signum, lambda signum, frame: got.append(signal.Signals(signum).name))

    def batch_system():  # SIGTERM to every process of the job while the server is being spawned
        while not [p for p in descendants(os.getpid()) if b"spawn_main" in cmdline(p)]:
            time.sleep(0.02)
        time.sleep(0.5)
        os.killpg(0, signal.SIGTERM)

    threading.Thread(target=batch_system, daemon=True).start()
    queue = processes.results_queue(asynchronous=True)
    queue.put("served")
    print(queue.get(), *got, flush=True)
"""


@linux_only
def test_a_stop_signal_while_the_results_server_starts_is_outlived(tmp_path):
    """Found with torchrun's agent forwarding SIGTERM during the first async save):
    multiprocessing's resource tracker, started inside the server's start, unblocked SIGINT and SIGTERM on
    its way out, so the server, spawned next, died of the job's SIGTERM before it could ignore it (EOFError,
    no stop checkpoint). Now the server starts with them blocked and serves; the trainer's handler gets it."""
    script = tmp_path / "trainer.py"
    script.write_text(SLOW_SERVER_START)
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                         env=_env(), start_new_session=True)  # its own process group, as a job step is
    assert (run.returncode, run.stdout.split()) == (0, ["served", "SIGTERM"]), run.stderr[-3000:]
