"""No helper process of a save outlives the trainer, even when the trainer is SIGKILLed.

A SIGKILLed trainer runs no ``atexit`` handler or finalizer, so whatever it started must notice
by itself. megatron-core 0.19's checkpoint writer starts two kinds of helper:

- ``filesystem_async.get_write_results_queue`` starts a *spawn* ``multiprocessing.Manager`` server
  on the first save, sync or async, to carry the writers' results. The spawned child re-imports the
  main module (torch, megatron: ~620 MiB resident), then sleeps in ``serve_forever``; nothing in it
  watches the trainer. Left alone it stays behind after every SIGKILL, with multiprocessing's
  resource tracker.
- ``TemporalAsyncCaller`` forks one writer per async save; left alone, a writer whose trainer was killed
  mid-save keeps writing shards of a save that can never be committed.

The fixes: a synchronous save needs no server at all (megatron's writer threads run in the trainer,
so a ``queue.Queue`` carries the results); for async saves the Manager is started here, asking the
kernel to kill it when the trainer dies (``prctl(PR_SET_PDEATHSIG)``), and each forked writer asks
the same first thing. The resource tracker then sees its pipe close and exits. PR_SET_PDEATHSIG
fires when the *thread* that forked the child exits: both are started from the training thread.
Elsewhere than Linux this is a no-op. The queues live for the process, like megatron's own global.

A batch system signals every process of a job (SLURM's SIGTERM at preemption or the time
limit, to torchrun's workers and their helpers alike). A results server with SIGTERM's default action
dies of it mid-save, and every later save of the run, the stop checkpoint included, fails. So both
helpers start with the stop signals blocked and ignore them (:func:`arm_helper`, ``platform.signals``),
and finish the save the trainer then commits. The server listens on an abstract Unix socket (Linux),
so a SIGKILLed trainer leaves no ``pymp-*`` directory in ``$TMPDIR`` either: only the server's own
finalizer would remove that directory.
"""

from __future__ import annotations

import functools
import os
import queue
import secrets
import sys

from megatron_crossbert.checkpoint import fault_points
from megatron_crossbert.parent_death import die_with_parent
from megatron_crossbert.platform import signals

_queues: dict[bool, object] = {}
"""asynchronous -> the results queue handed to megatron (one per process, as megatron keeps one)."""
_managers: list = []
"""The Manager serving the async queue (kept referenced: dropping it would shut the server down)."""


def arm_helper(parent_pid: int) -> None:
    """First thing in every helper of a save: die with the trainer, outlive the stop signals that a
    batch system sends to the whole job (the trainer saves and exits on them; ``platform.signals``)."""
    die_with_parent(parent_pid)
    signals.ignore_in_helper()


def _call_dying_with_parent(parent_pid: int, fn, *args, **kwargs):
    """Target of a forked async writer: arm it (:func:`arm_helper`), then write."""
    arm_helper(parent_pid)
    fault_points.slow_writer()  # a test kills the trainer while this writer is alive
    return fn(*args, **kwargs)


def _server_address() -> str | None:
    """An abstract Unix socket on Linux (no file, so nothing to leave behind); elsewhere the default."""
    if not sys.platform.startswith("linux"):
        return None
    return f"\0crossbert-results-{os.getpid()}-{secrets.token_hex(8)}"


def _start_resource_tracker() -> None:
    """Start multiprocessing's resource tracker before the server, with the stop signals blocked (it
    ignores SIGINT and SIGTERM itself; SIGUSR1 and SIGHUP stay blocked in it). Not from inside the
    server's own start: ``resource_tracker.ensure_running`` unblocks SIGINT and SIGTERM in this thread
    when it returns, which lifted :func:`signals.blocked` halfway, and a job's SIGTERM then killed the
    server, spawned next, before :func:`arm_helper` ran (torchrun, 2 ranks: the stop checkpoint was lost)."""
    from multiprocessing import resource_tracker

    with signals.blocked():
        resource_tracker.ensure_running()


def results_queue(asynchronous: bool):
    """The queue megatron's writer reports through: in-process for sync saves, else a guarded Manager's."""
    if asynchronous not in _queues:
        if not asynchronous:
            _queues[False] = queue.Queue()
        else:
            import multiprocessing
            from multiprocessing.managers import SyncManager

            manager = SyncManager(address=_server_address(), ctx=multiprocessing.get_context("spawn"))
            _start_resource_tracker()
            with signals.blocked():  # until arm_helper ignores them in the server
                manager.start(arm_helper, (os.getpid(),))
            _managers.append(manager)
            _queues[True] = manager.Queue()
    return _queues[asynchronous]


def install_results_queue(asynchronous: bool) -> None:
    """Before each save is planned: point megatron's global results queue at ours."""
    from megatron.core.dist_checkpointing.strategies import filesystem_async

    filesystem_async._results_queue = results_queue(asynchronous)
    nvrx_writer = sys.modules.get("nvidia_resiliency_ext.checkpointing.async_ckpt.filesystem_async")
    if nvrx_writer is not None:  # NVRx's writer (``async_strategy``) keeps its own global queue
        nvrx_writer._results_queue = results_queue(asynchronous)


def guard_request(request):
    """The same ``AsyncRequest`` (a NamedTuple), whose forked writer is armed (:func:`arm_helper`)."""
    if request.async_fn is None:
        return request
    return request._replace(async_fn=functools.partial(_call_dying_with_parent, os.getpid(), request.async_fn))


def schedule_guarded(calls, request) -> None:
    """Hand ``request`` to megatron's ``AsyncCallsQueue`` ``calls``, which forks its writer right away:
    with the stop signals blocked until the writer ignores them, so no signal finds it unarmed."""
    with signals.blocked():
        calls.schedule_async_request(guard_request(request))
