"""The one seam through which tests make a checkpoint save fail or stall at a chosen moment.

A node failure, a full disk or a writer killed mid-save cannot be caused from outside at the instant a
test needs (tiny checkpoints are written in milliseconds), so the save code asks this module at four
points. Each point is off unless its environment variable is set, and the variables are read in the
process that saves: a test sets them on the trainer it starts (``torchrun``, the pretrain CLI), never
in its own process. Production code reads no other ``CROSSBERT_TEST_*`` variable.

| variable | value | effect |
| --- | --- | --- |
| ``CROSSBERT_TEST_SLEEP_IN_SAVE`` | ``ITERATION:SECONDS`` | sleep after that save's shards are written, before its commit |
| ``CROSSBERT_TEST_KILL_BEFORE_LATEST`` | ``ITERATION`` | SIGKILL once that save's ``run_config.json`` is written, before 'latest' moves |
| ``CROSSBERT_TEST_NO_SPACE_CHECK`` | any | skip the free-space checks, so a real ENOSPC happens mid-save |
| ``CROSSBERT_TEST_SLOW_WRITER`` | seconds | a forked async writer waits that long before writing |
"""

from __future__ import annotations

import os
import signal
import time

SLEEP_IN_SAVE = "CROSSBERT_TEST_SLEEP_IN_SAVE"
KILL_BEFORE_LATEST = "CROSSBERT_TEST_KILL_BEFORE_LATEST"
NO_SPACE_CHECK = "CROSSBERT_TEST_NO_SPACE_CHECK"
SLOW_WRITER = "CROSSBERT_TEST_SLOW_WRITER"


def pause_before_commit(iteration: int) -> None:
    """Sleep when ``SLEEP_IN_SAVE`` names this iteration: a test kills the process mid-save."""
    spec = os.environ.get(SLEEP_IN_SAVE, "")
    target, _, seconds = spec.partition(":")
    if spec and int(target) == iteration:
        time.sleep(float(seconds))


def kill_before_latest(iteration: int | None) -> None:
    """SIGKILL this process when ``KILL_BEFORE_LATEST`` names this iteration (a node failure between the
    completeness marker and the pointer)."""
    if os.environ.get(KILL_BEFORE_LATEST) == str(iteration):
        os.kill(os.getpid(), signal.SIGKILL)


def space_checks_skipped() -> bool:
    """True when ``NO_SPACE_CHECK`` is set: the save goes on until the disk itself refuses."""
    return bool(os.environ.get(NO_SPACE_CHECK))


def slow_writer() -> None:
    """Wait ``SLOW_WRITER`` seconds (none by default) before an async writer writes."""
    time.sleep(float(os.environ.get(SLOW_WRITER, "0") or 0))
