"""What a full training checkpoint holds: the sharded state dict that save and resume share.

Model and optimizer are sharded tensors (reshardable across TP, PP and DP; the distributed
optimizer's layout is chosen in ``optimizer_format``), the LR scheduler, consumed samples and
iteration are common state, and the RNG states are one ShardedObject per (PP, TP) rank. RNG
states can only be restored under the same TP/PP layout and on the same device type; otherwise the
resume re-seeds instead, with a log line (``checkpoint.load``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
import torch
from megatron.core import parallel_state, tensor_parallel
from megatron.core.dist_checkpointing.mapping import ShardedObject

from megatron_crossbert.checkpoint.optimizer_format import sharding_metadata


@dataclass
class Progress:
    """Where training stands: optimizer steps done and samples consumed by the whole job."""

    iteration: int = 0
    consumed_samples: int = 0


def rng_device() -> str:
    """The device type whose RNG tracker this process runs: megatron's tracker holds CUDA generator states
    on a GPU and CPU ones here, and neither takes the other's."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def saved_rng_device(state: dict) -> str:
    """The device type an RNG state was saved on (older checkpoints: a GPU's carries a 'cuda' entry)."""
    return state.get("device") or ("cuda" if "cuda" in state else "cpu")


def get_rng_state() -> dict:
    """Every RNG stream that affects training: python, numpy, torch (CPU/CUDA), megatron tracker, and the
    device type the tracker's states belong to."""
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
             "tracker": tensor_parallel.get_cuda_rng_tracker().get_states(), "device": rng_device()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if torch.cuda.is_available() and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"])
    tensor_parallel.get_cuda_rng_tracker().set_states(state["tracker"])


def _sharded_rng() -> ShardedObject:
    """One RNG object per (PP, TP) rank; DP replicas hold identical streams, so DP rank 0 saves."""
    shape = (parallel_state.get_pipeline_model_parallel_world_size(),
             parallel_state.get_tensor_model_parallel_world_size())
    offset = (parallel_state.get_pipeline_model_parallel_rank(), parallel_state.get_tensor_model_parallel_rank())
    replica = parallel_state.get_data_parallel_rank(with_context_parallel=True)
    return ShardedObject("rng_state", get_rng_state(), shape, offset, replica_id=replica)


def training_state_dict(model, optimizer, scheduler, progress: Progress, sharding_type: str | None,
                        is_loading: bool, with_rng: bool = True) -> dict:
    """The sharded state dict for save or load (``model`` is the unwrapped module, not DDP).

    ``sharding_type`` is the distributed optimizer's layout (None for megatron's other optimizers).
    """
    model_sd = model.sharded_state_dict()
    state = {
        "model": model_sd,
        "optimizer": optimizer.sharded_state_dict(model_sd, is_loading=is_loading,
                                                  metadata=sharding_metadata(sharding_type)),
        "scheduler": scheduler.state_dict(),
        "data": {"consumed_samples": progress.consumed_samples},
        "iteration": progress.iteration,
    }
    if with_rng:
        state["rng"] = _sharded_rng()
    return state
