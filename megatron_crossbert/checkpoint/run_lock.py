"""One training run per save directory: ``<save_dir>/run.lock``, held by rank 0 for the run's life.

Two runs writing into one ``--save`` directory interleave checkpoints, prune each other's
directories and can resume from each other's half-written state. The lock is:

- **the kernel's**: ``flock(LOCK_EX | LOCK_NB)`` on a descriptor kept open for the run's life. The
  kernel drops it when the process dies, SIGKILL included, so a dead holder on this host never
  blocks. ``flock`` and not ``fcntl``/``lockf`` record locks: those belong to the process and are
  dropped when it closes *any* descriptor of the file, so reading the holder record below would
  release them. Local filesystems, NFS (Linux emulates flock with byte-range locks, coherent across
  clients unless mounted ``nolock`` or ``local_lock=flock|all``), Lustre mounted ``-o flock``, GPFS
  and CephFS give it across hosts.
- **a record** in the same file (JSON: host, pid, the pid's start time, run start, heartbeat), for
  the refusal message and for filesystems whose flock is node-local (Lustre ``localflock``, NFS
  ``nolock``) or missing (Lustre ``noflock``: ENOSYS). There a record from *another host* whose
  heartbeat is younger than :data:`STALE_AFTER_S` refuses the start; an older one is taken over with
  a warning. A record from *this host* whose process is gone (or whose pid now belongs to another
  process: the start time differs) is taken over, and the log says so.

The file is never deleted (deleting a lock file races with a second opener); release rewrites the
record as released. Readers (export, probe, MTEB, ``--load`` from another run's directory) never
open it.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import socket
import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator

from megatron_crossbert.checkpoint.errors import RunLockedError
from megatron_crossbert.config import RunConfig
from megatron_crossbert.fsutil import pid_start_time, process_is_alive
from megatron_crossbert.outputs import outermost_missing, remove_empty_dirs

logger = logging.getLogger(__name__)

LOCK_FILE = "run.lock"
HEARTBEAT_S = 30.0
"""How often the holder rewrites its heartbeat (a daemon thread: long steps do not delay it)."""
STALE_AFTER_S = 120.0
"""A record from another host whose heartbeat is older than this belongs to a run that is gone."""


@dataclass
class Holder:
    """Who holds (or last held) the lock."""

    host: str
    pid: int
    pid_start: str
    """``pid_start_time(pid)`` when the record was written: tells pid reuse apart."""
    started_utc: str
    heartbeat: float
    """``time.time()`` of the last refresh: what other hosts go by where flock is not shared."""
    released: bool = False

    def describe(self) -> str:
        text = f"host {self.host}, pid {self.pid}, started {self.started_utc}"
        if self.host != socket.gethostname():  # only the heartbeat tells whether it still runs
            text += f", last heartbeat {max(0.0, time.time() - self.heartbeat):.0f} s ago"
        return text

    def is_alive(self, stale_after: float = STALE_AFTER_S) -> bool:
        """Same host: the process runs. Other host: its heartbeat is recent."""
        if self.released:
            return False
        if self.host != socket.gethostname():
            return time.time() - self.heartbeat < stale_after
        return self.pid != os.getpid() and process_is_alive(self.pid, self.pid_start)


READ_TRIES, READ_PAUSE_S = 3, 0.01
"""A record read empty or cut short is read again this many times, this far apart: the holder rewrites it in place
(the kernel lock sits on the file, so it cannot be replaced), truncating before it writes, and a reader that
came in between must not take a live run's record for none."""


def read_holder(path: Path) -> Holder | None:
    """The record in ``path``; None when absent, or empty or unreadable on every try (a crash between open and
    write)."""
    for attempt in range(READ_TRIES):
        try:
            raw = json.loads(path.read_text())  # empty: ValueError, read again
            return Holder(**raw) if isinstance(raw, dict) else None
        except FileNotFoundError:
            return None
        except (OSError, ValueError, TypeError):
            pass
        if attempt + 1 < READ_TRIES:
            time.sleep(READ_PAUSE_S)
    return None


