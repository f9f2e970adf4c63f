"""Graceful stop on SIGTERM/SIGINT (preemption, Ctrl-C, SLURM time limits).

The handler only sets a flag; the training loop polls it at step boundaries, where model,
optimizer and data position are consistent. Any rank may receive the signal (SLURM and torchrun
deliver it to every process, a user may kill just one), so the flag is all-reduced with MAX over
the whole job before acting: every rank then saves the same checkpoint and exits together.
"""

from __future__ import annotations

import signal
import threading

import torch
import torch.distributed as dist

_HANDLED = (signal.SIGTERM, signal.SIGINT)


class StopSignal:
    """Installs handlers for SIGTERM/SIGINT; ``requested()`` is the job-wide answer."""

    def __init__(self) -> None:
        self.received: int | None = None
        self._previous: dict[int, object] = {}

    def install(self) -> StopSignal:
        # signal.signal only works in the main thread (e.g. not inside some test runners' threads).
        if threading.current_thread() is not threading.main_thread():
            return self
        for signum in _HANDLED:
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
        flag = torch.tensor([1 if self.received is not None else 0], dtype=torch.int32, device=device)
        if dist.is_initialized():
            dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=group)
        return bool(flag.item())

    def __enter__(self) -> StopSignal:
        return self.install()

    def __exit__(self, *exc) -> None:
        self.restore()
