"""What the activation model is checked against: the bytes autograd really saves for backward.

``saved_bytes`` runs one training forward under ``torch.autograd.graph.saved_tensors_hooks`` and adds up
every distinct storage handed to the hook (views of one tensor, and a tensor saved by several ops, count
once), parameters excluded: exactly the memory a forward leaves alive for its backward, free of allocator
noise, on the CPU. ``measure_case`` builds the run's model on the current process group (one process, or
each of the gloo ranks a test spawns) and feeds it the benchmark's synthetic micro-batch through the
architecture's own forward step.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from megatron_crossbert.config import RunConfig


def saved_bytes(model: torch.nn.Module, forward) -> tuple[int, object]:
    """(bytes of the distinct non-parameter storages ``forward()`` saves for backward, its output)."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    storages: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in params:
            storages[storage.data_ptr()] = max(storages.get(storage.data_ptr(), 0), storage.nbytes())
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        output = forward()
    return sum(storages.values()), output


@dataclass(frozen=True)
class Measured:
    """One measured forward on this rank."""

    saved_bytes: int
    parameters: int
    """Parameters of this rank's model chunk."""


def measure_case(run_cfg: RunConfig, seed: int = 0) -> Measured:
    """Build ``run_cfg``'s model on the initialised process group and measure one micro-batch's forward."""
    from megatron.core import parallel_state

    from megatron_crossbert.arch import get_arch
    from megatron_crossbert.benchmarking.batches import make_batches
    from megatron_crossbert.benchmarking.cases import BenchCase
    from megatron_crossbert.models import build_model

    model = build_model(run_cfg, pre_process=parallel_state.is_pipeline_first_stage(),
                        post_process=parallel_state.is_pipeline_last_stage(), training=True)
    model.train()
    device = next(model.parameters()).device
    batch = make_batches(BenchCase("plan", run_cfg), 1, device, seed=seed)[0]
    step = get_arch(run_cfg.model.arch).forward_step
    count, (output, _) = saved_bytes(model, lambda: step(device, iter([batch]), model))
    output.sum().backward()  # the graph is released and the hooks' bookkeeping is real
    return Measured(saved_bytes=count, parameters=sum(p.numel() for p in model.parameters()))
