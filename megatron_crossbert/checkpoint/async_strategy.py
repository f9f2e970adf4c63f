"""Which writer an async save uses, said once in our log instead of megatron's deprecation at every save.

megatron-core 0.19 deprecates its own async writer ("mcore") in favour of NVIDIA Resiliency Extension's
("nvrx"), and warns so through its logger. NVRx is CUDA-only and optional: where it imports on a GPU, the
saves use it; elsewhere (CPU runs, the demo, a GPU without NVRx) megatron's writer, which still works. Either
way the run logs one line saying which and why, and megatron's deprecation warning is filtered out: it would
tell a user to install a package that cannot run on their machine.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import lru_cache

MCORE_DEPRECATION = "MCore's async save is deprecated"
"""The start of megatron-core's warning (``dist_checkpointing.strategies.torch``)."""
MEGATRON_LOGGER = "megatron.core.dist_checkpointing.strategies.torch"
"""The logger that emits it."""

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class AsyncStrategy:
    """The writer of this run's async saves."""

    name: str
    """``dist_checkpointing.save``'s ``async_strategy``: 'nvrx' or 'mcore'."""
    why: str
    """For the one log line."""


def choose_async_strategy(cuda: bool, nvrx: bool) -> AsyncStrategy:
    """NVRx where it imports on a GPU, megatron's own writer otherwise."""
    if cuda and nvrx:
        return AsyncStrategy("nvrx", "nvidia-resiliency-ext imports on this GPU")
    if cuda:
        return AsyncStrategy("mcore", "nvidia-resiliency-ext is not installed (pip install nvidia-resiliency-ext)")
    return AsyncStrategy("mcore", "no GPU (nvidia-resiliency-ext is CUDA-only)")


class _DropDeprecation(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(MCORE_DEPRECATION)


@lru_cache(maxsize=1)
def run_async_strategy() -> AsyncStrategy:
    """This process's choice, logged once; megatron's deprecation warning is filtered from then on."""
    import torch
    from megatron.core.dist_checkpointing.strategies.nvrx import has_nvrx_async_support

    try:
        nvrx = bool(torch.cuda.is_available() and has_nvrx_async_support())
    except AssertionError:  # an NVRx older than megatron's minimum
        nvrx = False
    strategy = choose_async_strategy(torch.cuda.is_available(), nvrx)
    logging.getLogger(MEGATRON_LOGGER).addFilter(_DropDeprecation())
    logger.warning("async checkpoint saves: %s's writer (%s)", "NVRx" if strategy.name == "nvrx" else "megatron-core",
                   strategy.why)
    return strategy


def calls_queue_class(strategy: AsyncStrategy):
    """The ``AsyncCallsQueue`` that runs ``strategy``'s requests."""
    if strategy.name == "nvrx":
        from nvidia_resiliency_ext.checkpointing.async_ckpt.core import AsyncCallsQueue
    else:
        from megatron.core.dist_checkpointing.strategies.async_utils import AsyncCallsQueue
    return AsyncCallsQueue


_DROP_DEPRECATION = _DropDeprecation()


def drop_mcore_deprecation() -> None:
    """Filter megatron's async-save deprecation from its logger before a synchronous save too: megatron's
    synchronous ``save`` runs its own ("mcore") writer through ``async_save`` and warns at the first save,
    though nothing was asked of it and NVRx cannot run on a CPU. Nothing else from that logger is hidden."""
    logging.getLogger(MEGATRON_LOGGER).addFilter(_DROP_DEPRECATION)
