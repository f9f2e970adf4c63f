"""Blend files: many shard prefixes read as the one dataset their merge would be, without merging.

A blend file (``<name>.blend.json``, written by ``crossbert-merge --blend-file``) lists prefixes in
order with their token and document counts; ``--data-path <name>.blend.json`` (``data.data_path``)
accepts it wherever a prefix goes. It is not a weighted blend: megatron's weighted blend packs and
shuffles each prefix on its own and draws samples by weight, so its samples differ from the merged
dataset's. :class:`ShardedIndexedDataset` instead presents the shards as one indexed dataset whose
index is the merged ``.idx`` (lengths and documents concatenated, byte offsets continued across the
shards) and whose reads go to the shard holding the bytes, so packing, shuffling and masking see
exactly the merged dataset: same samples, same order.

Checked when opened (one line naming the file and the entry): the entries add up to the file's totals,
no shard is listed twice, each shard's pair exists; every shard is read and cross-checked as a merge
would (``merge.read_shards``: dtype, vocabulary, tokenizer record), and each shard's counts must
still be the file's (a shard rewritten after the blend file was made is refused). Shard paths are
stored relative to the blend file, so the folder can move. The blend's tokenizer record is written
beside it (``<name>.blend.json.tokenizer.json``), so checkpoints compare it like any dataset's.
The index lives in memory (12 bytes per sequence, 8 per document), like a merged ``.idx`` read whole.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from megatron_crossbert.data.indexed.merge import ShardSet, read_shards
from megatron_crossbert.data.indexed.writer import bin_path, idx_path, require_pair
from megatron_crossbert.data.tokenizers.fingerprint import read_dataset_record, record_path, save_dataset_record
from megatron_crossbert.fsutil import atomic_write_text

BLEND_SUFFIX = ".blend.json"
FORMAT = "crossbert-blend/1"


def is_blend_file(path: str | os.PathLike) -> bool:
    return str(path).endswith(BLEND_SUFFIX)


def _stored_path(prefix: str, base: Path) -> str:
    """Relative to the blend file's folder when inside it, else absolute."""
    absolute = Path(prefix).absolute()
    try:
        return str(absolute.relative_to(base.absolute()))
    except ValueError:
        return str(absolute)


def write_blend_file(shard_set: ShardSet, path: str, force: bool = False) -> dict:
    """Write ``path`` (``*.blend.json``) and its tokenizer record; returns the payload."""
    if not is_blend_file(path):
        raise ValueError(f"--blend-file {path}: a blend file's name ends with {BLEND_SUFFIX}")
    if os.path.exists(path) and not force:
        raise FileExistsError(f"{path}: exists; refusing to overwrite (pass --force)")
    base = Path(path).parent
    payload = {"format": FORMAT, "dtype": np.dtype(shard_set.dtype).name,
               "documents": sum(s.documents for s in shard_set.shards),
               "tokens": sum(s.tokens for s in shard_set.shards),
               "datasets": [{"prefix": _stored_path(s.prefix, base), "documents": s.documents, "tokens": s.tokens}
                            for s in shard_set.shards]}
    base.mkdir(parents=True, exist_ok=True)
    if shard_set.record is not None:
        save_dataset_record(path, shard_set.record)
    atomic_write_text(path, json.dumps(payload, indent=2) + "\n")
    return payload


def _read_payload(path: str) -> dict:
    try:
        payload = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a readable blend file ({exc})") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT or not payload.get("datasets"):
        raise ValueError(f"{path}: not a {FORMAT} blend file (written by crossbert-merge --blend-file)")
    return payload


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _checked_entries(path: str, payload: dict) -> list[dict]:
    """The entries, each well formed, their sum the file's totals, no shard twice (one line naming the entry)."""
    entries = payload["datasets"]
    for number, entry in enumerate(entries, 1):
        if not (isinstance(entry, dict) and isinstance(entry.get("prefix"), str) and _is_count(entry.get("documents"))
                and _is_count(entry.get("tokens"))):
            raise ValueError(f"{path}: entry {number} is not {{prefix, documents, tokens}}: {entry!r}")
    for total in ("documents", "tokens"):
        summed = sum(entry[total] for entry in entries)
        if payload.get(total) != summed:
            raise ValueError(f"{path}: says {payload.get(total)} {total} in all, but its entries add up to {summed} "
                             "(an edited or damaged blend file; remake it with crossbert-merge --blend-file)")
    seen: dict[str, int] = {}
    base = Path(path).parent
    for number, entry in enumerate(entries, 1):
        real = os.path.realpath(base / entry["prefix"])
        if real in seen:
            raise ValueError(f"{path}: entries {seen[real]} and {number} name the same shard {entry['prefix']} "
                             "(its documents would be read twice)")
        seen[real] = number
    return entries


def blend_prefixes(path: str) -> list[str]:
    """The shard prefixes a blend file lists, in order, as paths; each checked to exist (one line naming the
    blend file and the entry)."""
    base = Path(path).parent
    prefixes = [str(base / entry["prefix"]) for entry in _checked_entries(path, _read_payload(path))]
    for number, prefix in enumerate(prefixes, 1):
        require_pair(prefix, f"{path}: entry {number}", "remake the blend file, or restore the shard")
    return prefixes


def blend_files(path: str) -> list[str]:
    """Every file the dataset is read from: the blend file, then each shard's ``.bin`` and ``.idx``."""
    return [path] + [f for prefix in blend_prefixes(path) for f in (bin_path(prefix), idx_path(prefix))]


def read_blend(path: str) -> ShardSet:
    """The blend's shards, read, cross-checked and compared with the counts the file recorded."""
    payload = _read_payload(path)
    shard_set = read_shards(blend_prefixes(path))
    if shard_set.record != read_dataset_record(path):  # the record training compares is the blend's own
        raise ValueError(f"{record_path(path)}: does not match the tokenizer record of {shard_set.shards[0].prefix} "
                         "(remake the blend file)")
    for entry, shard in zip(payload["datasets"], shard_set.shards):
        if (entry["documents"], entry["tokens"]) != (shard.documents, shard.tokens):
            raise ValueError(f"{path}: {shard.prefix} now holds {shard.documents} documents / {shard.tokens} tokens, "
                             f"the blend file says {entry['documents']} / {entry['tokens']} (remake the blend file)")
    return shard_set
