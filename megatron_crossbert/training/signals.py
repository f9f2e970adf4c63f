"""Graceful stop on a batch system's or a user's signal (``platform.signals.STOP_SIGNALS``: SIGTERM,
SIGINT, SIGUSR1, SIGHUP; preemption, time limits, Ctrl-C, a lost terminal).

The handler only sets a flag; the training loop polls it at step boundaries, where model,
optimizer and data position are consistent. Any rank may receive the signal (SLURM and torchrun
deliver it to every process, a user may kill just one), so the signal number is all-reduced with MAX
over the whole job before acting: every rank then saves the same checkpoint, exits together, and
knows which signal stopped the job. ``training.train`` installs the handlers before anything else,
so a signal during start-up (verification, building the datasets' indices) is a stop before the
first step, not a kill.
"""

from __future__ import annotations

import signal
import threading

import torch
import torch.distributed as dist

from megatron_crossbert.platform.signals import STOP_SIGNALS, signal_name


class StopSignal:
    """Installs handlers for the stop signals; ``requested()`` is the job-wide answer."""

    def __init__(self) -> None:
        self.received: int | None = None
        """The last stop signal this process received (None: none)."""
        self.job_signal: int | None = None
        """The signal that stopped the job, once :meth:`requested` said so (the highest number any rank received)."""
        self._previous: dict[int, object] = {}

    def install(self) -> StopSignal:
        # signal.signal only works in the main thread (e.g. not inside some test runners' threads).
        if threading.current_thread() is not threading.main_thread():
            return self
        for signum in STOP_SIGNALS:
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def _handle(self, signum, frame) -> None:  # noqa: ARG002 - signal handler signature
        self.received = signum

    def requested(self, group=None, device: torch.device | None = None) -> bool:
        """True on every rank when any rank received a stop signal (a collective: call on all ranks)."""
        flag = torch.tensor([self.received or 0], dtype=torch.int32, device=device)
        if dist.is_initialized():
            dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=group)
        self.job_signal = int(flag.item()) or None
        return self.job_signal is not None

    @property
    def name(self) -> str | None:
        """``SIGTERM`` (say) once the job stopped on a signal; None otherwise."""
        return None if self.job_signal is None else signal_name(self.job_signal)

    def __enter__(self) -> StopSignal:
        return self.install()

    def __exit__(self, *exc) -> None:
        self.restore()
