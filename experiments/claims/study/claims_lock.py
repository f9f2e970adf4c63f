"""Lock files that let several processes of one study split its work: trainers split the runs, probers the
checkpoints. A lock is a file created with O_EXCL that holds its owner's pid; a lock whose owner is gone (the
process was killed, the session ended) is taken over, so a stopped study never blocks its own resume."""

from __future__ import annotations

import os
from pathlib import Path


def claim(lock: Path) -> bool:
    """Take ``lock`` for this process: True when taken (or taken over from a dead owner), False when a live
    process holds it."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        owner = lock.read_text().strip()
        if owner.isdigit() and int(owner) != os.getpid() and Path(f"/proc/{owner}").exists():
            return False
        lock.write_text(str(os.getpid()))
        return True
    with os.fdopen(fd, "w") as handle:
        handle.write(str(os.getpid()))
    return True


def release(lock: Path) -> None:
    lock.unlink(missing_ok=True)
