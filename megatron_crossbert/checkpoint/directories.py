"""The checkpoint directories on disk (names, `latest`, completeness), and the one place a reference is resolved.

```
<root>/latest                      "iter_0000100" (replaced atomically once a save is complete)
<root>/iter_0000100/               megatron-core dist_checkpointing (torch_dist) directory
<root>/iter_0000100/run_config.json   the resolved RunConfig (written last: it marks the save complete)
```
A reference is either the root (follow ``latest``) or an ``iter_*`` directory:
:func:`resolve_checkpoint_dir` maps it to the directory to read, and :func:`load_saved_config`
parses that directory's ``run_config.json``. Callers that start from a reference resolve and parse
once (``checkpoint.verify``) and pass the result on. Model weights are stored under the ``"model"``
key of the sharded state dict, so they reshard across TP/PP.
"""

from __future__ import annotations

import re
from pathlib import Path

from megatron_crossbert.checkpoint.errors import CheckpointError
from megatron_crossbert.config import RunConfig
from megatron_crossbert.fsutil import atomic_write_text

LATEST_FILE = "latest"
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


def resolve_latest(root: str | Path) -> Path | None:
    """The complete checkpoint ``root/latest`` names; None without a 'latest' file."""
    name = read_latest(root)
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
        raise CheckpointError(f"checkpoint path {path} does not exist")
    if is_complete(path):
        return path
    target = resolve_latest(path)
    if target is None:
        raise CheckpointError(f"{path} is neither a checkpoint directory (no {RUN_CONFIG_FILE}) nor a "
                              f"checkpoint root (no '{LATEST_FILE}' file)")
    return target


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


def read_run_config(path: str | Path) -> RunConfig:
    """The RunConfig saved with a checkpoint reference (root or iter_* directory): resolve, then parse."""
    return load_saved_config(resolve_checkpoint_dir(path))
