"""A study stopped by a signal says so: its stage is recorded as stopped, never left "running".

A study is a long command (hours) under the same batch systems as training (``platform.signals.STOP_SIGNALS``:
SIGTERM on preemption or the time limit, Ctrl-C, a lost terminal). With the default action the study process
died at once and ``status.json`` (and the page written from it) kept saying a stage was "running". Under
:func:`stopping` a stop signal is caught instead:

- while a child command runs (a training run, ``commands.run_logged``), the signal is passed on to it (a
  trainer saves a checkpoint and exits; a second signal to it is harmless: its handler only sets a flag) and
  the study waits for it, so the stop checkpoint is never cut short; the study stops when the stage returns;
- otherwise (in-process probing: its outputs are written atomically) :class:`StudyStopped` is raised at once.

The pipeline records the stage as stopped by the signal and ends with exit status 128 + the signal number; a
rerun of the same command resumes.
"""

from __future__ import annotations

import argparse
import os
import signal
import threading
from contextlib import contextmanager
from typing import Iterator

from . import commands
from megatron_crossbert.platform.signals import STOP_SIGNALS, signal_name


class StudyStopped(BaseException):
    """A stop signal ended the study (a BaseException: a stage's ``except Exception`` must not record it as a
    failure)."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by {signal_name(signum)}")
        self.signum = signum

    @property
    def state(self) -> str:
        """The stage's entry in ``status.json``."""
        return f"stopped by {signal_name(self.signum)} (rerun the command to resume)"


class _Requests:
    received: int | None = None


_requests = _Requests()


def _handle(signum: int, frame) -> None:
    _requests.received = signum
    child = commands.running_child()
    if child is None or child.poll() is not None:
        raise StudyStopped(signum)
    try:
        child.send_signal(signum)
    except ProcessLookupError:
        pass


def stop_requested() -> StudyStopped | None:
    """The stop a signal asked for while a child command ran (to raise once its stage is recorded), or None."""
    return None if _requests.received is None else StudyStopped(_requests.received)


@contextmanager
def stopping() -> Iterator[None]:
    """Catch :data:`STOP_SIGNALS` for the study (main thread only; elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, _handle) for signum in STOP_SIGNALS}
    _requests.received = None
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def exit_after(minutes: float | None) -> None:
    """Send this process SIGTERM ``minutes`` from now (Megatron-LM's ``--exit-duration-in-mins``): under
    :func:`stopping` the running trainer then saves its checkpoint and the study stops as on a batch system's time
    limit, so a working session that ends at a known hour loses no training. None: never."""
    if minutes is None:
        return

    def _fire() -> None:
        print(f"[claims] --exit-duration-in-mins {minutes:g} reached: stopping as on SIGTERM", flush=True)
        os.kill(os.getpid(), signal.SIGTERM)

    timer = threading.Timer(minutes * 60, _fire)
    timer.daemon = True
    timer.start()


def duration_minutes(value: str) -> float:
    """``--exit-duration-in-mins``'s type: a positive number of minutes."""
    try:
        minutes = float(value)
    except ValueError:
        minutes = float("nan")
    if not minutes > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of minutes, got {value!r}")
    return minutes
