"""Decide where a run starts, verify that checkpoint once, and refuse any start that could destroy one.

Rules (all checked before anything is built or written, on every rank):

- ``checkpoint.resume_from`` names the checkpoint explicitly; otherwise ``load_dir``'s 'latest';
  otherwise ``save_dir``'s 'latest'. A 'latest' that is junk, empty or points at an incomplete
  directory is an error (``directories.read_latest``), never a silent fresh start. Without one of
  those, ``checkpoint.init_from`` names a checkpoint whose weights alone are loaded.
- The checkpoint found is resolved here once and verified once (``verify.verify_checkpoint``: model
  shape, optimizer layout, LR-schedule policy, tokenizer; the files' checksums follow once the
  process group exists, ``verify.verify_contents``); the :class:`StartChoice` carries the result to
  the load.
- A save_dir holding complete checkpoints that this run would not continue from (no valid
  'latest', a checkpoint newer than the one resumed, or a run resumed from elsewhere) refuses to
  start. The message names the newest complete checkpoint and the two ways out: ``--resume-from``
  or ``--overwrite``, which moves the ones in the way into ``save_dir/replaced_<UTC time>/``.
- A checkpoint whose commit was killed after it was complete and before 'latest' moved (the commit
  journal, ``directories.interrupted_commit``) is where the run continues: an automatic requeue of the
  same command just works. Rank 0 then finishes that commit (moves 'latest', logs it) and removes the
  temporary files killed writers left in save_dir (:func:`apply_start`).
"""

from __future__ import annotations

import logging
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from megatron_crossbert.checkpoint.errors import CheckpointError
from megatron_crossbert.checkpoint.directories import (
    LATEST_FILE,
    PENDING_FILE,
    PendingCommit,
    complete_checkpoints,
    end_commit,
    interrupted_commit,
    is_complete,
    iteration_of,
    point_latest,
    read_latest,
    resolve_checkpoint_dir,
    resolve_latest,
)
from megatron_crossbert.checkpoint.pins import remove_stale_removals
from megatron_crossbert.checkpoint.verify import VerifiedCheckpoint, verify_checkpoint
from megatron_crossbert.config import RunConfig
from megatron_crossbert.fsutil import apply_umask_modes, remove_stale_temporaries

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class StartChoice:
    """Where this run starts and what ``--overwrite`` moves out of the way first."""

    source: VerifiedCheckpoint | None = None
    """The verified checkpoint to resume from (``weights_only=False``) or to take the weights of
    (``checkpoint.init_from``, ``weights_only=True``); None = a fresh start."""
    move_aside: tuple[Path, ...] = ()
    """Paths in save_dir to move into save_dir/replaced_<time>/ (only with checkpoint.overwrite)."""
    finish_commit: PendingCommit | None = None
    """The commit (journal) that completed ``source`` in save_dir without moving 'latest' to it before
    its run was killed; rank 0 moves 'latest' (``directories.interrupted_commit``)."""


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


def _move_aside(run_cfg: RunConfig, source: Path | None) -> tuple[Path, ...]:
    """What ``--overwrite`` moves out of save_dir; CheckpointError when a complete checkpoint is in
    the way without it."""
    ckpt = run_cfg.checkpoint
    if not ckpt.save_dir:
        return ()
    save_dir = Path(ckpt.save_dir)
    blocking = _in_the_way(save_dir, source)
    if blocking and not ckpt.overwrite:
        where = f"resuming {source}" if source is not None else "starting from step 0"
        raise CheckpointError(f"{save_dir}: holds complete checkpoints this run would overwrite or prune "
                              f"({', '.join(p.name for p in blocking)}) while {where}: "
                              f"{_ways_out(save_dir, blocking[-1])}")
    if not ckpt.overwrite:
        return ()
    pointers = [save_dir / name for name in (LATEST_FILE, PENDING_FILE) if (save_dir / name).is_file()]
    return tuple(blocking + (pointers if blocking else []))


def _unfinished_commit(run_cfg: RunConfig, source: Path | None) -> PendingCommit | None:
    """The killed commit of ``source`` when it is save_dir's checkpoint that 'latest' does not name yet."""
    save_dir = run_cfg.checkpoint.save_dir
    if source is None or run_cfg.checkpoint.resume_from or not save_dir:
        return None
    if source.parent.resolve() != Path(save_dir).resolve():
        return None
    latest = read_latest(save_dir)
    return None if latest == source.name else interrupted_commit(save_dir, latest)


def choose_start(run_cfg: RunConfig) -> StartChoice:
    """Read-only: the verified checkpoint to start from and what overwrite must move; CheckpointError to refuse."""
    ckpt = run_cfg.checkpoint
    source = _source(run_cfg)
    move_aside = _move_aside(run_cfg, source)
    if source is not None:
        return StartChoice(verify_checkpoint(source, run_cfg), move_aside,
                         _unfinished_commit(run_cfg, source))
    if ckpt.init_from:
        init_dir = resolve_checkpoint_dir(ckpt.init_from)
        return StartChoice(verify_checkpoint(init_dir, run_cfg, weights_only=True, reference=ckpt.init_from),
                         move_aside)
    return StartChoice(None, move_aside)


def _finish_commit(save_dir: Path, commit: PendingCommit) -> None:
    """Move 'latest' to the checkpoint a killed commit completed, and say so."""
    ckpt_dir = save_dir / commit.checkpoint
    point_latest(ckpt_dir)
    end_commit(save_dir)
    logger.warning("%s was complete but 'latest' still named %s: the run that wrote it (%s) was stopped between "
                   "the two; resuming %s and pointing 'latest' at it", ckpt_dir, commit.after or "nothing",
                   commit.describe_writer(), commit.checkpoint)


def apply_start(choice: StartChoice, save_dir: str | None) -> Path | None:
    """Rank 0 only, after every rank chose: finish a killed commit (``choice.finish_commit``), remove
    what killed writers and pruners left in save_dir (this host's; other hosts' are named), then
    move ``choice.move_aside`` into save_dir/replaced_<time>/ (returned)."""
    if not save_dir:
        return None
    if choice.finish_commit is not None:
        _finish_commit(Path(save_dir), choice.finish_commit)
    # a checkpoint's own temporaries only ever sit in a partial directory, which its next save or pruning removes
    remove_stale_temporaries([Path(save_dir) / LATEST_FILE, Path(save_dir) / PENDING_FILE])
    remove_stale_removals(Path(save_dir))
    if not choice.move_aside:
        return None
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    target = Path(tempfile.mkdtemp(prefix=f"replaced_{stamp}_", dir=save_dir))  # unique, never reused
    apply_umask_modes(target)  # mkdtemp makes 0700; the moved checkpoints stay readable to whoever could read them
    for path in choice.move_aside:
        path.rename(target / path.name)
    logger.warning("checkpoint.overwrite: moved %s into %s (nothing deleted)",
                   ", ".join(p.name for p in choice.move_aside), target)
    return target
