"""A batch system's stop signal to every process of a job: a stop checkpoint, one line saying so, exit 0.

SLURM sends SIGTERM (preemption, the time limit) to every process of a job, torchrun's workers
and their helpers included, and ``--signal=USR1@N`` sends SIGUSR1. Unguarded, the async save's results server
dies of SIGTERM and the stop save failed (rc 2, a 34-line traceback, the steps since the last checkpoint
lost); SIGUSR1 and SIGHUP killed the trainer outright; a ``pymp-*`` directory stayed in ``$TMPDIR``; and
nothing said after a stop that the checkpoint was saved.

One end-to-end test runs three jobs at once, each in its own session as a job step is: (a) one trainer
saving asynchronously, SIGTERM to its process group while the forked writer is held alive
(``CROSSBERT_TEST_SLOW_WRITER``); (b) a synchronous trainer saving every step with ``keep_last=1`` while two
HF exports read its save directory (pruning must keep the checkpoint an export reads, or every export
fails, calling it "incomplete"), then SIGUSR1 to its group; (c) torchrun with 2 ranks saving
asynchronously, SIGTERM to every process of the job. Each worker runs under ``sh -c 'trap ...'``, which
outlives the forwarded signal to record the worker's own exit status: torchrun itself always exits 1 with
its ``SignalException`` after a signal (elastic's contract; docs/security.md says so).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest

from tests.support.checkpoints import write_tokenizer
from tests.support.cli_cases import cases_argv, cases_env
from tests.support.processes import alive, descendants, forked_writers
from tests.support.training import tiny_config, tiny_overrides

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and process groups are Linux's")
STOP_LINE = re.compile(r"stopped at step (\d+) \((SIG[A-Z0-9]+)\): saved (\S+); the same command resumes from it$")


@dataclass
class Job:
    """One job step: its processes (a session of their own), what to wait for, which signal, to whom."""

    name: str
    proc: subprocess.Popen
    work: Path
    ready: Callable[[], bool]
    signum: int
    everyone: bool = False
    """True: every process of the job gets the signal (SLURM's kill of a step); else its process group."""
    tree: list[int] = field(default_factory=list)

    def deliver(self) -> None:
        self.tree = [self.proc.pid] + descendants(self.proc.pid)
        if not self.everyone:
            os.killpg(self.proc.pid, self.signum)
            return
        for pid in self.tree:
            try:
                os.kill(pid, self.signum)
            except ProcessLookupError:
                pass

    def text(self, stream: str) -> str:
        return (self.work / stream).read_text()


def _argv(corpus: str, save: Path, **extra) -> list[str]:
    return [a for o in tiny_overrides("crossbert", corpus, save, **extra) for a in ("--set", o)]


def _start(name: str, tmp_path: Path, command: list[str], env: dict) -> tuple[subprocess.Popen, Path]:
    work = tmp_path / name
    (work / "tmp").mkdir(parents=True)
    env = dict(cases_env(), TMPDIR=str(work / "tmp"), TORCH_ELASTIC_SHUTDOWN_TIMEOUT="300", **env)
    with open(work / "stdout", "w") as out, open(work / "stderr", "w") as err:
        proc = subprocess.Popen(command, cwd=work, env=env, stdout=out, stderr=err, start_new_session=True)
    return proc, work


def _writer_alive(job_pid: Callable[[], int], save: Path) -> bool:
    """A save's forked writer is alive, its checkpoint not yet complete, and a process that is not a writer runs
    beside it: a spawned child (the results server) carries its parent's command line until its exec, so a
    writer alone could be that child caught early."""
    pending = [p for p in save.glob("iter_*") if not (p / "run_config.json").exists()]
    pid = job_pid()
    writers = forked_writers(pid)
    return bool(pending) and bool(writers) and len(descendants(pid)) > len(writers)


def _async_trainer(corpus: str, tmp_path: Path) -> Job:
    save = tmp_path / "async" / "ckpt"
    argv = _argv(corpus, save, training__train_iters=400, checkpoint__save_interval=4, checkpoint__async_save=True)
    proc, work = _start("async", tmp_path, [sys.executable, "-m", "megatron_crossbert.cli.pretrain", *argv],
                        {"CROSSBERT_TEST_SLOW_WRITER": "4"})
    return Job("async", proc, work, lambda: _writer_alive(lambda: proc.pid, save), signal.SIGTERM)


def _torchrun(corpus: str, tmp_path: Path) -> Job:
    save = tmp_path / "torchrun" / "ckpt"
    argv = _argv(corpus, save, training__train_iters=400, checkpoint__save_interval=4, checkpoint__async_save=True)
    worker = (f"trap : TERM INT HUP USR1; {shlex.quote(sys.executable)} -m megatron_crossbert.cli.pretrain \"$@\"; "
              f"echo $? > rc.$LOCAL_RANK")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               "--no-python", "sh", "-c", worker, "sh", *argv]
    proc, work = _start("torchrun", tmp_path, command, {"CROSSBERT_TEST_SLOW_WRITER": "4"})
    return Job("torchrun", proc, work, lambda: _writer_alive(lambda: proc.pid, save), signal.SIGTERM, everyone=True)


