"""What a result depends on, by content, never by path: the one owner of "the identity of a file".

A resume key or a cache key that held a path would reuse numbers after the file at that path changed (a
fine-tune resumed with another ``--glue-dir`` reported the old data's scores) and would refuse the same
bytes copied elsewhere (a model in a copied directory was "another model"). Every key therefore holds
content digests: a streaming xxh3-128 of a file's bytes (~20 GB/s on one core, so hashing a GLUE split
or a model's weights costs less than loading them). Checkpoint checksums (``checkpoint/checksums.py``),
the evaluation's model identity (``evaluation/encoders.py``) and the data identity of fine-tunes and
study stages all hash through here. Imports nothing from the project, so every layer may use it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

import xxhash

CHUNK = 8 << 20
"""Bytes read per step: streaming with one reused buffer, so memory is bounded for any file size."""
PREFIX = "xxh3_128:"


def hash_file(path: str | Path) -> str:
    """xxh3-128 hex digest of the file's bytes."""
    state = xxhash.xxh3_128()
    buffer = bytearray(CHUNK)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as handle:
        while size := handle.readinto(buffer):
            state.update(view[:size])
    return state.hexdigest()


def hash_bytes(data: bytes) -> str:
    """xxh3-128 hex digest of ``data`` (what :func:`hash_file` gives for a file holding it)."""
    return xxhash.xxh3_128_hexdigest(data)


BLOCKS, BLOCK = 16, 64 << 10
"""A sampled digest reads 16 blocks of 64 KiB spread from a file's first byte to its last."""
SAMPLE_ABOVE = 256 << 20
"""Files above this size (a TB corpus, a dataset's ``.bin``) are sampled, not read whole, where a key is taken
on every invocation; a same-length edit inside an unsampled block is the one change that can pass."""


def update_with_file(state, path: str | Path, size: int, sample_above: int | None) -> None:
    """Feed ``path``'s bytes into an xxh3 ``state``: all of them, or ``BLOCKS`` spread blocks when the file is
    larger than ``sample_above`` (None: never sampled)."""
    with open(path, "rb") as handle:
        if sample_above is None or size <= max(sample_above, BLOCKS * BLOCK):
            while block := handle.read(CHUNK):
                state.update(block)
            return
        for k in range(BLOCKS):
            handle.seek(k * (size - BLOCK) // (BLOCKS - 1))
            state.update(handle.read(BLOCK))


def sampled_identity(path: str | Path) -> str:
    """``xxh3_128:<hex>`` of a file's size and ``BLOCKS`` spread blocks (a file of up to 1 MiB read whole): at most
    1 MiB read per file, so a key over every file of a TB corpus, taken at every launch, costs seconds. A changed
    size is always seen; a same-length edit between the sampled blocks is the one change that can pass."""
    size = Path(path).stat().st_size
    state = xxhash.xxh3_128()
    state.update(f"{size}\0".encode())
    update_with_file(state, path, size, 0)
    return PREFIX + state.hexdigest()


def file_identity(path: str | Path) -> str:
    """``xxh3_128:<hex>`` of one file: equal for equal bytes wherever the file lies."""
    return PREFIX + hash_file(path)


def files_identity(files: Iterable[tuple[str, str | Path]], sample_above: int | None = None) -> str:
    """One digest over named files (``(name, path)``; the name is the file's role, e.g. ``weights``, never its
    location), so a set of files is identified by what each holds; a missing file counts as absent. Files larger
    than ``sample_above`` bytes are sampled (:func:`update_with_file`; None: every byte is read)."""
    state = xxhash.xxh3_128()
    for name, path in files:
        if Path(path).is_file():
            state.update(f"{name}\0{_file_digest(path, sample_above)}\0".encode())
    return PREFIX + state.hexdigest()


def _file_digest(path: str | Path, sample_above: int | None) -> str:
    if sample_above is None:
        return hash_file(path)
    state = xxhash.xxh3_128()
    update_with_file(state, path, Path(path).stat().st_size, sample_above)
    return state.hexdigest()


def tree_identity(root: str | Path) -> str:
    """One digest over every file under ``root`` (a data folder, a corpus file), each named by its path relative
    to ``root`` and with its size; files above ``SAMPLE_ABOVE`` sampled. The same folder copied elsewhere has
    the same identity; an absent root has the identity of an empty one."""
    root = Path(root)
    files = [root] if root.is_file() else sorted(path for path in root.rglob("*") if path.is_file())
    state = xxhash.xxh3_128()
    for path in files:
        size = path.stat().st_size
        state.update(f"{path.relative_to(root) if path != root else path.name}\0{size}\0".encode())
        update_with_file(state, path, size, SAMPLE_ABOVE)
    return PREFIX + state.hexdigest()


def dataset_fingerprint(paths: Iterable[str | Path]) -> str:
    """``xxh3_128:<24 hex>`` of an indexed dataset's files in order: every ``.bin`` sampled (``BLOCKS`` spread
    blocks: cheap on TB-sized data), every other file (the ``.idx``, which holds the document and sequence
    lengths) read whole. What checkpoints' data records and preprocessing's dataset records hold."""
    state = xxhash.xxh3_128()
    for path in map(str, paths):
        update_with_file(state, path, Path(path).stat().st_size, 0 if path.endswith(".bin") else None)
    return f"{PREFIX}{state.hexdigest()[:24]}"
