"""Content hashes for every file of a checkpoint: recorded at commit, verified before any use.

DCP's ``.metadata`` records only where each item lies (offset, length), so without a record one
flipped byte in a ``.distcp`` shard loads silently, and export and resume run on the changed
weight. ``iter_*/checksums.json`` records, for every other file of the directory, its size and a
streaming xxh3-128 digest: xxhash runs at ~20 GB/s on one core here, against ~1.1 for blake2b and
~1.6 for SHA-256 (megatron-core's own ``integrity.json``, which also makes rank 0 hash every file).
It is a checksum against storage faults, not a signature: whoever can flip a byte can rewrite it.

Recording (``save._commit``), after every rank's shards are on disk and before ``run_config.json``
marks the save complete: each rank hashes the shards it wrote (``__<rank>_*.distcp``), rank 0
gathers them, hashes the rest (``.metadata``, ``metadata.json``, the records) and the text of
``run_config.json`` about to be written, so the completeness marker is covered too. Verifying
(:func:`check_contents`, through ``verify.verify_contents``): sizes first, then hashes, split across the ranks of a job
(:func:`files_for_rank`) and gathered, so every rank raises the same one line naming the file.

What a record must cover: a checkpoint saved by a version that writes records and found
without one is damaged, not old (:func:`missing_record`; its ``run_config.json`` says which version
wrote it), and every file a load reads must be listed (:func:`unrecorded_reads`): the shards ``.metadata``
lists, ``.metadata`` itself, the configs and records. Otherwise deleting the record, or one entry of
it, would let a flipped byte through with a misleading warning or none. Only a checkpoint from before
records loads without one, with one warning per directory; a file no load reads may stay unrecorded.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Literal

from megatron_crossbert.checkpoint.data_record import RECORD_FILE as DATA_RECORD_FILE
from megatron_crossbert.checkpoint.directories import RUN_CONFIG_FILE
from megatron_crossbert.checkpoint.errors import CheckpointError, ChecksumMismatchError
from megatron_crossbert.checkpoint.safe_pickle import (
    LEGACY_COMMON_FILE, MEGATRON_CONFIG_FILE, METADATA_FILE, listed_shards, load_metadata,
)
from megatron_crossbert.checkpoint.tokenizer_record import RECORD_FILE as TOKENIZER_RECORD_FILE
from megatron_crossbert.content_identity import hash_bytes, hash_file
from megatron_crossbert.fsutil import atomic_write_text

logger = logging.getLogger(__name__)

CHECKSUMS_FILE = "checksums.json"
ALGORITHM = "xxh3_128"

ContentsVerdict = Literal["verified", "unrecorded", "off", "pending"]
"""What the content check of a checkpoint found: every recorded file matches; no record (saved by
an older version); not checked (``checkpoint.verify=off``); or not yet checked (a training start
checks after the process group exists, so the ranks can share the work)."""

_warned: set[str] = set()


def _entry(path: Path) -> dict:
    return {"bytes": path.stat().st_size, "hash": hash_file(path)}


def own_shards(ckpt_dir: Path, rank: int) -> dict[str, dict]:
    """This rank's share of a commit's hashing: the shard files it wrote (``__<rank>_<n>.distcp``)."""
    mine = re.compile(rf"__{rank}_\d+\.distcp")
    return {p.name: _entry(p) for p in sorted(ckpt_dir.iterdir()) if p.is_file() and mine.fullmatch(p.name)}


def write_record(ckpt_dir: Path, hashed: dict[str, dict], pending: dict[str, bytes]) -> None:
    """Rank 0 at commit: ``hashed`` (every rank's shards), every other file of the directory, and
    ``pending`` (name -> bytes of a file about to be written: ``run_config.json``)."""
    files = dict(hashed)
    for path in sorted(ckpt_dir.iterdir()):
        if path.is_file() and path.name not in files and path.name != CHECKSUMS_FILE:
            files[path.name] = _entry(path)
    for name, data in pending.items():
        files[name] = {"bytes": len(data), "hash": hash_bytes(data)}
    payload = {"version": 1, "algorithm": ALGORITHM, "files": dict(sorted(files.items()))}
    atomic_write_text(ckpt_dir / CHECKSUMS_FILE, json.dumps(payload, indent=1) + "\n")


def read_record(ckpt_dir: Path) -> dict[str, dict] | None:
    """name -> {bytes, hash}; None for a checkpoint saved before checksums (CheckpointError if damaged)."""
    path = ckpt_dir / CHECKSUMS_FILE
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text())
        files, algorithm = record["files"], record["algorithm"]
        sizes = {name: int(entry["bytes"]) for name, entry in files.items()}
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise CheckpointError(f"{path}: not a readable checksum record ({type(err).__name__}: {err})") from None
    if algorithm != ALGORITHM:
        raise CheckpointError(f"{path}: unknown checksum algorithm {algorithm!r} (this version knows {ALGORITHM})")
    return {name: {"bytes": sizes[name], "hash": str(files[name].get("hash"))} for name in files}


def missing_record(ckpt_dir: Path, evidence: str | None) -> None:
    """A checkpoint without a record: one warning per directory when it was saved before records existed
    (``evidence`` None), else ChecksumMismatchError (``evidence``: why the version that saved it wrote one)."""
    if evidence is None:
        warn_unrecorded(ckpt_dir)
        return
    raise ChecksumMismatchError(
        f"{ckpt_dir / CHECKSUMS_FILE}: missing, but this checkpoint was saved with checksums ({evidence}); "
        f"it is damaged: restore the file from a copy, use an earlier checkpoint, or read it unverified "
        f"with checkpoint.verify=off (--checkpoint-verify off; --verify off for export, probe and MTEB)")


def unrecorded_reads(ckpt_dir: Path, files: dict[str, dict], reads: dict[str, str]) -> list[str]:
    """One line per file a load reads (``reads``: name -> why it is read) that the record does not
    list: the record is incomplete, so nothing vouches for that file."""
    return [f"{ckpt_dir / name}: read by this checkpoint ({why}) but not recorded in {CHECKSUMS_FILE}; "
            f"the record is incomplete: restore it from a copy or use an earlier checkpoint"
            for name, why in reads.items() if name not in files]


def files_for_rank(sizes: dict[str, int], rank: int, world: int) -> list[str]:
    """This rank's share of a verification: largest first, dealt round-robin (each file once)."""
    ordered = sorted(sizes, key=lambda name: (-sizes[name], name))
    return ordered[rank::world]


def problems(ckpt_dir: Path, files: dict[str, dict], names: list[str]) -> list[str]:
    """One line per file of ``names`` that is missing, of another size, or of other content."""
    out = []
    for name in names:
        path, expected = ckpt_dir / name, files[name]
        if not path.is_file():
            out.append(f"{path}: missing, but {ckpt_dir / CHECKSUMS_FILE} records it")
        elif (size := path.stat().st_size) != expected["bytes"]:
            out.append(f"{path}: {size} bytes, but {expected['bytes']} were saved; restore it from a copy or "
                       f"use an earlier checkpoint")
        elif (found := hash_file(path)) != expected["hash"]:
            out.append(f"{path}: content changed since it was saved ({ALGORITHM} {found[:12]}..., recorded "
                       f"{expected['hash'][:12]}...); restore it from a copy or use an earlier checkpoint")
    return out


def warn_unrecorded(ckpt_dir: Path) -> None:
    """Once per directory and process: a checkpoint from before checksums cannot be verified."""
    if str(ckpt_dir) not in _warned:
        _warned.add(str(ckpt_dir))
        logger.warning("%s has no %s (saved by an older version): its files cannot be verified",
                       ckpt_dir, CHECKSUMS_FILE)


def raise_first(found: list[str]) -> None:
    """The first problem as the one-line error (the others are the same kind of damage)."""
    if found:
        more = f" (and {len(found) - 1} more file(s))" if len(found) > 1 else ""
        raise ChecksumMismatchError(found[0] + more)


def _recording_evidence(ckpt_dir: Path) -> str | None:
    """Why ``ckpt_dir`` must have a checksum record: the version that introduced ``checksums.json``
    also introduced ``checkpoint.verify`` (in ``run_config.json``) and ``checkpoint.data.json``. None for
    a checkpoint older than both. Read only when the record is missing."""
    try:
        saved = json.loads((ckpt_dir / RUN_CONFIG_FILE).read_text())
    except (OSError, ValueError):
        saved = None
    if isinstance(saved, dict) and isinstance(saved.get("checkpoint"), dict) and "verify" in saved["checkpoint"]:
        return f"its {RUN_CONFIG_FILE} records checkpoint.verify"
    return f"it has {DATA_RECORD_FILE}" if (ckpt_dir / DATA_RECORD_FILE).is_file() else None


def _read_by_loads(ckpt_dir: Path, files: dict[str, dict]) -> dict[str, str]:
    """Every file a load of ``ckpt_dir`` reads -> why. The shards come from ``.metadata``, unpickled
    (under ``safe_pickle``'s allowlist) only once its recorded hash was checked."""
    reads = {METADATA_FILE: "the index of every load", RUN_CONFIG_FILE: "the saved run config"}
    for name, why in ((MEGATRON_CONFIG_FILE, "megatron's checkpoint config"),
                      (TOKENIZER_RECORD_FILE, "the tokenizer record"),
                      (DATA_RECORD_FILE, "the data record"), (LEGACY_COMMON_FILE, "megatron's common state")):
        if (ckpt_dir / name).is_file():
            reads[name] = why
    if METADATA_FILE in files:
        shards = listed_shards(load_metadata(ckpt_dir / METADATA_FILE))
        reads |= {name: f"{METADATA_FILE} lists it" for name in shards}
    return reads


def check_contents(ckpt_dir: Path, mode: str, collective: bool = False) -> ContentsVerdict:
    """The checksum check of ``ckpt_dir`` (``checkpoint.verify``: ``full`` or ``off``): ChecksumMismatchError
    naming the first damaged file, or the first file a load reads that the record does not cover (checked once
    the hashes are, on every rank).

    ``collective``: every rank of the initialised process group hashes its share of the files and
    the problems are gathered, so all ranks raise the same line (each byte is read once per job).
    """
    if mode == "off":
        return "off"
    files = read_record(ckpt_dir)
    if files is None:
        missing_record(ckpt_dir, _recording_evidence(ckpt_dir))
        return "unrecorded"
    rank, world = 0, 1
    if collective:
        import torch.distributed as dist

        rank, world = dist.get_rank(), dist.get_world_size()
    found = problems(ckpt_dir, files, files_for_rank({n: e["bytes"] for n, e in files.items()}, rank, world))
    if world > 1:
        shares: list = [None] * world
        dist.all_gather_object(shares, found)
        found = [line for share in shares for line in share]
    raise_first(found)
    raise_first(unrecorded_reads(ckpt_dir, files, _read_by_loads(ckpt_dir, files)))
    return "verified"