def _exports_then(save: Path, tmp_path: Path) -> Callable[[], bool]:
    """Once the live run has a checkpoint: two exports of its root, in one interpreter; True once both ended."""
    tokenizer = write_tokenizer(tmp_path / "tok")
    exports: list[subprocess.Popen] = []

    def done() -> bool:
        if not exports and (save / "latest").exists():
            cases = [{"module": "megatron_crossbert.cli.convert_hf",
                      "argv": ["export", str(save), str(tmp_path / f"hf{i}"), "--tokenizer", str(tokenizer)]}
                     for i in (1, 2)]
            (tmp_path / "cases.json").write_text(json.dumps(cases))
            exports.append(subprocess.Popen(cases_argv(tmp_path / "cases.json", tmp_path / "results.json"),
                                            cwd=tmp_path, env=cases_env()))
        return bool(exports) and exports[0].poll() is not None

    return done


def _sync_trainer_read_live(corpus: str, tmp_path: Path) -> Job:
    save = tmp_path / "sync" / "ckpt"
    argv = _argv(corpus, save, training__train_iters=100000, training__log_interval=1000, checkpoint__save_interval=1,
                 checkpoint__keep_last=1)
    proc, work = _start("sync", tmp_path, [sys.executable, "-m", "megatron_crossbert.cli.pretrain", *argv], {})
    return Job("sync", proc, work, _exports_then(save, tmp_path / "sync"), signal.SIGUSR1)


def _run(jobs: list[Job], timeout: float = 600) -> None:
    """Deliver each job's signal once it is ready; wait for every job; kill whatever it left alive."""
    deadline = time.time() + timeout
    try:
        while any(not job.tree for job in jobs):
            for job in (j for j in jobs if not j.tree):
                assert job.proc.poll() is None, (job.name, job.text("stderr")[-3000:])
                if job.ready():
                    job.deliver()
            assert time.time() < deadline, [job.name for job in jobs if not job.tree]
            time.sleep(0.1)
        for job in jobs:
            job.proc.wait(timeout=max(1.0, deadline - time.time()))
        time.sleep(5)
    finally:
        for job in jobs:
            if job.proc.poll() is None:
                os.killpg(job.proc.pid, signal.SIGKILL)
                job.proc.wait()


def _survivors(job: Job) -> list[int]:
    found = [pid for pid in job.tree if alive(pid)]
    for pid in found:
        os.kill(pid, signal.SIGKILL)  # started by this test
    return found


def _stopped_at(job: Job, signame: str) -> int:
    """The one stop line's step, checked against 'latest' (a complete checkpoint)."""
    from megatron_crossbert.checkpoint.directories import is_complete, resolve_checkpoint_dir

    lines = [m for m in map(STOP_LINE.match, job.text("stdout").splitlines()) if m]
    assert len(lines) == 1 and lines[0][2] == signame, (job.name, job.text("stdout")[-2000:])
    saved = Path(lines[0][3])
    assert resolve_checkpoint_dir(saved.parent) == saved and is_complete(saved), job.name
    assert saved.name == f"iter_{int(lines[0][1]):07d}"
    return int(lines[0][1])


@pytest.mark.e2e
@linux_only
def test_a_jobs_stop_signal_saves_says_so_and_exits_zero(indexed_corpus, tmp_path):
    jobs = [_async_trainer(indexed_corpus, tmp_path), _sync_trainer_read_live(indexed_corpus, tmp_path),
            _torchrun(indexed_corpus, tmp_path)]
    _run(jobs)
    single, live, torchrun = jobs
    for job in jobs:
        assert _survivors(job) == [], job.name
        assert not list((job.work / "tmp").glob("pymp-*")), job.name
    for job, signame in ((single, "SIGTERM"), (live, "SIGUSR1")):
        assert job.proc.returncode == 0, (job.name, job.text("stderr")[-3000:])
        assert "Traceback" not in job.text("stderr") and "error:" not in job.text("stderr"), job.name
        _stopped_at(job, signame)
    assert single.proc.pid in single.tree and len(single.tree) >= 3  # trainer, results server, writer (+tracker)
    assert [(torchrun.work / f"rc.{rank}").read_text().strip() for rank in (0, 1)] == ["0", "0"]
    stderr = torchrun.text("stderr")
    assert "error:" not in stderr and stderr.count("Traceback") == stderr.count("SignalException: Process"), stderr
    _stopped_at(torchrun, "SIGTERM")
    exports = json.loads((tmp_path / "sync" / "results.json").read_text())
    assert [e["rc"] for e in exports] == [0, 0], [e["stderr"][-1500:] for e in exports]
    assert all((tmp_path / "sync" / f"hf{i}" / "config.json").is_file() for i in (1, 2))
    ckpt = tmp_path / "sync" / "ckpt"  # the pins were released: the stop save pruned down to keep_last=1
    assert sorted(p.name for p in ckpt.glob("iter_*")) == [(ckpt / "latest").read_text()]


def test_a_signal_during_start_up_stops_before_the_first_step(indexed_corpus, tmp_path, capsys):
    """The handlers are installed before start-up (before, a signal there killed the process with -15):
    the loop stops before its first step and saves nothing, the state being the one it started from."""
    from megatron_crossbert.training.loop import run_loop
    from megatron_crossbert.training.setup import build_session
    from megatron_crossbert.training.signals import StopSignal

    session = build_session(tiny_config("crossbert", indexed_corpus, tmp_path / "ckpt", training__train_iters=4))
    stop = StopSignal()
    stop.received = signal.SIGTERM  # what the handler records when SLURM's signal lands during start-up
    state = run_loop(session, stop=stop)
    assert state.losses == [] and state.stopped_by_signal and state.stop_reason == "SIGTERM"
    assert not list((tmp_path / "ckpt").glob("iter_*"))
    assert "stopped before the first step of this run (SIGTERM, step 0): nothing new to save" in capsys.readouterr().out
