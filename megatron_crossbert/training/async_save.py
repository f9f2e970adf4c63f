"""Asynchronous checkpoint writes with megatron-core's async dist_checkpointing (``mcore`` strategy).

``start`` plans the save collectively (as a synchronous save does), then forks one writer process
per rank that writes this rank's shards while training continues. A forked child sees the
parameters and optimizer state as they were at the fork (copy-on-write), so later optimizer steps
cannot leak into the checkpoint; on a GPU megatron copies the tensors to host memory first.

The checkpoint is committed (``metadata.json``, then ``run_config.json`` and ``latest``) by
``finalize``, which every rank calls at each step boundary: megatron-core runs the commit only
when the writers of *all* ranks have finished, so crash safety is the synchronous save's: a
crash before the commit leaves the previous checkpoint as the one readers resolve. A save still
pending when training raises is never committed, for the same reason.

One queue per process, like megatron-core's own caller: async saves are a property of the
training process, not of one model. NVIDIA Resiliency Extension (``nvrx``) is not installed here,
so the ``mcore`` strategy is used on both CPU and GPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from megatron.core import dist_checkpointing
from megatron.core.dist_checkpointing.strategies.async_utils import AsyncCallsQueue

ASYNC_STRATEGY = "mcore"
"""megatron-core's own async writer; ``nvrx`` would need nvidia-resiliency-ext."""

_queue: AsyncCallsQueue | None = None


def start(state: dict, ckpt_dir: Path, content_metadata: dict | None, commit: Callable[[], None]) -> None:
    """Collective: plan the save of ``state`` into ``ckpt_dir``, fork the writers, queue ``commit``."""
    global _queue
    request = dist_checkpointing.save(state, str(ckpt_dir), async_sharded_save=True,
                                      async_strategy=ASYNC_STRATEGY, content_metadata=content_metadata)
    request.add_finalize_fn(commit)  # after megatron's own finalizers (metadata.json)
    if _queue is None:
        _queue = AsyncCallsQueue(persistent=False)
    _queue.schedule_async_request(request)


def pending() -> int:
    """Saves started but not yet committed on this rank."""
    return 0 if _queue is None else _queue.get_num_unfinalized_calls()


def finalize(blocking: bool) -> list[int]:
    """Collective: commit every save whose writers finished on all ranks (all of them if ``blocking``).

    Returns the indices of the committed saves; a write error on any rank is raised on every rank
    (megatron's CheckpointException) and nothing is committed. A no-op when no save was started.
    """
    if _queue is None or not _queue.get_num_unfinalized_calls():
        return []
    return _queue.maybe_finalize_async_calls(blocking=blocking)
