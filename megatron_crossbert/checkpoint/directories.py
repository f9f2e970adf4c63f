"""The checkpoint directories on disk (names, `latest`, completeness), and the one place a reference is resolved.

```
<root>/latest                      "iter_0000100" (replaced atomically once a save is complete)
<root>/latest.pending              the commit journal: present only while a commit moves 'latest'
<root>/iter_0000100/               megatron-core dist_checkpointing (torch_dist) directory
<root>/iter_0000100/run_config.json   the resolved RunConfig (written last: it marks the save complete)
```
The commit journal: a process killed after ``run_config.json`` made a checkpoint complete but before
``latest`` moved leaves a complete checkpoint newer than ``latest``, which every rerun of the same
command would refuse as if it came from some other run. So the commit writes
``latest.pending`` (the checkpoint, what ``latest`` named, a hash of the ``run_config.json`` about to
be written and who writes it) before ``run_config.json``, and removes it once ``latest`` moved. A
journal whose checkpoint is complete with exactly that ``run_config.json``, while ``latest`` still
names what it named, is a commit that lacks only the pointer: :func:`resolve_latest` resolves to its
checkpoint, and the next training start moves the pointer (``start_guard``). Anything else about a
journal (the checkpoint incomplete, ``latest`` moved since, another ``run_config.json``) means it does
not apply, and it is ignored. A clean commit leaves no journal, so a hand-made roll-back of ``latest``
is never undone.

A reference is either the root (follow ``latest``) or an ``iter_*`` directory:
:func:`resolve_checkpoint_dir` maps it to the directory to read, and :func:`load_saved_config`
parses that directory's ``run_config.json``. Callers that start from a reference resolve and parse
once (``checkpoint.verify``) and pass the result on. Model weights are stored under the ``"model"``
key of the sharded state dict, so they reshard across TP/PP.
"""

from __future__ import annotations

import json
import os
import re
import socket
from dataclasses import asdict, dataclass
from pathlib import Path

from megatron_crossbert.checkpoint.errors import CheckpointError
from megatron_crossbert.config import RunConfig
from megatron_crossbert.content_identity import hash_bytes
from megatron_crossbert.fsutil import atomic_write_text, pid_start_time

LATEST_FILE = "latest"
PENDING_FILE = "latest.pending"
RUN_CONFIG_FILE = "run_config.json"
ITER_PREFIX = "iter_"

_POINTER = re.compile(r"iter_[0-9]+")


def iteration_dir_name(iteration: int) -> str:
    return f"{ITER_PREFIX}{iteration:07d}"


def iteration_of(ckpt_dir: str | Path) -> int | None:
    """N for a directory named ``iter_<N>``; None for any other name."""
    name = Path(ckpt_dir).name
    return int(name[len(ITER_PREFIX):]) if _POINTER.fullmatch(name) else None


def is_complete(ckpt_dir: Path) -> bool:
    """A save is complete once rank 0 has written run_config.json (after every shard)."""
    return (ckpt_dir / RUN_CONFIG_FILE).is_file()


