"""A helper process dies with the process that started it, even when that one is SIGKILLed.

A SIGKILLed process runs no ``atexit`` handler, ``finally`` or finalizer, so nothing it started hears of
its death: a pool worker, a results server or a datatrove task keeps running (or sleeping) for hours. Linux
can send a signal to a process when its parent dies (``prctl(PR_SET_PDEATHSIG)``); a child asks for it as
its first step. The signal fires when the *thread* that started the child exits, so start children from the
thread that lives as long as the parent (the main thread). Elsewhere than Linux this is a no-op. Imports
nothing from the project (the torch-free preprocessing tools use it, as do the checkpoint writers).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int, sig: int = signal.SIGKILL) -> bool:
    """Ask Linux to send ``sig`` to this process when its parent dies; exit now if it already has."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
        return False
    if os.getppid() != parent_pid:  # the parent died before prctl: nobody will signal us
        os._exit(1)
    return True