def _kernel_lock(fd: int) -> bool | None:
    """True: locked; False: another open file holds it; None: no flock on this filesystem."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    except OSError as err:
        if err.errno in (errno.ENOSYS, errno.ENOLCK, errno.EOPNOTSUPP):
            return None
        raise


class RunLock:
    """``with RunLock(save_dir):`` around a run (rank 0 only). RunLockedError names a live holder."""

    def __init__(self, save_dir: str | Path, stale_after: float = STALE_AFTER_S) -> None:
        self.path = Path(save_dir) / LOCK_FILE
        self.stale_after = stale_after
        self.fd: int | None = None
        self.holder: Holder | None = None
        self.created: Path | None = None
        """The outermost directory :meth:`acquire` created for the lock (None: save_dir existed)."""
        self._stop = threading.Event()
        self._io = threading.Lock()  # release() closes the fd under it: a reused fd is never written

    def acquire(self) -> RunLock:
        self.created = outermost_missing(self.path.parent)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)  # the umask decides, as for any file
        try:
            self._claim(fd)
        except BaseException:
            os.close(fd)
            raise
        self.fd = fd
        threading.Thread(target=self._beat, name="run-lock-heartbeat", daemon=True).start()
        return self

    def _claim(self, fd: int) -> None:
        locked = _kernel_lock(fd)
        previous = read_holder(self.path)
        if locked is False or (previous is not None and previous.is_alive(self.stale_after)):
            who = previous.describe() if previous else "a process that has not written its record yet"
            raise RunLockedError(f"{self.path}: another training run uses this save directory ({who}); "
                                 f"wait for it to finish or pass another --save")
        if locked is None:
            logger.warning("%s: this filesystem has no flock; relying on the holder record only", self.path)
        if previous is not None and not previous.released:
            logger.warning("%s: taking over the lock of a run that is gone (%s)", self.path, previous.describe())
        pid = os.getpid()
        self.holder = Holder(socket.gethostname(), pid, pid_start_time(pid),
                             time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), time.time())
        self._write(fd)

    def _write(self, fd: int) -> None:
        """Rewrite the record; a failure (a full disk) is a warning: the kernel lock is what protects."""
        try:
            data = json.dumps(asdict(self.holder)).encode()
            os.ftruncate(fd, 0)
            os.pwrite(fd, data, 0)
            os.fsync(fd)
        except OSError as err:
            logger.warning("%s: holder record not written (%s)", self.path, err)

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            self.touch()

    def touch(self) -> None:
        """Refresh the heartbeat (what other hosts see on filesystems without coherent flock)."""
        with self._io:
            if self.fd is not None:
                self.holder.heartbeat = time.time()
                self._write(self.fd)

    def release(self) -> None:
        self._stop.set()
        with self._io:
            if self.fd is None:
                return
            self.holder.released, self.holder.heartbeat = True, time.time()
            try:
                self._write(self.fd)
            finally:
                fcntl.flock(self.fd, fcntl.LOCK_UN)
                os.close(self.fd)
                self.fd = None

    def abandon(self) -> None:
        """After a run that failed before writing anything but its lock into the directories :meth:`acquire`
        created: remove the lock file and those directories (a refused run leaves no trace). A directory
        holding anything else (a partial checkpoint, TensorBoard events of steps taken) is kept as it is."""
        save_dir = self.path.parent
        if self.created is None or [p.name for p in save_dir.iterdir()] != [LOCK_FILE]:
            return
        self.path.unlink(missing_ok=True)
        remove_empty_dirs(self.created, save_dir)

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


@contextmanager
def run_lock_for(run_cfg: RunConfig) -> Iterator[RunLock | None]:
    """The save directory's lock for this run, held by rank 0 of the job (``RANK``, read before the
    process group exists); a no-op on other ranks and for runs that save nothing. A run that fails before
    it wrote anything there leaves no trace in a directory it created (:meth:`RunLock.abandon`)."""
    save_dir = run_cfg.checkpoint.save_dir
    if not save_dir or int(os.environ.get("RANK", "0") or 0) != 0:
        yield None
        return
    lock = RunLock(save_dir).acquire()
    try:
        yield lock
    except BaseException:
        lock.abandon()
        raise
    finally:
        lock.release()
