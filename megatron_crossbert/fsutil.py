"""Atomic file writes: readers see the old file, or the new one, never half of one.

Every writer in the package that replaces a file other processes may read (a checkpoint's
``latest`` and ``run_config.json``, tokenizer records, preprocessing stats, the packing-index and
feature caches, the ``.bin``/``.idx`` pair) goes through here. The rule is always the same: write
beside the target under a temporary name, flush, then ``os.replace`` (atomic on POSIX within one
file system). This module imports nothing from the project, so every layer may use it.

Temporary names say whose they are: ``<target>.tmp-<host>-<pid>-<pid start time>`` (plus a suffix),
so a later run can remove what a killed one (SIGKILL, OOM) left behind, knowing the process is gone,
and leave another host's files on a shared filesystem alone (:func:`remove_stale_temporaries`).
What is written gets the modes the user's umask asks for, as a plain ``open`` would: ``mkstemp``
and ``mkdtemp`` create 0600/0700, which made shared outputs unreadable to everyone else
(:func:`apply_umask_modes`).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import socket
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterator, Sequence

logger = logging.getLogger(__name__)

_OWNER = r"\.tmp-(?P<host>[A-Za-z0-9_.]+)-(?P<pid>\d+)-(?P<start>\d+)"
"""How a temporary name records its writer (see :func:`temp_sibling`)."""


def _stat_fields(pid: int) -> list[str]:
    """``/proc/PID/stat`` from its third field on (after the command name, which may hold spaces); [] if
    unreadable."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def pid_start_time(pid: int) -> str:
    """The pid's start time in clock ticks since boot (``/proc/PID/stat`` field 22); '' if unknown.

    A pid with its start time names one process for the life of the machine (pids are reused)."""
    fields = _stat_fields(pid)
    return fields[19] if len(fields) > 19 else ""


def pid_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a live process and of its children it has reaped (``/proc/PID/stat`` fields
    14-17); 0.0 if unknown. A parent's ``os.times()`` counts a child only once the child is reaped."""
    fields = _stat_fields(pid)
    return sum(int(tick) for tick in fields[11:15]) / os.sysconf("SC_CLK_TCK") if len(fields) > 14 else 0.0


def process_is_alive(pid: int, start_time: str) -> bool:
    """The process ``pid`` runs on this host and (when ``start_time`` is known) started then."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's live process
    return not start_time or pid_start_time(pid) == start_time


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9_.]", "_", socket.gethostname())


def _owner_tag() -> str:
    pid = os.getpid()
    return f"{_host()}-{pid}-{pid_start_time(pid) or 0}"


def temp_sibling(path: str | Path) -> str:
    """``<path>.tmp-<host>-<pid>-<start>``: a temporary name beside ``path`` for writers that name files
    themselves (``np.savez`` appends ``.npz``; the indexed writer derives ``.bin``/``.idx`` from one prefix)."""
    return f"{path}.tmp-{_owner_tag()}"


def current_umask() -> int:
    """The process umask, read without changing it where Linux allows (``/proc``, kernel >= 4.7)."""
    try:
        with open("/proc/self/status") as handle:
            for line in handle:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)  # elsewhere: set and restore
    os.umask(mask)
    return mask


def apply_umask_modes(root: str | Path) -> None:
    """Give ``root`` (a file, or a directory and everything in it) the modes a plain ``mkdir``/``open``
    would: directories ``0o777 & ~umask``, files ``0o666 & ~umask``."""
    mask = current_umask()
    root = Path(root)
    if root.is_file():
        os.chmod(root, 0o666 & ~mask)
        return
    os.chmod(root, 0o777 & ~mask)
    for directory, dirs, files in os.walk(root):
        for name in dirs:
            os.chmod(os.path.join(directory, name), 0o777 & ~mask)
        for name in files:
            os.chmod(os.path.join(directory, name), 0o666 & ~mask)


@contextmanager
def atomic_open(path: str | Path, mode: str = "w") -> Iterator[IO]:
    """Open a temporary file beside ``path``; on a clean exit it is synced and replaces ``path``
    with the umask's mode (``mkstemp`` creates 0600).

    On an exception the temporary file is removed and ``path`` is left as it was.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.tmp-{_owner_tag()}-")
    try:
        with os.fdopen(fd, mode) as handle:
            yield handle
            handle.flush()
            os.fchmod(handle.fileno(), 0o666 & ~current_umask())
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


def move_aside(path: str | Path) -> Path:
    """Rename an existing output that a ``--force`` replaces to ``<name>.replaced-<UTC time>-<id>`` beside
    it, and return the new path: what another run (or the user) made is never deleted, only moved."""
    path = Path(path)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    target = path.with_name(f"{path.name}.replaced-{stamp}-{os.urandom(4).hex()}")
    os.rename(path, target)  # atomic within the directory
    logger.warning("moved the existing %s aside to %s (nothing deleted)", path, target)
    return target


def _temporary_pattern(target: Path) -> re.Pattern:
    """Temporaries of ``target``: ``[.]<name or stem>.tmp-<host>-<pid>-<start>`` plus an extension or a
    ``-<random>`` suffix (``atomic_open``'s ``mkstemp``)."""
    bases = "|".join(re.escape(base) for base in {target.name, target.stem})
    return re.compile(rf"\.?(?:{bases}){_OWNER}(?:\.[A-Za-z0-9]+|-[A-Za-z0-9_]+)?")


def stale_temporaries(targets: Sequence[str | Path]) -> tuple[list[Path], list[Path]]:
    """(temporaries of ``targets`` whose writer on this host is gone, those of other hosts)."""
    here, dead, foreign = _host(), set(), set()
    for target in map(Path, targets):
        if not target.parent.is_dir():
            continue
        pattern = _temporary_pattern(target)
        for path in target.parent.iterdir():
            match = pattern.fullmatch(path.name)
            if match is None:
                continue
            if match["host"] != here:
                foreign.add(path)
            elif not process_is_alive(int(match["pid"]), "" if match["start"] == "0" else match["start"]):
                dead.add(path)
    return sorted(dead), sorted(foreign)


def remove_stale_temporaries(targets: Sequence[str | Path]) -> list[Path]:
    """Delete the temporaries of ``targets`` left by dead processes of this host (a killed run: files, or
    directories: a staged output (``outputs.staged_dir``) or a pruned checkpoint renamed away before its
    deletion), and name in a warning those of other hosts, which are left alone; returns what was deleted.
    Nothing else is touched: only names of exactly that form, for exactly these targets."""
    dead, foreign = stale_temporaries(targets)
    for path in dead:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    if dead:
        logger.warning("removed %d temporary file(s) left by a killed run: %s", len(dead), ", ".join(map(str, dead)))
    if foreign:
        logger.warning("left %d temporary file(s) of runs on other hosts alone (remove them once those runs are "
                       "gone): %s", len(foreign), ", ".join(map(str, foreign)))
    return dead