def complete_checkpoints(root: str | Path) -> list[Path]:
    """The complete ``iter_<digits>`` directories under ``root``, oldest first (by iteration)."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if iteration_of(p) is not None and p.is_dir() and is_complete(p)]
    return sorted(found, key=iteration_of)


def read_latest(root: str | Path) -> str | None:
    """The ``iter_<digits>`` name in ``root/latest``; None when there is no such file.

    Anything else in the file (binary junk, an empty file, ``iter_xyz``, a word) is a CheckpointError
    naming the file and what it holds: guessing would resume the wrong state or start over on top of
    complete checkpoints.
    """
    latest = Path(root) / LATEST_FILE
    if not latest.is_file():
        return None
    raw = latest.read_bytes()
    try:
        text = raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise CheckpointError(f"{latest}: holds {len(raw)} bytes that are not text; expected "
                              f"'{ITER_PREFIX}' followed by digits, e.g. {iteration_dir_name(100)}") from None
    if not text:
        raise CheckpointError(f"{latest}: is empty; expected '{ITER_PREFIX}' followed by digits, "
                              f"e.g. {iteration_dir_name(100)}")
    if not _POINTER.fullmatch(text):
        shown = text if len(text) <= 60 else text[:57] + "..."
        raise CheckpointError(f"{latest}: holds {shown!r}, not '{ITER_PREFIX}' followed by digits")
    return text


def point_latest(ckpt_dir: Path) -> None:
    """Replace ``<root>/latest`` atomically with the name of ``ckpt_dir`` (a complete save)."""
    atomic_write_text(ckpt_dir.parent / LATEST_FILE, ckpt_dir.name)


@dataclass(frozen=True)
class PendingCommit:
    """The commit journal (``latest.pending``): a commit that began and has not yet moved 'latest'."""

    checkpoint: str
    """The ``iter_*`` directory being committed."""
    after: str | None
    """What 'latest' named when the commit began (None: there was no 'latest')."""
    run_config_xxh3: str
    """The hash of the ``run_config.json`` text the commit writes (``content_identity.hash_bytes``)."""
    writer: dict
    """Who commits: host, pid, pid start time (for the log line of whoever finishes the commit)."""

    def describe_writer(self) -> str:
        return f"pid {self.writer.get('pid')} on {self.writer.get('host')}"


def begin_commit(ckpt_dir: Path, run_config_text: str) -> None:
    """Rank 0, before ``run_config.json`` is written: journal the commit (see the module docstring)."""
    root, pid = ckpt_dir.parent, os.getpid()
    journal = PendingCommit(ckpt_dir.name, read_latest(root), hash_bytes(run_config_text.encode()),
                            {"host": socket.gethostname(), "pid": pid, "pid_start": pid_start_time(pid)})
    atomic_write_text(root / PENDING_FILE, json.dumps(asdict(journal), indent=1) + "\n")


def end_commit(root: Path) -> None:
    """Rank 0, once 'latest' names the committed checkpoint: the journal is done."""
    (Path(root) / PENDING_FILE).unlink(missing_ok=True)


def _read_journal(root: str | Path) -> PendingCommit | None:
    """``root/latest.pending`` as written; None when absent or unreadable (then it applies to nothing)."""
    try:
        journal = PendingCommit(**json.loads((Path(root) / PENDING_FILE).read_text()))
    except (OSError, ValueError, TypeError):
        return None
    return journal if isinstance(journal.checkpoint, str) and isinstance(journal.writer, dict) else None


def interrupted_commit(root: str | Path, latest: str | None) -> PendingCommit | None:
    """The journal of ``root`` when it is a commit that lacks only the pointer (``latest``: what 'latest'
    names now): its checkpoint complete with the journaled ``run_config.json``, 'latest' unmoved."""
    journal = _read_journal(root)
    if journal is None or journal.after != latest or not _POINTER.fullmatch(journal.checkpoint):
        return None
    target = Path(root) / journal.checkpoint
    try:
        written = hash_bytes((target / RUN_CONFIG_FILE).read_bytes())
    except OSError:
        return None
    return journal if written == journal.run_config_xxh3 else None


def resolve_latest(root: str | Path) -> Path | None:
    """The complete checkpoint ``root/latest`` names (or the one a killed commit completed without moving
    it: :func:`interrupted_commit`); None without either."""
    name = read_latest(root)
    finished = interrupted_commit(root, name)
    if finished is not None:
        return Path(root) / finished.checkpoint
    if name is None:
        return None
    target = Path(root) / name
    if not is_complete(target):
        detail = f"no {RUN_CONFIG_FILE}: its save did not finish" if target.is_dir() else "no such directory"
        raise CheckpointError(f"{Path(root) / LATEST_FILE}: points at {name}, which is missing or incomplete "
                              f"({detail})")
    return target


def resolve_checkpoint_dir(path: str | Path) -> Path:
    """Map a root (with a 'latest' pointer) or an iter_* directory to the iter_* directory to read."""
    path = Path(path)
    if not path.exists():
        in_a_root = iteration_of(path) is not None and (path.parent / LATEST_FILE).is_file()
        pruned = f"; {pruned_since(path.parent)}" if in_a_root else ""
        raise CheckpointError(f"checkpoint path {path} does not exist{pruned}")
    if is_complete(path):
        return path
    target = resolve_latest(path)
    if target is None:
        raise CheckpointError(f"{path} is neither a checkpoint directory (no {RUN_CONFIG_FILE}) nor a "
                              f"checkpoint root (no '{LATEST_FILE}' file)")
    return target


def pruned_since(root: Path) -> str:
    """Why a checkpoint of ``root`` may be gone: what its 'latest' names now, and who prunes."""
    try:
        latest = read_latest(root)
    except CheckpointError:
        latest = None
    now = f"; its 'latest' names {latest}" if latest else ""
    return f"a training run writing into {root} prunes checkpoints older than its checkpoint.keep_last newest{now}"


def latest_iteration(root: str | Path) -> int | None:
    """The iteration 'latest' points at, or None without a 'latest' file (CheckpointError on junk)."""
    name = read_latest(root)
    return None if name is None else iteration_of(name)


def load_saved_config(ckpt_dir: Path) -> RunConfig:
    """Parse the RunConfig saved in a resolved checkpoint directory (the one reader of run_config.json)."""
    try:
        return RunConfig.load_json(ckpt_dir / RUN_CONFIG_FILE)
    except (ValueError, TypeError, KeyError) as err:
        raise CheckpointError(f"{ckpt_dir / RUN_CONFIG_FILE} is not a valid run config: {err}") from err

