"""Readers pin the checkpoint they read; pruning leaves a pinned checkpoint alone until a later save.

A training run prunes its checkpoints older than the ``checkpoint.keep_last`` newest after every
save. Pruning that knows no readers breaks them: an export, probe or MTEB run of the same save
directory (or another run's ``--load``/``--init-from`` of it) resolves 'latest', and by the time it
reads the shards they are gone; every export fails, saying the checkpoint is "incomplete".

- Every save creates an empty ``iter_*/.readers.lock`` at its commit, after the shards and before the
  records (:func:`create_pin_file`); checksums cover it like any file. Readers never create it: a reader adds nothing to a checkpoint it did not
  write, so one saved before pins has none and is read unpinned.
- A reader holds ``flock(LOCK_SH)`` on it (opened read-only) from before its checks until it has
  read what it needs (:class:`ReaderPin`, held by the ``VerifiedCheckpoint``), then checks that the path
  still names that file in a complete checkpoint. A root reference whose checkpoint was pruned before
  the pin took hold is resolved again (:func:`pin_resolved`); an explicit ``iter_*`` one is refused
  with the reason.
- The pruner takes ``flock(LOCK_EX | LOCK_NB)`` (opened read-write: NFS emulates flock with byte-range
  locks, and an exclusive one needs a writable descriptor). Held by a reader: the checkpoint is kept
  past ``keep_last`` and a later save prunes it (:func:`remove_unless_read`). Free: the directory is
  renamed to ``fsutil``'s temporary name while the lock is held, then deleted, so no reader ever sees
  a half-deleted checkpoint, and what a pruner killed mid-way leaves is a name the next start removes.

Why a pin, not a reader that falls back to the newest checkpoint: the reader gets exactly the
checkpoint it resolved (an export of 'latest' is the checkpoint that was latest when it began), a
read slower than the save interval cannot chase 'latest' forever, and an explicit ``iter_*``
reference has nothing to fall back to. A dedicated file, not ``.metadata``: on NFS, closing *any*
descriptor of a file drops its byte-range locks (why ``run.lock`` is a file of its own too). Where
flock is missing, nothing is pinned, as before, and a reader whose checkpoint vanishes says why
(:func:`vanished`).
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import shutil
import weakref
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from megatron_crossbert.checkpoint.directories import ITER_PREFIX, is_complete, iteration_of, pruned_since
from megatron_crossbert.checkpoint.errors import CheckpointError
from megatron_crossbert.fsutil import remove_stale_temporaries, temp_sibling

logger = logging.getLogger(__name__)

PIN_FILE = ".readers.lock"
_NO_FLOCK = (errno.ENOSYS, errno.ENOLCK, errno.EOPNOTSUPP)


def create_pin_file(ckpt_dir: Path) -> None:
    """The writer, once it created ``ckpt_dir``: the empty file readers lock (the umask decides its mode)."""
    (ckpt_dir / PIN_FILE).touch()


def _lock(fd: int, operation: int) -> bool | None:
    """True: locked; False: held elsewhere (non-blocking only); None: this filesystem has no flock."""
    try:
        fcntl.flock(fd, operation)
        return True
    except BlockingIOError:
        return False
    except OSError as err:
        if err.errno in _NO_FLOCK:
            return None
        raise


class ReaderPin:
    """A shared lock on one checkpoint's pin file; :meth:`release` (or garbage collection) drops it."""

    def __init__(self, fd: int) -> None:
        self._release = weakref.finalize(self, os.close, fd)

    def release(self) -> None:
        self._release()

    @classmethod
    def take(cls, ckpt_dir: Path) -> ReaderPin | None | bool:
        """Pin ``ckpt_dir``: the pin; None for a checkpoint without a pin file (saved before pins) or a
        filesystem without flock; False when it was removed before the pin took hold."""
        try:
            fd = os.open(ckpt_dir / PIN_FILE, os.O_RDONLY)
        except FileNotFoundError:
            return None if is_complete(ckpt_dir) else False
        pin = cls(fd)
        if _lock(fd, fcntl.LOCK_SH) is None:
            pin.release()
            return None
        try:  # the pruner renames and deletes while holding its lock: is this still the checkpoint?
            same = os.stat(ckpt_dir / PIN_FILE).st_ino == os.fstat(fd).st_ino and is_complete(ckpt_dir)
        except FileNotFoundError:
            same = False
        if not same:
            pin.release()
            return False
        return pin


def vanished(ckpt_dir: Path) -> CheckpointError:
    """Why a checkpoint that was complete when resolved is gone now, and what to do."""
    return CheckpointError(f"{ckpt_dir}: was removed while this command read it ({pruned_since(ckpt_dir.parent)}): "
                           f"run the command again, or copy the checkpoint before reading it")


@contextmanager
def reading(ckpt_dir: Path) -> Iterator[None]:
    """Around a read of a checkpoint (pinned or, saved before pins, not): an error because the
    directory disappeared meanwhile says so (:func:`vanished`) instead of calling it incomplete."""
    try:
        yield
    except BaseException as err:  # DCP's CheckpointException derives from BaseException
        if isinstance(err, (KeyboardInterrupt, SystemExit)) or ckpt_dir.is_dir():
            raise
        raise vanished(ckpt_dir) from err


def pin_resolved(reference: Path, resolve: Callable[[Path], Path], attempts: int = 3) -> tuple[Path, ReaderPin | None]:
    """Resolve ``reference`` and pin what it names. A root reference (one that follows 'latest') whose
    checkpoint was pruned in between is resolved again; an explicit ``iter_*`` one cannot be."""
    for _ in range(attempts):
        ckpt_dir = resolve(reference)
        pin = ReaderPin.take(ckpt_dir)
        if pin is not False:
            return ckpt_dir, pin
        if Path(reference).resolve() == ckpt_dir.resolve():
            break
    raise vanished(ckpt_dir)


def remove_unless_read(ckpt_dir: Path) -> bool:
    """Rank 0's pruning of one checkpoint: False, and nothing touched, while a reader pins it; else
    renamed to a temporary name under the exclusive lock, then deleted."""
    try:
        fd = os.open(ckpt_dir / PIN_FILE, os.O_RDWR)
    except FileNotFoundError:  # saved before pins, or partial before it was created
        fd = None
    try:
        if fd is not None and _lock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB) is False:
            return False
        doomed = Path(temp_sibling(ckpt_dir))
        os.rename(ckpt_dir, doomed)
        shutil.rmtree(doomed, ignore_errors=True)
        return True
    finally:
        if fd is not None:
            os.close(fd)


def remove_stale_removals(root: Path) -> list[Path]:
    """At a run's start (rank 0): delete what a pruner killed mid-way left (``iter_*.tmp-<host>-<pid>-…``
    of dead processes of this host; other hosts' are named in a warning)."""
    leftovers = {p.name.split(".tmp-")[0] for p in Path(root).glob(f"{ITER_PREFIX}*.tmp-*")}
    return remove_stale_temporaries([Path(root) / name for name in sorted(leftovers) if iteration_of(name) is not None])
