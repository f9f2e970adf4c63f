"""Save and resume full training state with megatron-core ``dist_checkpointing``.

Layout and the 'latest' pointer come from ``megatron_crossbert.checkpoint_format``. A save is
complete only once every rank has written its shards AND rank 0 has written ``run_config.json``;
'latest' is replaced atomically after that. A crash (or SIGKILL) mid-save therefore leaves the
previous checkpoint as the one readers resolve. The partial directory is removed by the next save
of the same iteration or pruned later.

What is saved: model and optimizer as sharded tensors (reshardable across TP/PP, and across DP
with the distributed optimizer's ``dp_reshardable`` format), the LR scheduler, consumed samples and
iteration as common state, and RNG states as one ShardedObject per (PP, TP) rank. RNG states can
only be restored under the same TP/PP layout; on a different layout they are re-seeded instead.
"""

from __future__ import annotations

import os
import random
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from megatron.core import dist_checkpointing, parallel_state, tensor_parallel
from megatron.core.dist_checkpointing.mapping import ShardedObject
from torch.distributed.checkpoint.api import CheckpointException as TorchCheckpointException

from megatron_crossbert.checkpoint_format import (
    ITER_PREFIX,
    LATEST_FILE,
    RUN_CONFIG_FILE,
    CheckpointError,
    atomic_write_text,
    checked_read,
    complete_checkpoints,
    is_complete,
    iteration_dir_name,
    iteration_of,
    latest_iteration,
    load_model_weights,
    read_run_config,
    resolve_checkpoint_dir,
)
from megatron_crossbert.config import RunConfig
from megatron_crossbert.platform import is_rank_zero, seed_everything
from megatron_crossbert.training.tokenizer_check import check_checkpoint_tokenizer, write_checkpoint_record

SLEEP_IN_SAVE_ENV = "CROSSBERT_TEST_SLEEP_IN_SAVE"
"""Test hook, "ITERATION:SECONDS": sleep that long after the shards of that iteration's save are
written but before the save is committed, so a test can kill the process mid-save."""

# Fields that fix parameter shapes or the meaning of positions: a mismatch makes a resume wrong.
_MODEL_FIELDS = ("arch", "vocab_size", "hidden_size", "num_layers", "num_attention_heads", "ffn",
                 "max_position_embeddings", "decoder_num_layers", "dec_hidden", "dec_heads", "dec_ffn")


@dataclass
class Progress:
    """Where training stands: optimizer steps done and samples consumed by the whole job."""

    iteration: int = 0
    consumed_samples: int = 0


def _barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def config_mismatches(saved: RunConfig, current: RunConfig, *, weights_only: bool = False) -> list[str]:
    """Human-readable differences that make ``saved`` unusable for ``current``."""
    diffs = [f"model.{name}: checkpoint {getattr(saved.model, name)!r} vs run {getattr(current.model, name)!r}"
             for name in _MODEL_FIELDS if getattr(saved.model, name) != getattr(current.model, name)]
    if not weights_only and saved.data.seq_length != current.data.seq_length:
        diffs.append(f"data.seq_length: checkpoint {saved.data.seq_length} vs run {current.data.seq_length}")
    return diffs


def _layout_mismatch(saved: RunConfig, current: RunConfig) -> list[str]:
    """The distributed optimizer's dp_reshardable format reshards across DP only, not TP/PP."""
    if not (saved.parallel.use_distributed_optimizer and current.parallel.use_distributed_optimizer):
        return []
    if _same_layout(saved, current):
        return []
    return [f"parallel: the distributed-optimizer state was saved at TP={saved.parallel.tensor_model_parallel_size}"
            f"/PP={saved.parallel.pipeline_model_parallel_size} and can only be resumed at that TP/PP (any DP); "
            f"resume at that layout, or load the weights only with checkpoint.init_from"]


def check_compatible(ckpt_dir: Path, current: RunConfig, *, weights_only: bool = False) -> RunConfig:
    """Raise CheckpointError naming every incompatible field; returns the saved config."""
    saved = read_run_config(ckpt_dir)
    diffs = config_mismatches(saved, current, weights_only=weights_only)
    if not weights_only:
        diffs += _layout_mismatch(saved, current)
    if diffs:
        raise CheckpointError(f"checkpoint {ckpt_dir} is incompatible with this run:\n  " + "\n  ".join(diffs))
    return saved


