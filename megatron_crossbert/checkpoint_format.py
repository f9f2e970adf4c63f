"""The on-disk checkpoint layout shared by training, conversion and evaluation.

```
<root>/latest                      "iter_0000100" (replaced atomically once a save is complete)
<root>/iter_0000100/               megatron-core dist_checkpointing (torch_dist) directory
<root>/iter_0000100/run_config.json   the resolved RunConfig
```
Every reader accepts either the root (follows ``latest``) or an ``iter_*`` directory. Model weights
are stored under the ``"model"`` key of the sharded state dict, so they reshard across TP/PP.
"""

from __future__ import annotations

import logging
import re
from contextlib import contextmanager
from pathlib import Path

from megatron_crossbert.config import RunConfig
from megatron_crossbert.fsutil import atomic_write_text

LATEST_FILE = "latest"
RUN_CONFIG_FILE = "run_config.json"
ITER_PREFIX = "iter_"


class CheckpointError(RuntimeError):
    """A checkpoint is missing, incomplete or incompatible; the message says which and where."""


def iteration_dir_name(iteration: int) -> str:
    return f"{ITER_PREFIX}{iteration:07d}"


_POINTER = re.compile(r"iter_[0-9]+")


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


def read_run_config(path: str | Path) -> RunConfig:
    """The RunConfig saved with a checkpoint (root or iter_* directory)."""
    ckpt_dir = resolve_checkpoint_dir(path)
    try:
        return RunConfig.load_json(ckpt_dir / RUN_CONFIG_FILE)
    except (ValueError, TypeError, KeyError) as err:
        raise CheckpointError(f"{ckpt_dir / RUN_CONFIG_FILE} is not a valid run config: {err}") from err


def _check_shard_sizes(ckpt_dir: Path, metadata) -> None:
    """Every shard file .metadata refers to exists and is long enough (names the file otherwise)."""
    needed: dict[str, int] = {}
    for info in (getattr(metadata, "storage_data", None) or {}).values():
        end = int(info.offset) + int(info.length)
        needed[info.relative_path] = max(end, needed.get(info.relative_path, 0))
    for name, end in sorted(needed.items()):
        shard = ckpt_dir / name
        if not shard.is_file():
            raise CheckpointError(f"{shard}: missing, but {ckpt_dir / '.metadata'} lists data in it")
        size = shard.stat().st_size
        if size < end:
            raise CheckpointError(f"{shard}: truncated: {size} bytes, but {ckpt_dir / '.metadata'} "
                                  f"records data up to byte {end}")


@contextmanager
def checked_read(ckpt_dir: Path):
    """Wrap every dist_checkpointing.load of ``ckpt_dir``: no file in it may run code or be short.

    Before the load: ``.metadata`` is unpickled under an allowlist and every shard it lists is
    checked for presence and length. During the load: each stored object is unpickled under the
    weights-only allowlist before torch sees it (``megatron_crossbert.safe_pickle``).
    """
    from megatron_crossbert.safe_pickle import (METADATA_FILE, check_legacy_common, load_metadata,
                                                restricted_byte_items)

    _check_shard_sizes(ckpt_dir, load_metadata(ckpt_dir / METADATA_FILE))
    check_legacy_common(ckpt_dir)
    with restricted_byte_items(ckpt_dir):
        yield


def load_model_weights(model, path: str | Path) -> Path:
    """Load the 'model' entry of a dist checkpoint into ``model`` (any TP/PP layout); returns the dir read."""
    from megatron.core import dist_checkpointing
    from torch.distributed.checkpoint.api import CheckpointException

    ckpt_dir = resolve_checkpoint_dir(path)
    try:
        with checked_read(ckpt_dir):
            state = dist_checkpointing.load({"model": model.sharded_state_dict()}, str(ckpt_dir))
    except CheckpointError:
        raise
    except (Exception, CheckpointException) as err:  # DCP's CheckpointException is a BaseException
        raise CheckpointError(f"cannot load model weights from {ckpt_dir}: {err}") from err
    result = model.load_state_dict(state["model"], strict=False)
    missing = [key for key in result.missing_keys if not key.endswith("_extra_state")]
    if missing:
        raise CheckpointError(f"{ckpt_dir} lacks model weights: {missing[:5]}{'...' if len(missing) > 5 else ''}")
    return ckpt_dir


def _write_tokenizer_record(ckpt_dir: Path, run_config: RunConfig) -> None:
    """Best effort for model-only checkpoints (HF import): a tokenizer the data pipeline cannot load
    is logged and left unrecorded, like a checkpoint of an older version (resume then warns)."""
    from megatron_crossbert.training.tokenizer_check import write_checkpoint_record

    try:
        write_checkpoint_record(ckpt_dir, run_config)
    except (ValueError, OSError) as err:
        logging.getLogger(__name__).warning("%s: no tokenizer record written (%s)", ckpt_dir, err)


def save_model_only(model, run_config: RunConfig, root: str | Path, iteration: int = 0) -> Path:
    """Write a model-only checkpoint (no optimizer) under ``root`` and point 'latest' at it."""
    from megatron.core import dist_checkpointing

    import torch.distributed as dist

    root = Path(root)
    ckpt_dir = root / iteration_dir_name(iteration)
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    dist_checkpointing.save({"model": model.sharded_state_dict()}, str(ckpt_dir))
    if not dist.is_initialized() or dist.get_rank() == 0:
        _write_tokenizer_record(ckpt_dir, run_config)
        run_config.save_json(ckpt_dir / RUN_CONFIG_FILE)
        atomic_write_text(root / LATEST_FILE, ckpt_dir.name)
    if dist.is_initialized():
        dist.barrier()
    return ckpt_dir
