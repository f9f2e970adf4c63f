"""Run the project's own CLIs as subprocesses and keep an exact log of what was run.

Every stage of a study calls the public console scripts (``crossbert-train-tokenizer``,
``crossbert-preprocess``, ``crossbert-pretrain``) through ``python -m``, so the study tests
the shipped pipeline, each training run gets a fresh process (clean megatron parallel state), and
``commands.jsonl`` in the work dir records every command line, its duration and exit code: the
experiments' results pages quote it verbatim.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from megatron_crossbert.fsutil import pid_cpu_seconds


_RENDEZVOUS_VARS = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK")
"""Not passed to children: in-process probing may have set them for its own process group, and a
child that inherits them would try to bind the parent's rendezvous port."""


_child: subprocess.Popen | None = None
"""The command running now (``stopping`` passes a stop signal on to it)."""


def running_child() -> subprocess.Popen | None:
    return _child


HEARTBEAT_S = 300.0
"""While a command runs, the registered heartbeat is called this often (seconds)."""

_heartbeat: Callable[[], None] | None = None


@contextmanager
def heartbeat(fn: Callable[[], None]) -> Iterator[None]:
    """Call ``fn`` every ``HEARTBEAT_S`` while a command of this block runs: the study records the CPU its
    training child has used so far, which a session's hard end (killing the child unreaped) would otherwise lose."""
    global _heartbeat
    previous, _heartbeat = _heartbeat, fn
    try:
        yield
    finally:
        _heartbeat = previous


def _children_cpu() -> float:
    """CPU seconds of this process's reaped children: a command's own, once it is waited for, is the difference
    around it (one command runs at a time), so a resumed run's segments each say what they cost."""
    times = os.times()
    return times.children_user + times.children_system


def running_child_cpu() -> float:
    """CPU seconds of the command running now (its reaped children included); 0 when none runs."""
    child = _child
    return pid_cpu_seconds(child.pid) if child is not None else 0.0


class StageError(RuntimeError):
    """A pipeline command failed; the message names the command and its log file."""


def command_log_path(work_dir: Path) -> Path:
    return work_dir / "commands.jsonl"


def _record(work_dir: Path, entry: dict) -> None:
    with command_log_path(work_dir).open("a") as handle:
        handle.write(json.dumps(entry) + "\n")


def run_logged(argv: list[str], work_dir: Path, log_name: str, env: dict | None = None) -> float:
    """Run ``argv``; stream output to ``logs/<log_name>.log``; raise StageError on failure."""
    logs = work_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log_path = logs / f"{log_name}.log"
    inherited = {k: v for k, v in os.environ.items() if k not in _RENDEZVOUS_VARS}
    full_env = {**inherited, "PYTHONWARNINGS": "ignore", "TOKENIZERS_PARALLELISM": "false", **(env or {})}
    start, cpu = time.time(), _children_cpu()
    with log_path.open("a") as log:
        log.write(f"\n$ {' '.join(argv)}\n")
        log.flush()
        code = _wait(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=full_env))
    seconds = time.time() - start
    _record(work_dir, {"argv": argv, "seconds": round(seconds, 1), "cpu_s": round(_children_cpu() - cpu, 1),
                       "exit_code": code, "log": str(log_path),
                       "finished_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    if code != 0:
        raise StageError(f"command failed with exit code {code}: {' '.join(argv)} (see {log_path})")
    return seconds


def _wait(child: subprocess.Popen) -> int:
    """The child's exit status, waited for as ``running_child()``, with the heartbeat between waits."""
    global _child
    _child = child
    try:
        while True:
            try:
                return child.wait(timeout=HEARTBEAT_S if _heartbeat else None)
            except subprocess.TimeoutExpired:
                _heartbeat()
    finally:
        _child = None


def module_argv(module: str, *args: str) -> list[str]:
    """``python -m <module> args...`` with this interpreter (the project's venv)."""
    return [sys.executable, "-m", module, *args]


def read_command_log(work_dir: Path) -> list[dict]:
    path = command_log_path(work_dir)
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
