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

import os
import tempfile
from pathlib import Path

from megatron_crossbert.config import RunConfig

LATEST_FILE = "latest"
RUN_CONFIG_FILE = "run_config.json"
ITER_PREFIX = "iter_"


class CheckpointError(RuntimeError):
    """A checkpoint is missing, incomplete or incompatible; the message says which and where."""


def iteration_dir_name(iteration: int) -> str:
    return f"{ITER_PREFIX}{iteration:07d}"


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write via a temporary file in the same directory and os.replace, so readers never see half a file."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def resolve_checkpoint_dir(path: str | Path) -> Path:
    """Map a root (with a 'latest' pointer) or an iter_* directory to the iter_* directory to read."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"checkpoint path {path} does not exist")
    if (path / RUN_CONFIG_FILE).is_file():
        return path
    latest = path / LATEST_FILE
    if not latest.is_file():
        raise CheckpointError(f"{path} is neither a checkpoint directory (no {RUN_CONFIG_FILE}) nor a "
                              f"checkpoint root (no '{LATEST_FILE}' file)")
    target = path / latest.read_text().strip()
    if not (target / RUN_CONFIG_FILE).is_file():
        raise CheckpointError(f"{latest} points at {target.name}, which is missing or incomplete")
    return target


def latest_iteration(root: str | Path) -> int | None:
    """The iteration 'latest' points at, or None when the root holds no complete checkpoint."""
    latest = Path(root) / LATEST_FILE
    if not latest.is_file():
        return None
    name = latest.read_text().strip()
    return int(name[len(ITER_PREFIX):]) if name.startswith(ITER_PREFIX) else None


def read_run_config(path: str | Path) -> RunConfig:
    """The RunConfig saved with a checkpoint (root or iter_* directory)."""
    ckpt_dir = resolve_checkpoint_dir(path)
    try:
        return RunConfig.load_json(ckpt_dir / RUN_CONFIG_FILE)
    except (ValueError, TypeError, KeyError) as err:
        raise CheckpointError(f"{ckpt_dir / RUN_CONFIG_FILE} is not a valid run config: {err}") from err


def load_model_weights(model, path: str | Path) -> Path:
    """Load the 'model' entry of a dist checkpoint into ``model`` (any TP/PP layout); returns the dir read."""
    from megatron.core import dist_checkpointing
    from torch.distributed.checkpoint.api import CheckpointException

    ckpt_dir = resolve_checkpoint_dir(path)
    try:
        state = dist_checkpointing.load({"model": model.sharded_state_dict()}, str(ckpt_dir))
    except (Exception, CheckpointException) as err:  # DCP's CheckpointException is a BaseException
        raise CheckpointError(f"cannot load model weights from {ckpt_dir}: {err}") from err
    result = model.load_state_dict(state["model"], strict=False)
    missing = [key for key in result.missing_keys if not key.endswith("_extra_state")]
    if missing:
        raise CheckpointError(f"{ckpt_dir} lacks model weights: {missing[:5]}{'...' if len(missing) > 5 else ''}")
    return ckpt_dir


def save_model_only(model, run_config: RunConfig, root: str | Path, iteration: int = 0) -> Path:
    """Write a model-only checkpoint (no optimizer) under ``root`` and point 'latest' at it."""
    from megatron.core import dist_checkpointing

    import torch.distributed as dist

    root = Path(root)
    ckpt_dir = root / iteration_dir_name(iteration)
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    dist_checkpointing.save({"model": model.sharded_state_dict()}, str(ckpt_dir))
    if not dist.is_initialized() or dist.get_rank() == 0:
        run_config.save_json(ckpt_dir / RUN_CONFIG_FILE)
        atomic_write_text(root / LATEST_FILE, ckpt_dir.name)
    if dist.is_initialized():
        dist.barrier()
    return ckpt_dir
