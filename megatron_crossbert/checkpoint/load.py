"""Load checkpoints that ``checkpoint.verify`` has already checked: a full resume or the weights only.

Nothing here resolves a reference or parses ``run_config.json``: a :class:`VerifiedCheckpoint`
carries the directory, the saved config, the optimizer layout and Adam implementation, the position
tables an ``init_from`` grows and the verdict of the checksum check, all read once (a load refuses a checkpoint whose contents were not checked), and every read goes through
``safe_pickle.checked_read``. The one exception is :func:`load_model_weights`, the convenience for
callers holding only a path (tests, benchmarks), which opens (and so verifies) it first.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from megatron.core import dist_checkpointing
from megatron.core.dist_checkpointing.mapping import ShardedTensor
from megatron.core.dist_checkpointing.validation import StrictHandling
from torch.distributed.checkpoint.api import CheckpointException as TorchCheckpointException

from megatron_crossbert.checkpoint.errors import CheckpointError
from megatron_crossbert.checkpoint.optimizer_format import (
    SAVE_SHARDING_TYPE,
    OPTIMIZER_IMPL_KEY,
    model_space_load,
    optimizer_impl,
    prime_optimizer_state,
    restore_adam_steps,
)
from megatron_crossbert.checkpoint.pins import reading
from megatron_crossbert.checkpoint.safe_pickle import checked_read
from megatron_crossbert.checkpoint.state import (
    Progress,
    rng_device,
    saved_rng_device,
    set_rng_state,
    training_state_dict,
)
from megatron_crossbert.checkpoint.verify import VerifiedCheckpoint, open_checkpoint
from megatron_crossbert.config import RunConfig
from megatron_crossbert.platform.distributed import seed_everything

logger = logging.getLogger(__name__)


def _checked(source: VerifiedCheckpoint) -> Path:
    """The directory to read; ValueError (a bug, not bad input) when its contents were never checked."""
    if source.contents == "pending":
        raise ValueError(f"{source.directory}: its files were not checked against checksums.json; "
                         f"pass it through checkpoint.verify.verify_contents first")
    return source.directory


def _grow_requests(request: dict, grown: dict[str, int]) -> dict[str, tuple[torch.Tensor, ShardedTensor]]:
    """Replace each position table that grows by a request of the saved (shorter) shape."""
    swapped = {}
    for key, entry in request.items():
        rows = next((saved for suffix, saved in grown.items() if key.endswith(suffix)), None)
        if rows is None or not isinstance(entry, ShardedTensor) or entry.data.shape[0] == rows:
            continue
        saved = torch.empty((rows, *entry.data.shape[1:]), dtype=entry.data.dtype, device=entry.data.device)
        request[key] = ShardedTensor.from_rank_offsets(entry.key, saved, replica_id=entry.replica_id,
                                                       prepend_axis_num=entry.prepend_axis_num)
        swapped[key] = (entry.data, saved)
    return swapped


def _read_entries(request: dict, ckpt_dir: Path, what: str) -> dict:
    """The requested entries, read under the reader's pin (``pins.reading``) and the restricted unpickler
    (``safe_pickle.checked_read``); any failure is one CheckpointError saying what could not be done."""
    try:
        with reading(ckpt_dir), checked_read(ckpt_dir):
            return load_across_layer_impls(request, ckpt_dir)
    except CheckpointError:
        raise
    except (Exception, TorchCheckpointException) as err:  # DCP's CheckpointException is a BaseException
        raise CheckpointError(f"cannot {what} {ckpt_dir}: {err}") from err


def read_model_weights(model, source: VerifiedCheckpoint) -> Path:
    """Load the 'model' entry of a verified checkpoint into ``model`` (any TP/PP layout, local or TE layers).

    ``source.grown_tables`` (an ``init_from`` into a longer context): position tables the model holds more
    rows of than the checkpoint; their saved rows are copied in and the new rows keep the model's initialisation.
    """
    ckpt_dir = _checked(source)
    request = model.sharded_state_dict()
    swapped = _grow_requests(request, source.grown_tables)
    state = _read_entries({"model": request}, ckpt_dir, "load model weights from")
    for key, (table, saved) in swapped.items():
        table = table.detach().clone()
        table[:saved.shape[0]] = state["model"][key]
        state["model"][key] = table
    load_model_state(model, state["model"], ckpt_dir)
    return ckpt_dir


def is_extra_state(key: str) -> bool:
    """Transformer Engine's per-module ``_extra_state`` (FP8 scaling state): the only entries a checkpoint
    written with local layers lacks, and nothing a weight depends on."""
    return key.split("/shard_")[0].endswith("_extra_state")


def load_across_layer_impls(request: dict, ckpt_dir: Path) -> dict:
    """``dist_checkpointing.load`` that lets a checkpoint cross the local/Transformer Engine line: a TE model's
    ``_extra_state`` entries that a local checkpoint lacks are left out (TE starts them afresh, as at
    initialisation; logged), and a TE checkpoint's extra entries are simply not read by a local model. Any
    other requested entry the checkpoint lacks is refused in one line."""
    state, _, absent = dist_checkpointing.load(request, str(ckpt_dir), strict=StrictHandling.RETURN_UNEXPECTED)
    others = sorted(key for key in absent if not is_extra_state(key))
    if others:
        raise CheckpointError(f"{ckpt_dir} lacks {len(others)} entries this model needs: {others[:3]}"
                              f"{'...' if len(others) > 3 else ''}")
    if absent:
        logger.info("%s has no Transformer Engine _extra_state for %d modules (saved with local layers): "
                    "their FP8 scaling state starts afresh", ckpt_dir, len(absent))
    return state


def load_model_state(model, state: dict, ckpt_dir: Path) -> None:
    """``load_state_dict`` tolerating only absent ``_extra_state`` entries (see ``load_across_layer_impls``)."""
    result = model.load_state_dict(state, strict=False)
    missing = [key for key in result.missing_keys if not is_extra_state(key)]
    if missing or result.unexpected_keys:
        raise CheckpointError(f"{ckpt_dir} does not match the model: missing {missing[:5]}, unexpected "
                              f"{result.unexpected_keys[:5]}")


def load_model_weights(model, path: str | Path, verify: str = "full") -> Path:
    """:func:`read_model_weights` for a root or ``iter_*`` reference (opened and verified here); returns
    the directory read."""
    return read_model_weights(model, open_checkpoint(path, verify))


def _same_layout(saved: RunConfig, current: RunConfig) -> bool:
    return (saved.parallel.tensor_model_parallel_size == current.parallel.tensor_model_parallel_size
            and saved.parallel.pipeline_model_parallel_size == current.parallel.pipeline_model_parallel_size)


def _read(ckpt_dir: Path, request: dict, model, optimizer) -> dict:
    """dist_checkpointing.load plus the in-place model/optimizer loads (under no_grad)."""
    # no_grad: the distributed optimizer copies into views of leaf parameters
    with torch.no_grad(), model_space_load(optimizer):
        loaded = _read_entries(request, ckpt_dir, "resume from")
        load_model_state(model, loaded["model"], ckpt_dir)
        optimizer.load_state_dict(loaded["optimizer"])
    return loaded


def _use_saved_wsd(scheduler, saved: RunConfig) -> None:
    """megatron's scheduler state omits the WSD fields: keeping the checkpoint's schedule means taking
    them from its run config (a WSD checkpoint resumed under another style would otherwise fail)."""
    decay = saved.training.scheduler_decay_kwargs()
    scheduler.wsd_decay_steps = decay.get("wsd_decay_steps")
    scheduler.lr_wsd_decay_style = decay.get("lr_wsd_decay_style")


def load_checkpoint(source: VerifiedCheckpoint, model, optimizer, scheduler, run_cfg: RunConfig) -> Progress:
    """Collective: restore model, optimizer, scheduler, RNG and progress from a verified full checkpoint.

    Under a different TP/PP layout, or from another device type, the RNG streams cannot be mapped, so they
    are re-seeded from ``training.seed + iteration`` (a resumed run then does not replay the dropout masks of
    step 1). A change of Adam implementation (torch AdamW, TE or apex FusedAdam) is logged.
    """
    if source.weights_only:
        raise ValueError(f"{source.directory} was verified for a weights-only load, not a resume")
    same_layout = _same_layout(source.saved, run_cfg)
    sharding_type = None
    if run_cfg.parallel.use_distributed_optimizer:
        prime_optimizer_state(optimizer)
        sharding_type = source.sharding_type or SAVE_SHARDING_TYPE
    request = training_state_dict(model, optimizer, scheduler, Progress(), sharding_type, is_loading=True,
                                  with_rng=same_layout)
    note_optimizer_impl(source)
    loaded = _read(_checked(source), request, model, optimizer)
    # resume_schedule already refused or logged any difference; 'config' applies this run's.
    scheduler.override_opt_param_scheduler = run_cfg.checkpoint.lr_schedule_on_resume == "config"
    if not scheduler.override_opt_param_scheduler:
        _use_saved_wsd(scheduler, source.saved)
    scheduler.load_state_dict(loaded["scheduler"])
    if run_cfg.parallel.use_distributed_optimizer:
        restore_adam_steps(optimizer, scheduler.num_steps)
    progress = Progress(int(loaded["iteration"]), int(loaded["data"]["consumed_samples"]))
    restore_rng(loaded.get("rng"), run_cfg.training.seed + progress.iteration)
    return progress


def note_optimizer_impl(source: VerifiedCheckpoint) -> str | None:
    """The Adam implementation that wrote the checkpoint's optimizer state (None: not recorded); a log line
    when this run's differs (their states share names, so the resume continues)."""
    saved, now = source.optimizer_impl, optimizer_impl()
    if saved and saved != now:
        logger.warning("resume: the optimizer state in %s was written by %s; this run continues it with %s",
                       source.directory, saved, now)
    return saved


def restore_rng(saved: dict | None, reseed: int) -> bool:
    """Restore the saved RNG streams, or re-seed with ``reseed`` when there are none to take (another TP/PP
    layout) or they were saved on another device type (a CPU checkpoint resumed on a GPU: the CUDA tracker
    rejects CPU generator states at the first dropout); the latter says so in a log line. True if restored."""
    if saved is not None and saved_rng_device(saved) == rng_device():
        set_rng_state(saved)
        return True
    if saved is not None:
        logger.warning("resume: the RNG states were saved on %s and this run is on %s; re-seeded from "
                       "training.seed + iteration = %d", saved_rng_device(saved), rng_device(), reseed)
    seed_everything(reseed)
    return False
