"""Which writer an async save uses, said once in our log instead of megatron's deprecation at every save.

megatron-core 0.19 deprecates its own async writer ("mcore") in favour of NVIDIA Resiliency Extension's
("nvrx"), and warns so through its logger. The run's config chooses (``checkpoint.async_writer``), never the
environment: mcore by default, which works on CPU and GPU, because NVRx has not yet saved and resumed a run
here (NVRx 0.7 needs glibc >= 2.39, and its async queue calls ``torch.cuda.synchronize()``); nvrx only where
asked, and refused at start in one line where it cannot run (no GPU, not installed, older than megatron's
minimum). Either way the run logs one line saying which and why, and megatron's deprecation warning is
filtered out: it would tell a user to switch to a writer that has not been checked here.
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


NVRX_INSTALL = "pip install nvidia-resiliency-ext on the GPU node, see docs/gpu.md"
"""Where a refused nvrx request points."""


def choose_async_strategy(requested: str, cuda: bool, nvrx: bool) -> AsyncStrategy:
    """The writer ``checkpoint.async_writer`` names; ValueError (one line) for an nvrx that cannot run here."""
    if requested == "mcore":
        return AsyncStrategy("mcore", "checkpoint.async_writer=mcore")
    if requested != "nvrx":
        raise ValueError(f"checkpoint.async_writer must be mcore or nvrx, got {requested!r}")
    if not cuda:
        raise ValueError("checkpoint.async_writer=nvrx needs a GPU (NVRx is CUDA-only); use mcore here")
    if not nvrx:
        raise ValueError(f"checkpoint.async_writer=nvrx: nvidia-resiliency-ext does not import here, or is older "
                         f"than megatron-core's minimum ({NVRX_INSTALL}); or use mcore")
    return AsyncStrategy("nvrx", "checkpoint.async_writer=nvrx")


def nvrx_usable() -> bool:
    """NVRx's async writer imports on this GPU at a version megatron-core accepts."""
    import torch
    from megatron.core.dist_checkpointing.strategies.nvrx import has_nvrx_async_support

    try:
        return bool(torch.cuda.is_available() and has_nvrx_async_support())
    except AssertionError:  # an NVRx older than megatron's minimum
        return False


def check_async_writer(requested: str) -> AsyncStrategy:
    """At a run's start: the writer its async saves will use, or the one-line refusal."""
    import torch

    return choose_async_strategy(requested, torch.cuda.is_available(), requested == "nvrx" and nvrx_usable())


class _DropDeprecation(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(MCORE_DEPRECATION)


@lru_cache(maxsize=None)
def run_async_strategy(requested: str = "mcore") -> AsyncStrategy:
    """This process's writer for ``requested``, logged once; megatron's deprecation warning is filtered from then
    on."""
    strategy = check_async_writer(requested)
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
