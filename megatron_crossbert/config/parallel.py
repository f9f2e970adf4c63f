"""The parallel-layout section (tensor, pipeline, sequence and data parallelism)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from megatron_crossbert.config.checks import _positive, _require, setting


@dataclass
class ParallelConfig:
    """The parallel layout; chosen here and nowhere else."""

    SECTION: ClassVar[str] = "parallel"
    tensor_model_parallel_size: int = 1
    """TP degree (heads, FFN and vocab split across ranks)."""
    pipeline_model_parallel_size: int = 1
    """PP degree; encoder layers are split across stages, decoder and LM head live on the last."""
    sequence_parallel: bool = False
    """Shard LayerNorm/dropout activations along the sequence across TP ranks (needs TP > 1)."""
    use_distributed_optimizer: bool = False
    """Shard optimizer state across data-parallel ranks (ZeRO-1)."""
    overlap_grad_reduce: bool = False
    """Overlap the data-parallel gradient reduce with the backward pass."""
    recompute_activations: bool = False
    """Full activation recompute per layer (trade compute for memory)."""
    distributed_timeout_minutes: int = 30
    """Timeout of every collective (Megatron-LM's ``--distributed-timeout-minutes``): a rank stuck longer (a dead
    node, a hung save) fails the job instead of hanging it; raise it when rank 0 builds large dataset indexes."""

    def __post_init__(self) -> None:
        _positive(self, "tensor_model_parallel_size", "pipeline_model_parallel_size", "distributed_timeout_minutes")
        _require(not self.sequence_parallel or self.tensor_model_parallel_size > 1,
                 f"{setting(self, 'sequence_parallel')} needs parallel.tensor_model_parallel_size > 1, got "
                 f"{setting(self, 'tensor_model_parallel_size')}")
