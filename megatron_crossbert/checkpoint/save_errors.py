"""Say why a checkpoint save failed, in one line on every rank: above all, a full disk.

What a failed save looks like from the inside (megatron-core 0.19, torch 2.13):

- ``torch.save`` onto a full filesystem raises ``RuntimeError("... unexpected pos N vs M")`` whose
  ``__context__`` is the real ``OSError(ENOSPC)``.
- megatron's writer (``FileSystemWriterAsync.write_preloaded_data_multithread``, used by sync *and*
  async saves) drops that exception: it asserts on it, and the assertion becomes ``RuntimeError("An
  error is caught while starting worker 0, error: <class 'RuntimeError'>")``, then ``RuntimeError(
  "Worker failure: ...")`` inside DCP's ``CheckpointException`` (a ``BaseException``). Neither the
  errno nor "No space" survives.
- Only the coordinator's ``CheckpointException.failures`` holds the ranks' exceptions, pickled
  (which drops ``__cause__``/``__context__``); every other rank gets ``failures == {}``.

So the exception chain is evidence where it has it (an ``OSError`` from our own commit writes, or a
future megatron that keeps the cause); otherwise the filesystem is asked: a write probe in the
checkpoint directory that fails with ENOSPC/EDQUOT (quotas do not show in ``statvfs``), or less
free space than the save needed. Every rank decides alone: checkpoints live on a filesystem all
ranks share, and no collective is safe after a failed collective.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from megatron_crossbert.checkpoint import fault_points
from megatron_crossbert.checkpoint.errors import CheckpointSaveError, DiskFullError
from megatron_crossbert.checkpoint.directories import complete_checkpoints, iteration_dir_name
from megatron_crossbert.outputs import NO_SPACE_ERRNOS, iter_causes, no_space_in_chain

PROBE_BYTES = 1 << 20
"""A write probe this large fails on a full disk; it is deleted at once."""


@dataclass(frozen=True)
class SaveTarget:
    """What a save's failure message names: where, which save, and what is still complete."""

    root: Path
    """The checkpoint root (``--save``)."""
    name: str
    """The ``iter_*`` directory being written."""
    last_complete: str | None
    """The newest complete checkpoint when the save started (None: there is none yet)."""
    needed_bytes: int
    """Bytes of that checkpoint: what this save will need (same model, same format); 0 if unknown."""

    @classmethod
    def of(cls, root: str | Path, iteration: int) -> SaveTarget:
        complete = complete_checkpoints(root)
        last = complete[-1] if complete else None
        return cls(Path(root), iteration_dir_name(iteration), last.name if last else None,
                   checkpoint_bytes(last) if last else 0)

    def last_good(self) -> str:
        return (f"the last complete checkpoint is {self.last_complete}" if self.last_complete
                else "there is no complete checkpoint yet")


def checkpoint_bytes(ckpt_dir: str | Path) -> int:
    """Bytes of every file in a checkpoint directory (a few dozen files: cheap)."""
    return sum(p.stat().st_size for p in Path(ckpt_dir).rglob("*") if p.is_file())


def existing_dir(path: str | Path) -> Path:
    """``path`` or its nearest existing ancestor (a save dir may not exist yet)."""
    path = Path(path).absolute()
    while not path.is_dir() and path != path.parent:
        path = path.parent
    return path


def free_bytes(path: str | Path) -> int:
    """Bytes an unprivileged writer may still use on ``path``'s filesystem (``statvfs``)."""
    stat = os.statvfs(existing_dir(path))
    return stat.f_bavail * stat.f_frsize


def probe_says_full(directory: str | Path, nbytes: int = PROBE_BYTES) -> bool:
    """Write and fsync ``nbytes`` in ``directory``; True when that fails for lack of space or quota."""
    try:
        with tempfile.TemporaryFile(dir=existing_dir(directory)) as handle:
            handle.write(b"\0" * nbytes)
            handle.flush()
            os.fsync(handle.fileno())
    except OSError as err:
        return err.errno in NO_SPACE_ERRNOS
    return False


def out_of_space(err: BaseException | None, directory: str | Path, needed_bytes: int = 0) -> bool:
    """The evidence, cheapest first: the chain, the free space the save needed, a write probe."""
    if err is not None and no_space_in_chain(err):
        return True
    if needed_bytes and free_bytes(directory) < needed_bytes:
        return True
    return probe_says_full(directory)


def root_cause_line(err: BaseException) -> str:
    """The deepest message behind ``err`` on one line (DCP's own str() is a multi-line traceback)."""
    causes = list(iter_causes(err))
    leaves = [c for c in causes if c.__cause__ is None and c.__context__ is None and not getattr(c, "failures", None)]
    deepest = (leaves or causes)[-1]
    text = " ".join(str(deepest).split()) or type(deepest).__name__
    return f"{type(deepest).__name__}: {text[:200]}"


def save_failure(err: BaseException, target: SaveTarget) -> CheckpointSaveError:
    """The one-line error for a failed save (raise it ``from err``; --debug shows the chain)."""
    if out_of_space(err, target.root / target.name, target.needed_bytes):
        return DiskFullError(f"{target.root}: no space left on device while saving {target.name}; "
                             f"{target.last_good()}")
    return CheckpointSaveError(f"{target.root}: saving {target.name} failed ({root_cause_line(err)}); "
                               f"{target.last_good()}")


def room_problem(target: SaveTarget, what: str, reclaimable: int = 0) -> str | None:
    """Why ``target.needed_bytes`` will not fit before ``what`` writes anything; None when it fits.

    ``reclaimable``: bytes the save frees first (a stale partial directory of the same iteration).
    """
    if fault_points.space_checks_skipped() or not target.needed_bytes:
        return None
    free = free_bytes(target.root) + reclaimable
    if free >= target.needed_bytes:
        return None
    return (f"{target.root}: no space left on device for {what}: {free / 2**20:.1f} MiB free, a checkpoint "
            f"takes {target.needed_bytes / 2**20:.1f} MiB; {target.last_good()}")


def check_room_to_start(save_dir: str | Path | None) -> None:
    """Before a run writes anything (TensorBoard included): DiskFullError when the save dir cannot
    hold one more checkpoint the size of its newest complete one."""
    if not save_dir:
        return
    target = SaveTarget.of(save_dir, 0)
    problem = room_problem(target, "this run's next checkpoint")
    if problem:
        raise DiskFullError(problem)
