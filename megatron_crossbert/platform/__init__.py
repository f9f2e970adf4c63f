"""CPU/gloo compatibility, distributed set-up and CPU thread counts for megatron-core
(see cpu.py, distributed.py, threads.py)."""

from megatron_crossbert.platform.cpu import PATCHED_ATTRIBUTES, apply_cpu_patches, cpu_patches_active
from megatron_crossbert.platform.distributed import (
    destroy,
    device,
    free_port,
    init_process_group,
    initialize,
    is_rank_zero,
    seed_everything,
)

__all__ = [
    "PATCHED_ATTRIBUTES", "apply_cpu_patches", "cpu_patches_active", "destroy", "device", "free_port",
    "init_process_group", "initialize", "is_rank_zero", "seed_everything",
]
