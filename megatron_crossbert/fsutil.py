"""Atomic file writes: readers see the old file, or the new one, never half of one.

Every writer in the package that replaces a file other processes may read (a checkpoint's
``latest`` and ``run_config.json``, tokenizer records, preprocessing stats, the packing-index and
feature caches, the ``.bin``/``.idx`` pair) goes through here. The rule is always the same: write
beside the target under a temporary name, flush, then ``os.replace`` (atomic on POSIX within one
file system). This module imports nothing from the project, so every layer may use it.
"""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterator, Sequence


def pid_start_time(pid: int) -> str:
    """The pid's start time in clock ticks since boot (``/proc/PID/stat`` field 22); '' if unknown.

    A pid with its start time names one process for the life of the machine (pids are reused)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def process_is_alive(pid: int, start_time: str) -> bool:
    """The process ``pid`` runs on this host and (when ``start_time`` is known) started then."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's live process
    return not start_time or pid_start_time(pid) == start_time


def temp_sibling(path: str | Path) -> str:
    """``<path>.tmp-<pid>``: a temporary name beside ``path`` for writers that name files themselves
    (``np.savez`` appends ``.npz``; the indexed writer derives ``.bin``/``.idx`` from one prefix)."""
    return f"{path}.tmp-{os.getpid()}"


@contextmanager
def atomic_open(path: str | Path, mode: str = "w") -> Iterator[IO]:
    """Open a temporary file beside ``path``; on a clean exit it is synced and replaces ``path``.

    On an exception the temporary file is removed and ``path`` is left as it was.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, mode) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (see :func:`atomic_open`)."""
    with atomic_open(path, "w") as handle:
        handle.write(text)


def commit_group(moves: Sequence[tuple[str | Path, str | Path]]) -> None:
    """Rename several finished temporary files into place, the last one of ``moves`` as the seal.

    A group of files is only meaningful together (an ``.idx`` describes its ``.bin``). The seal's
    old file is removed first, then each ``(temporary, final)`` pair is replaced in order, the
    seal last, so a crash leaves the old group, a group without its seal, or the new group:
    never a seal describing other data.
    """
    if os.path.exists(moves[-1][1]):
        os.remove(moves[-1][1])
    for temporary, final in moves:
        os.replace(temporary, final)