def get_rng_state() -> dict:
    """Every RNG stream that affects training: python, numpy, torch (CPU/CUDA), megatron tracker."""
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
             "tracker": tensor_parallel.get_cuda_rng_tracker().get_states()}
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


def _optimizer_metadata(run_cfg: RunConfig) -> dict | None:
    if run_cfg.parallel.use_distributed_optimizer:
        return {"distrib_optim_sharding_type": "dp_reshardable"}
    return None


def prime_optimizer_state(optimizer) -> None:
    """Give a fresh optimizer zero Adam moments and step 0 before it is loaded into.

    megatron's DistributedOptimizer.state_dict() reads a single 'step' from torch's Adam state when
    neither Apex nor Transformer Engine is installed (the CPU case) and asserts on an optimizer that
    has not stepped yet; its own init_state_fn does not create 'step'. The loaded checkpoint then
    overwrites every value set here.
    """
    for inner in getattr(optimizer, "chained_optimizers", [optimizer]):
        torch_opt = getattr(inner, "optimizer", None)
        if not isinstance(torch_opt, (torch.optim.Adam, torch.optim.AdamW)):
            continue
        for group in torch_opt.param_groups:
            for param in group["params"]:
                state = torch_opt.state[param]
                if not state:
                    state.update(step=torch.tensor(0.0), exp_avg=torch.zeros_like(param.data),
                                 exp_avg_sq=torch.zeros_like(param.data))


def restore_adam_steps(optimizer, steps: int) -> None:
    """Set every parameter's Adam 'step' to ``steps``, each in its own tensor.

    Without Apex/TE, megatron's DistributedOptimizer load leaves torch AdamW's per-parameter 'step'
    wrong (one tensor shared by every parameter, and reset to 0 with the dp_reshardable format), so
    the bias correction of a resumed run would differ. Applied optimizer steps equal the scheduler's
    step count here (both advance only when a step is applied), which gives the true value.
    """
    for inner in getattr(optimizer, "chained_optimizers", [optimizer]):
        torch_opt = getattr(inner, "optimizer", None)
        if isinstance(torch_opt, torch.optim.Optimizer):
            for state in torch_opt.state.values():
                if isinstance(state.get("step"), torch.Tensor):
                    state["step"] = torch.tensor(float(steps), dtype=state["step"].dtype,
                                                 device=state["step"].device)


def _state_dict(model, optimizer, scheduler, progress: Progress, run_cfg: RunConfig,
                is_loading: bool, with_rng: bool = True) -> dict:
    """The sharded state dict for save or load (``model`` is the unwrapped module, not DDP)."""
    model_sd = model.sharded_state_dict()
    state = {
        "model": model_sd,
        "optimizer": optimizer.sharded_state_dict(model_sd, is_loading=is_loading,
                                                  metadata=_optimizer_metadata(run_cfg)),
        "scheduler": scheduler.state_dict(),
        "data": {"consumed_samples": progress.consumed_samples},
        "iteration": progress.iteration,
    }
    if with_rng:
        state["rng"] = _sharded_rng()
    return state


_WRITTEN_THIS_RUN: set[Path] = set()
"""Checkpoint directories this process completed; the only complete ones a save may replace."""


def _prepare_dir(ckpt_dir: Path) -> None:
    """Remove a stale partial save of the same iteration (its shards would clash), then create.

    A complete checkpoint that this process did not write is never removed (start_guard refuses
    such runs up front; this is the last line of defence).
    """
    if is_complete(ckpt_dir) and ckpt_dir.resolve() not in _WRITTEN_THIS_RUN:
        raise CheckpointError(f"{ckpt_dir}: a complete checkpoint from an earlier run is in the way; "
                              f"refusing to overwrite it (move it away or use another --save)")
    if is_rank_zero():
        if ckpt_dir.exists():
            shutil.rmtree(ckpt_dir)
        ckpt_dir.mkdir(parents=True)
    _barrier()


def prune_checkpoints(root: Path, keep_last: int) -> list[Path]:
    """Delete complete checkpoints older than the newest ``keep_last`` and stale partial ones (rank 0).

    Only ``iter_<digits>`` directories are considered, ordered by iteration; the one 'latest' names
    and anything newer than it are never touched.
    """
    current = latest_iteration(root)
    if keep_last <= 0 or current is None:
        return []
    complete = complete_checkpoints(root)
    partial = [p for p in root.glob(f"{ITER_PREFIX}*") if p.is_dir() and iteration_of(p) is not None
               and not is_complete(p)]
    doomed = [p for p in complete[:-keep_last] + partial if iteration_of(p) < current]
    for path in doomed:
        shutil.rmtree(path, ignore_errors=True)
    return doomed


