"""Decide where a run starts, and refuse any start that could destroy a complete checkpoint.

Rules (all checked before anything is built or written, on every rank):

- ``checkpoint.resume_from`` names the checkpoint explicitly; otherwise ``load_dir``'s 'latest';
  otherwise ``save_dir``'s 'latest'. A 'latest' that is junk, empty or points at an incomplete
  directory is an error (``checkpoint_format.read_latest``), never a silent fresh start.
- A save_dir holding complete checkpoints that this run would not continue from (no valid
  'latest', a checkpoint newer than the one resumed, or a run resumed from elsewhere) refuses to
  start. The message names the newest complete checkpoint and the two ways out: ``--resume-from``
  or ``--overwrite``, which moves the ones in the way into ``save_dir/replaced_<UTC time>/``.
- LR schedule fields that differ from the checkpoint's are refused, kept or applied according to
  ``checkpoint.lr_schedule_on_resume``, and logged either way.
"""

from __future__ import annotations

import logging
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from megatron_crossbert.checkpoint_format import (
    LATEST_FILE,
    CheckpointError,
    complete_checkpoints,
    is_complete,
    iteration_of,
    read_run_config,
    resolve_checkpoint_dir,
    resolve_latest,
)
from megatron_crossbert.config import RunConfig

logger = logging.getLogger(__name__)

SCHEDULE_FIELDS = ("train_iters", "lr_warmup_iters", "lr_decay_style", "lr", "min_lr")
"""TrainingConfig fields the LR scheduler is built from (see training.optimizer.build_scheduler)."""


@dataclass
class StartPlan:
    """Where this run starts and what ``--overwrite`` moves out of the way first."""

    source: Path | None = None
    """The complete iter_* directory to resume from; None = fresh start (or init_from weights)."""
    move_aside: list[Path] = field(default_factory=list)
    """Paths in save_dir to move into save_dir/replaced_<time>/ (only with checkpoint.overwrite)."""


def _ways_out(save_dir: Path, newest: Path) -> str:
    return (f"pass --resume-from {newest.name} (checkpoint.resume_from) to resume it, or --overwrite "
            f"(checkpoint.overwrite) to start over; --overwrite moves the existing checkpoints into "
            f"{save_dir}/replaced_<time>/ and deletes nothing")


def _explicit_source(run_cfg: RunConfig) -> Path:
    """checkpoint.resume_from as a complete iter_* directory (a path, or a name in load/save dir)."""
    ckpt = run_cfg.checkpoint
    name = Path(ckpt.resume_from)
    candidates = [name] + [Path(root) / name for root in (ckpt.load_dir, ckpt.save_dir) if root]
    for candidate in candidates:
        if is_complete(candidate):
            return candidate
    where = ", ".join(str(c) for c in candidates)
    raise CheckpointError(f"checkpoint.resume_from={ckpt.resume_from!r}: no complete checkpoint at {where} "
                          f"(a complete one has run_config.json)")


def _latest_in_save_dir(save_dir: Path) -> Path | None:
    """save_dir's 'latest' target; a damaged pointer beside complete checkpoints names the way out."""
    complete = complete_checkpoints(save_dir)
    try:
        target = resolve_latest(save_dir)
    except CheckpointError as err:
        if not complete:
            raise
        raise CheckpointError(f"{err}; {save_dir} holds complete checkpoints (newest {complete[-1].name}): "
                              f"{_ways_out(save_dir, complete[-1])}") from None
    if target is None and complete:
        raise CheckpointError(f"{save_dir}: holds complete checkpoints (newest {complete[-1].name}) but no "
                              f"'{LATEST_FILE}' file; refusing to start over on top of them: "
                              f"{_ways_out(save_dir, complete[-1])}")
    return target


def _in_the_way(save_dir: Path, source: Path | None) -> list[Path]:
    """Complete checkpoints in save_dir that the new run's saves could collide with or prune."""
    complete = complete_checkpoints(save_dir)
    if source is None or source.resolve().parent != save_dir.resolve():
        return complete
    iteration = iteration_of(source) or 0
    return [p for p in complete if iteration_of(p) > iteration]


def _source(run_cfg: RunConfig) -> Path | None:
    ckpt = run_cfg.checkpoint
    if ckpt.resume_from:
        return _explicit_source(run_cfg)
    if ckpt.load_dir:
        return resolve_checkpoint_dir(ckpt.load_dir)
    if ckpt.save_dir and not ckpt.overwrite:
        return _latest_in_save_dir(Path(ckpt.save_dir))
    return None


def plan_start(run_cfg: RunConfig) -> StartPlan:
    """Read-only: the checkpoint to resume and what overwrite must move; CheckpointError to refuse."""
    ckpt = run_cfg.checkpoint
    plan = StartPlan(source=_source(run_cfg))
    if not ckpt.save_dir:
        return plan
    save_dir = Path(ckpt.save_dir)
    blocking = _in_the_way(save_dir, plan.source)
    if blocking and not ckpt.overwrite:
        where = f"resuming {plan.source}" if plan.source is not None else "starting from step 0"
        raise CheckpointError(f"{save_dir}: holds complete checkpoints this run would overwrite or prune "
                              f"({', '.join(p.name for p in blocking)}) while {where}: "
                              f"{_ways_out(save_dir, blocking[-1])}")
    if ckpt.overwrite:
        latest = save_dir / LATEST_FILE
        plan.move_aside = blocking + ([latest] if latest.is_file() and blocking else [])
    return plan


def apply_plan(plan: StartPlan, save_dir: str | None) -> Path | None:
    """Rank 0 only, after every rank planned: move ``plan.move_aside`` into save_dir/replaced_<time>/."""
    if not plan.move_aside or not save_dir:
        return None
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    target = Path(tempfile.mkdtemp(prefix=f"replaced_{stamp}_", dir=save_dir))  # unique, never reused
    for path in plan.move_aside:
        path.rename(target / path.name)
    logger.warning("checkpoint.overwrite: moved %s into %s (nothing deleted)",
                   ", ".join(p.name for p in plan.move_aside), target)
    return target


def schedule_changes(saved: RunConfig, current: RunConfig) -> list[str]:
    """'field: checkpoint X -> run Y' for every LR-schedule field that differs."""
    return [f"training.{name}: checkpoint {getattr(saved.training, name)!r} -> run {getattr(current.training, name)!r}"
            for name in SCHEDULE_FIELDS if getattr(saved.training, name) != getattr(current.training, name)]


def check_schedule(ckpt_dir: Path, current: RunConfig) -> list[str]:
    """Apply checkpoint.lr_schedule_on_resume to the differences; returns them (logged when kept/applied)."""
    changes = schedule_changes(read_run_config(ckpt_dir), current)
    policy = current.checkpoint.lr_schedule_on_resume
    if changes and policy == "refuse":
        raise CheckpointError(
            f"{ckpt_dir}: the LR schedule differs from the checkpoint's ({'; '.join(changes)}); set "
            f"--lr-schedule-on-resume checkpoint (keep the saved schedule) or config (apply this run's "
            f"from step {iteration_of(ckpt_dir) or 0} on), or restore the old values")
    if changes:
        verb = "keeping the checkpoint's schedule" if policy == "checkpoint" else "applying this run's schedule"
        logger.warning("resume from %s: LR schedule changed (%s); %s (checkpoint.lr_schedule_on_resume=%s)",
                       ckpt_dir, "; ".join(changes), verb, policy)
    return changes

