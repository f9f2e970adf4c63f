"""The signals that mean "stop and save", and how a helper process is shielded from them.

One set for the whole package: the trainer catches these (``training.signals.StopSignal``) and every
helper process of a save ignores them (``checkpoint.processes``). Why each one:

- ``SIGTERM``: what SLURM (preemption, the time limit: to every process of the job), Kubernetes and
  torchrun's agent send before they kill;
- ``SIGINT``: Ctrl-C, which a terminal sends to the whole foreground process group;
- ``SIGUSR1``: SLURM's ``--signal=USR1@SECONDS`` warning before the time limit (the requeue signal of
  many launchers); its default action would kill the trainer outright;
- ``SIGHUP``: a lost terminal or SSH session; torchrun forwards it to its workers as is.

``SIGQUIT`` is left alone: it asks for a core dump, a debugging intent, not a stop.

A batch system signals *every* process of a job. A helper that kept a signal's default action died of
it in the middle of a save (the async writer's results server did, and the save was lost), so each
helper starts with these signals blocked (inherited from the trainer, :func:`blocked`), sets them to
ignored, then unblocks them (:func:`ignore_in_helper`): there is no moment at which one can kill it.
It still dies with the trainer (``parent_death.die_with_parent``).
"""

from __future__ import annotations

import signal
from contextlib import contextmanager
from typing import Iterator

STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGHUP)
"""What stops a training run with a checkpoint (see the module docstring for why each)."""


@contextmanager
def blocked() -> Iterator[None]:
    """Block :data:`STOP_SIGNALS` in this thread while a helper is started (fork, or fork and exec):
    the child inherits the mask and unblocks only once it ignores them. A signal that arrives meanwhile
    stays pending here and reaches the trainer's handler when the block ends."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def ignore_in_helper() -> None:
    """In a helper process: ignore :data:`STOP_SIGNALS` (pending ones are discarded), then unblock them."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


def signal_name(signum: int) -> str:
    """``SIGTERM`` for 15: what the stop line names."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
