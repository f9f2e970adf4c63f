"""Run a function on N spawned gloo ranks and collect each rank's return value.

Each spawn costs ~10 s on 2 cores (mostly imports), so tests put many checks into one worker.
The worker must be a module-level function ``fn(rank, world_size, *args) -> picklable``.
"""

from __future__ import annotations

import os
import traceback

import torch.multiprocessing as mp

from megatron_crossbert.platform.distributed import free_port


def _entry(rank: int, world_size: int, port: int, fn, args, queue) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank))
    import torch

    torch.set_num_threads(1)
    try:
        queue.put((rank, "ok", fn(rank, world_size, *args)))
    except BaseException:  # report the traceback to the parent, then fail the rank
        queue.put((rank, "error", traceback.format_exc()))
        raise
    finally:
        from megatron_crossbert.platform.distributed import destroy

        destroy()


def run_ranks(fn, world_size: int = 2, *args, timeout: float = 600.0) -> list:
    """Spawn ``world_size`` ranks running ``fn``; return their results ordered by rank."""
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    port = free_port()
    procs = [ctx.Process(target=_entry, args=(r, world_size, port, fn, args, queue)) for r in range(world_size)]
    for proc in procs:
        proc.start()
    results: dict[int, object] = {}
    errors: list[str] = []
    for _ in range(world_size):
        rank, status, payload = queue.get()
        if status != "ok":
            errors.append(f"rank {rank}:\n{payload}")
            break
        results[rank] = payload
    for proc in procs:
        proc.join(timeout=5 if errors else timeout)
        if proc.is_alive():
            proc.kill()
    if errors:
        raise AssertionError("\n".join(errors))
    return [results[r] for r in range(world_size)]
