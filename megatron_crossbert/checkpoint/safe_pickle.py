"""Read the pickles inside a torch_dist checkpoint without letting them run code.

A checkpoint directory is user-supplied input: anyone can hand over an ``iter_*`` directory. Two
reads in torch's DCP reader unpickle without restriction (torch 2.x):

- ``FileSystemReader.read_metadata`` calls plain ``pickle.load`` on ``.metadata``;
- ``DefaultLoadPlanner.load_bytes`` calls ``torch.load(weights_only=False)`` on every non-tensor
  item stored in the ``.distcp`` files (megatron's ``common_state``, RNG states, ``_extra_state``).

This module gives both a narrow allowlist, and :func:`checked_read` wraps every
``dist_checkpointing.load`` in both, after checking that every shard is present and long enough.
``.metadata`` is read with :class:`MetadataUnpickler`, which resolves only the DCP metadata
dataclasses, ``torch.Size``, dtypes and layouts (what torch writes there); everything else,
``os.system`` or ``builtins.eval`` included, is refused before it is called. Byte items go through
``torch.load(weights_only=True)`` (tensors, containers, numbers, strings) plus the three numpy
globals an RNG state needs. The legacy ``common.pt`` (older megatron) is read with
``weights_only=True`` as well.
"""

from __future__ import annotations

import io
import pickle
from contextlib import contextmanager
from pathlib import Path

from megatron_crossbert.checkpoint.errors import CheckpointError, UnsafeCheckpointError

METADATA_FILE = ".metadata"
LEGACY_COMMON_FILE = "common.pt"
MEGATRON_CONFIG_FILE = "metadata.json"
"""megatron-core's dist_checkpointing config (backend and version), read by every load."""

_DCP = "torch.distributed.checkpoint"
_METADATA_GLOBALS = {
    f"{_DCP}.metadata": {"Metadata", "TensorStorageMetadata", "BytesStorageMetadata", "ChunkStorageMetadata",
                         "TensorProperties", "MetadataIndex", "StorageMeta", "_MEM_FORMAT_ENCODING"},
    f"{_DCP}.filesystem": {"_StorageInfo"},
    f"{_DCP}.planner": {"SavePlan", "WriteItem", "WriteItemType", "TensorWriteData", "LoadItemType"},
    "torch": {"Size"},
    "torch.serialization": {"_get_layout"},
    "collections": {"OrderedDict"},
}
"""(module -> names) a DCP ``.metadata`` pickle may reference; torch dtypes are allowed on top."""


def _refusal(source: str | Path, module: str, name: str) -> UnsafeCheckpointError:
    return UnsafeCheckpointError(
        f"{source}: refused to unpickle {module}.{name}, which is not a checkpoint data type "
        f"(the file may be crafted to run code; nothing in it was executed)")


class MetadataUnpickler(pickle.Unpickler):
    """``pickle.Unpickler`` that resolves only the globals of :data:`_METADATA_GLOBALS` and torch dtypes."""

    def __init__(self, handle, source: str | Path) -> None:
        super().__init__(handle)
        self.source = source

    def find_class(self, module: str, name: str):
        import torch

        if name in _METADATA_GLOBALS.get(module, ()):
            return super().find_class(module, name)
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        raise _refusal(self.source, module, name)


def load_metadata(path: str | Path):
    """Unpickle a DCP ``.metadata`` file under the allowlist; CheckpointError naming the file otherwise."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise CheckpointError(f"{path}: missing; {path.parent} is not a complete torch_dist checkpoint") from None
    try:
        return MetadataUnpickler(io.BytesIO(data), path).load()
    except UnsafeCheckpointError:
        raise
    except Exception as err:  # truncated or garbled pickles raise many types
        raise CheckpointError(f"{path}: not a readable checkpoint metadata file ({type(err).__name__}: {err})") \
            from None


def _numpy_globals() -> list:
    import numpy as np

    try:
        reconstruct = np._core.multiarray._reconstruct
    except AttributeError:  # numpy < 2
        reconstruct = np.core.multiarray._reconstruct
    return [reconstruct, np.ndarray, np.dtype]


def restricted_torch_load(data: bytes, source: str | Path):
    """``torch.load(weights_only=True)`` of ``data`` (plus numpy arrays); UnsafeCheckpointError otherwise."""
    import torch

    try:
        with torch.serialization.safe_globals(_numpy_globals()):
            return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UnsafeCheckpointError(f"{source}: refused to unpickle a stored object ({first}); "
                                    f"nothing in it was executed") from None


def check_legacy_common(ckpt_dir: Path) -> None:
    """Older megatron wrote non-tensor state to ``common.pt``; it must load under weights_only too."""
    path = ckpt_dir / LEGACY_COMMON_FILE
    if path.is_file():
        restricted_torch_load(path.read_bytes(), path)


@contextmanager
def restricted_byte_items(ckpt_dir: str | Path):
    """While active, every DCP byte item is first loaded with :func:`restricted_torch_load`.

    Only after that succeeds does torch's own ``load_bytes`` see the same bytes, so torch's
    unrestricted ``torch.load`` never meets a payload the allowlist refused. A refusal raised inside
    DCP comes back wrapped in its CheckpointException; it is re-raised here as the clear error.
    """
    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner

    original = DefaultLoadPlanner.load_bytes
    refusals: list[UnsafeCheckpointError] = []

    def load_bytes(self, read_item, value):
        data = value.getvalue() if isinstance(value, io.BytesIO) else value.read()
        try:
            restricted_torch_load(data, f"{ckpt_dir} (item {read_item.dest_index.fqn})")
        except UnsafeCheckpointError as err:
            refusals.append(err)
            raise
        return original(self, read_item, io.BytesIO(data))

    DefaultLoadPlanner.load_bytes = load_bytes
    try:
        yield
    except BaseException as err:  # DCP's CheckpointException derives from BaseException
        if refusals:
            raise refusals[0] from err
        raise
    finally:
        DefaultLoadPlanner.load_bytes = original


def listed_shards(metadata) -> dict[str, int]:
    """The shard files a DCP ``.metadata`` refers to: name -> the end of the last byte it reads there."""
    needed: dict[str, int] = {}
    for info in (getattr(metadata, "storage_data", None) or {}).values():
        end = int(info.offset) + int(info.length)
        needed[info.relative_path] = max(end, needed.get(info.relative_path, 0))
    return needed


def _check_shard_sizes(ckpt_dir: Path, metadata) -> None:
    """Every shard file .metadata refers to exists and is long enough (names the file otherwise)."""
    for name, end in sorted(listed_shards(metadata).items()):
        shard = ckpt_dir / name
        if not shard.is_file():
            raise CheckpointError(f"{shard}: missing, but {ckpt_dir / METADATA_FILE} lists data in it")
        size = shard.stat().st_size
        if size < end:
            raise CheckpointError(f"{shard}: truncated: {size} bytes, but {ckpt_dir / METADATA_FILE} "
                                  f"records data up to byte {end}")


@contextmanager
def checked_read(ckpt_dir: Path):
    """Wrap every dist_checkpointing.load of ``ckpt_dir``: no file in it may run code or be short.

    Before the load: ``.metadata`` is unpickled under an allowlist and every shard it lists is
    checked for presence and length. During the load: each stored object is unpickled under the
    weights-only allowlist before torch sees it (:func:`restricted_byte_items`).
    """
    _check_shard_sizes(ckpt_dir, load_metadata(ckpt_dir / METADATA_FILE))
    check_legacy_common(ckpt_dir)
    with restricted_byte_items(ckpt_dir):
        yield