def _test_sleep(iteration: int) -> None:
    spec = os.environ.get(SLEEP_IN_SAVE_ENV, "")
    target, _, seconds = spec.partition(":")
    if spec and int(target) == iteration:
        time.sleep(float(seconds))


def save_checkpoint(root: str | Path, model, optimizer, scheduler, progress: Progress,
                    run_cfg: RunConfig) -> Path:
    """Collective: write ``root/iter_XXXXXXX`` on all ranks, then commit it (run_config, 'latest')."""
    root = Path(root)
    ckpt_dir = root / iteration_dir_name(progress.iteration)
    _prepare_dir(ckpt_dir)
    state = _state_dict(model, optimizer, scheduler, progress, run_cfg, is_loading=False)
    dist_checkpointing.save(state, str(ckpt_dir))
    _test_sleep(progress.iteration)
    _barrier()
    if is_rank_zero():
        write_checkpoint_record(ckpt_dir, run_cfg)
        run_cfg.save_json(ckpt_dir / RUN_CONFIG_FILE)
        atomic_write_text(root / LATEST_FILE, ckpt_dir.name)
        prune_checkpoints(root, run_cfg.checkpoint.keep_last)
    _WRITTEN_THIS_RUN.add(ckpt_dir.resolve())
    _barrier()
    return ckpt_dir


def _same_layout(saved: RunConfig, current: RunConfig) -> bool:
    return (saved.parallel.tensor_model_parallel_size == current.parallel.tensor_model_parallel_size
            and saved.parallel.pipeline_model_parallel_size == current.parallel.pipeline_model_parallel_size)


def _read(ckpt_dir: Path, request: dict, model, optimizer) -> dict:
    """dist_checkpointing.load plus the in-place model/optimizer loads (under no_grad)."""
    with torch.no_grad():  # the distributed optimizer copies into views of leaf parameters
        try:
            with checked_read(ckpt_dir):
                loaded = dist_checkpointing.load(request, str(ckpt_dir))
        except CheckpointError:
            raise
        except (Exception, TorchCheckpointException) as err:  # the latter derives from BaseException
            raise CheckpointError(f"cannot resume from {ckpt_dir}: {err}") from err
        model.load_state_dict(loaded["model"])
        optimizer.load_state_dict(loaded["optimizer"])
    return loaded


def load_checkpoint(path: str | Path, model, optimizer, scheduler, run_cfg: RunConfig) -> tuple[Progress, Path]:
    """Collective: restore model, optimizer, scheduler, RNG and progress from ``path`` (root or iter dir).

    Under a different TP/PP layout the RNG streams cannot be mapped, so they are re-seeded from
    ``training.seed + iteration`` (a resumed run then does not replay the dropout masks of step 1).
    """
    ckpt_dir = resolve_checkpoint_dir(path)
    same_layout = _same_layout(check_compatible(ckpt_dir, run_cfg), run_cfg)
    if run_cfg.parallel.use_distributed_optimizer:
        prime_optimizer_state(optimizer)
    request = _state_dict(model, optimizer, scheduler, Progress(), run_cfg, is_loading=True, with_rng=same_layout)
    loaded = _read(ckpt_dir, request, model, optimizer)
    # start_guard.check_schedule already refused or logged any difference; 'config' applies this run's.
    scheduler.override_opt_param_scheduler = run_cfg.checkpoint.lr_schedule_on_resume == "config"
    scheduler.load_state_dict(loaded["scheduler"])
    if run_cfg.parallel.use_distributed_optimizer:
        restore_adam_steps(optimizer, scheduler.num_steps)
    progress = Progress(int(loaded["iteration"]), int(loaded["data"]["consumed_samples"]))
    if same_layout:
        set_rng_state(loaded["rng"])
    else:
        seed_everything(run_cfg.training.seed + progress.iteration)
    return progress, ckpt_dir


def init_from_weights(path: str | Path, model, run_cfg: RunConfig) -> Path:
    """Load model weights only (fresh optimizer/progress), after checking shapes and tokenizer."""
    ckpt_dir = resolve_checkpoint_dir(path)
    check_compatible(ckpt_dir, run_cfg, weights_only=True)
    check_checkpoint_tokenizer(ckpt_dir, run_cfg)
    return load_model_weights(model, ckpt_dir)
