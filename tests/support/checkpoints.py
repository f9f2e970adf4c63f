"""Damaged and crafted checkpoints for the safety tests: a flipped bit, a hostile pickle, a swapped tokenizer.

Checksums catch storage faults, not attackers: ``reseal`` rewrites them the way whoever crafts a checkpoint
can, so the guards behind them are tested on their own.
"""

from __future__ import annotations

import hashlib
import os
import pickle
from pathlib import Path


def flip_byte(path: Path) -> None:
    """One bit flipped in the middle of ``path``: a storage fault that keeps every size."""
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def reseal(ckpt_dir: Path) -> None:
    """Rewrite ``checksums.json`` for the files as they are now, as whoever crafts a checkpoint can:
    checksums catch storage faults, not attackers; the guards behind them must hold on their own."""
    from megatron_crossbert.checkpoint.checksums import write_record

    write_record(ckpt_dir, {}, {})


def write_malicious_metadata(path: Path, marker: Path) -> None:
    """A pickle that calls os.mkdir(marker) when loaded: harmless, and visible if it ever runs
    (the checkpoint's checksums are rewritten to match, as an attacker would)."""

    class Payload:
        def __reduce__(self):
            return os.mkdir, (str(marker),)

    path.write_bytes(pickle.dumps(Payload()))
    reseal(path.parent)


def write_tokenizer(directory: Path, reverse: bool = False) -> Path:
    """A 128-token WordLevel tokenizer directory (specials first); ``reverse`` permutes the ordinary
    ids, so both have the same size and special ids but map ids to different words."""
    from tokenizers import Tokenizer as Backend
    from tokenizers import models, pre_tokenizers

    from megatron_crossbert.data.tokenizers.tokenizer import SPECIAL_TOKENS, Tokenizer, resolve_special_ids

    words = [f"w{i}" for i in range(128 - len(SPECIAL_TOKENS))]
    vocab = {tok: i for i, tok in enumerate([*SPECIAL_TOKENS.values(), *(words[::-1] if reverse else words)])}
    backend = Backend(models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    Tokenizer(backend, resolve_special_ids(backend, {}, str(directory))).save(directory)
    return directory


def tree_digest(root: Path) -> str:
    """Hash of every path, file content and mtime under root (any change shows), except the run lock's
    holder record: every start rewrites it, a refused one included (``checkpoint.run_lock``)."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.name == "run.lock":
            continue
        stat = path.stat()
        digest.update(f"{path.relative_to(root)}:{stat.st_mtime_ns}".encode())
        if path.is_file():
            digest.update(path.read_bytes())
    return digest.hexdigest()
