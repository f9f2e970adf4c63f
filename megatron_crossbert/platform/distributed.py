"""Process-group and megatron-core parallel-state set-up, the one place the layout is applied.

Works the same under torchrun (env:// rendezvous), under ``torch.multiprocessing.spawn`` in tests,
and as a plain single process (world size 1 on a free local port).
"""

from __future__ import annotations

import os
import random
import socket
from dataclasses import dataclass
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist

from megatron_crossbert.config import ParallelConfig
from megatron_crossbert.platform.cpu import apply_cpu_patches


def free_port() -> int:
    """An unused TCP port on localhost (for single-process and test rendezvous)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def device() -> torch.device:
    """The device this rank computes on: its local GPU, or the CPU."""
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


@dataclass(frozen=True)
class ProcessGroupArgs:
    """How this process joins the job: the arguments of ``init_process_group`` and of megatron's groups."""

    backend: str
    """nccl on a GPU, gloo on the CPU."""
    init_kwargs: dict
    """Keyword arguments of ``torch.distributed.init_process_group`` (backend included)."""
    local_rank: int | None
    """The GPU this rank drives (None on the CPU)."""
    create_gloo_groups: bool = False
    """megatron-core's extra gloo groups beside the NCCL ones. Nothing this project runs uses them (the
    distributed optimizer's fully-reshardable save gathers over NCCL; a CPU run's groups are gloo already),
    and across nodes they hang where a hostname resolves to 127.0.1.1, so none are made."""


def process_group_args(cuda: bool, env: dict[str, str], timeout_minutes: int,
                       port: int | None = None) -> ProcessGroupArgs:
    """The one rule for joining: NCCL groups are bound to the rank's GPU (``device_id``: eager NCCL init, no
    guessed device), the timeout is the run's; under a launcher (``RANK`` set) the env:// rendezvous, else a
    world of one on ``port`` of the loopback, without leaking rendezvous variables to children."""
    backend = "nccl" if cuda else "gloo"
    local_rank = int(env.get("LOCAL_RANK", "0")) if cuda else None
    kwargs: dict = {"backend": backend, "timeout": timedelta(minutes=timeout_minutes)}
    if cuda:
        kwargs["device_id"] = torch.device("cuda", local_rank)
    if "RANK" not in env:
        kwargs.update(init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    return ProcessGroupArgs(backend, kwargs, local_rank)


def init_process_group(timeout_minutes: int = 30) -> tuple[int, int]:
    """Initialise torch.distributed (``process_group_args``); returns (rank, world_size)."""
    if not dist.is_initialized():
        cuda = torch.cuda.is_available()
        plan = process_group_args(cuda, dict(os.environ), timeout_minutes,
                                  None if "RANK" in os.environ else free_port())
        if plan.local_rank is not None:
            torch.cuda.set_device(plan.local_rank)
        dist.init_process_group(**plan.init_kwargs)
    return dist.get_rank(), dist.get_world_size()


def launched_world_size() -> int:
    """The job's world size before the process group exists: the group's when it does, else the launcher's
    ``WORLD_SIZE`` (torchrun, spawned test workers), else 1 (a plain process)."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    return int(os.environ.get("WORLD_SIZE", "1") or 1)


def check_world_size(parallel: ParallelConfig, world_size: int) -> None:
    """TP*PP must divide the ranks of the job (the rest is data parallelism)."""
    model_parallel = parallel.tensor_model_parallel_size * parallel.pipeline_model_parallel_size
    if world_size % model_parallel:
        raise ValueError(f"parallel.tensor_model_parallel_size * pipeline_model_parallel_size = {model_parallel} "
                         f"does not divide the {world_size} process(es) of this job; launch a multiple of "
                         f"{model_parallel} ranks (torchrun --nproc_per_node), or lower TP/PP")


def seed_everything(seed: int) -> None:
    """Seed python, numpy, torch and megatron's model-parallel RNG streams (TP-aware)."""
    from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    model_parallel_cuda_manual_seed(seed)


def initialize(parallel: ParallelConfig, seed: int) -> None:
    """Apply platform patches, join the process group, build TP/PP/DP groups and seed RNGs."""
    from megatron.core import parallel_state

    apply_cpu_patches()
    _, world_size = init_process_group(parallel.distributed_timeout_minutes)
    check_world_size(parallel, world_size)
    if parallel_state.model_parallel_is_initialized():
        parallel_state.destroy_model_parallel()
    parallel_state.initialize_model_parallel(
        tensor_model_parallel_size=parallel.tensor_model_parallel_size,
        pipeline_model_parallel_size=parallel.pipeline_model_parallel_size,
        distributed_timeout_minutes=parallel.distributed_timeout_minutes,
        create_gloo_process_groups=ProcessGroupArgs.create_gloo_groups,
    )
    seed_everything(seed)


def destroy() -> None:
    """Tear down megatron parallel state and the process group (safe to call twice)."""
    from megatron.core import parallel_state

    if parallel_state.model_parallel_is_initialized():
        parallel_state.destroy_model_parallel()
    if dist.is_initialized():
        dist.destroy_process_group()


def is_rank_zero() -> bool:
    return not dist.is_initialized() or dist.get_rank() == 0
