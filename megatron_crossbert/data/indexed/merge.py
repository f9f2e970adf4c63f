"""Many ``.bin/.idx`` prefixes into one, as Megatron-LM's ``tools/merge_datasets.py`` does, but checked.

Megatron-LM's merge takes the dtype of the first prefix and copies the rest blindly: shards written
with another tokenizer (same dtype, other ids) merge without a word and train on garbage. Here every
prefix is read first (:func:`read_shards`) and the merge is refused, in one line naming the file, when
a prefix is truncated or its token dtype, vocabulary size or tokenizer record (``fingerprint``)
differs from the first one's, or when some prefixes have a record and others do not.

The merged pair is written like the preprocessor's: under temporary names, renamed into place at the
end (the ``.idx`` last), the tokenizer record beside it. The bytes are exactly what one run over the
shards' inputs in the same order writes: tokens concatenated, sequence lengths concatenated, byte
offsets recomputed, document indices shifted (what ``IndexedDatasetBuilder.add_index`` does).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import numpy as np

from megatron_crossbert.content_identity import dataset_fingerprint
from megatron_crossbert.data.indexed.writer import AtomicIndexedWriter, bin_path, idx_path, read_index
from megatron_crossbert.data.tokenizers.fingerprint import read_dataset_record, record_path, save_dataset_record
from megatron_crossbert.fsutil import move_aside, remove_stale_temporaries
from megatron_crossbert.outputs import require_output_dir

logger = logging.getLogger(__name__)


@dataclass
class Shard:
    """One input prefix, its index read and checked."""

    prefix: str
    lengths: np.ndarray
    """Tokens per sequence (int32)."""
    document_indices: np.ndarray
    """``0`` then the sequence count after each document (int64)."""

    @property
    def tokens(self) -> int:
        return int(self.lengths.sum(dtype=np.int64))

    @property
    def documents(self) -> int:
        return int(self.document_indices.size - 1)


@dataclass
class ShardSet:
    """Prefixes that may be read as one dataset: one dtype, one tokenizer record (or none at all)."""

    shards: list[Shard]
    dtype: type
    record: dict | None
    """The tokenizer record all shards share; None for shards written by other tools (Megatron-LM)."""


def _record_problem(first: Shard, first_record: dict | None, shard: Shard, record: dict | None) -> str | None:
    if (first_record is None) != (record is None):
        has, lacks = (first, shard) if record is None else (shard, first)
        return (f"{record_path(lacks.prefix)} is missing, but {record_path(has.prefix)} exists (shards of "
                "different tools or an unfinished task)")
    if record is None:
        return None
    if record.get("vocab_size") != first_record.get("vocab_size"):
        return (f"vocabulary of {record.get('vocab_size')} tokens, but {first.prefix} has "
                f"{first_record.get('vocab_size')}")
    if record["fingerprint"] != first_record["fingerprint"]:
        return (f"tokenizer record {record['fingerprint']} ({record.get('tokenizer')}), but {first.prefix} has "
                f"{first_record['fingerprint']} ({first_record.get('tokenizer')})")
    return None


def read_shards(prefixes: list[str]) -> ShardSet:
    """Read and cross-check every prefix's index and tokenizer record (ValueError in one line)."""
    if not prefixes:
        raise ValueError("no .bin/.idx pairs to read")
    shards, dtype, first_record = [], None, None
    for prefix in prefixes:
        shard_dtype, lengths, docs = read_index(prefix)
        shard, record = Shard(prefix, lengths, docs), read_dataset_record(prefix)
        if not shards:  # a shard's own content fingerprint is not the joined data's
            dtype, first_record = shard_dtype, record and {k: v for k, v in record.items() if k != "content"}
        elif shard_dtype != dtype:
            raise ValueError(f"{idx_path(prefix)}: token dtype {np.dtype(shard_dtype).name}, but "
                             f"{idx_path(prefixes[0])} has {np.dtype(dtype).name}")
        elif (problem := _record_problem(shards[0], first_record, shard, record)) is not None:
            raise ValueError(f"{prefix}: {problem}")
        shards.append(shard)
    return ShardSet(shards, dtype, first_record)


def _outputs(output_prefix: str) -> list[str]:
    return [bin_path(output_prefix), idx_path(output_prefix), str(record_path(output_prefix))]


def _clear_outputs(output_prefix: str, force: bool) -> None:
    """Refuse existing outputs, or with ``force`` move them aside (never delete what we did not make)."""
    require_output_dir(os.path.dirname(os.path.abspath(output_prefix)), "--output-prefix's directory")
    existing = [p for p in _outputs(output_prefix) if os.path.exists(p)]
    if existing and not force:
        raise FileExistsError(f"{existing[0]}: exists; refusing to overwrite (pass --force to move it aside)")
    for path in existing:
        move_aside(path)
    remove_stale_temporaries(_outputs(output_prefix))


def check_output_prefix(shard_set: ShardSet, output_prefix: str) -> None:
    """The output is neither an input nor in an input's folder, by real path (a symlinked folder is the folder
    it points to): there a later merge of the folder would read it as one more shard, and ``--force`` would
    move an input aside before reading it."""
    real = os.path.realpath(output_prefix)
    if real in {os.path.realpath(s.prefix) for s in shard_set.shards}:
        raise ValueError(f"{output_prefix}: --output-prefix is one of the inputs")
    folders = {os.path.dirname(os.path.realpath(s.prefix)) for s in shard_set.shards}
    if os.path.dirname(real) in folders:
        raise ValueError(f"{output_prefix}: --output-prefix is in the folder of the shards it merges "
                         f"({os.path.dirname(real)}): a later merge of that folder would read it as one more shard; "
                         "write it elsewhere")


def merge_shards(shard_set: ShardSet, output_prefix: str, force: bool = False, progress=None) -> dict:
    """Write the merged pair (and the shared tokenizer record); returns a summary. ``progress(shard)``
    is called after each shard is copied."""
    check_output_prefix(shard_set, output_prefix)
    _clear_outputs(output_prefix, force)
    writer = AtomicIndexedWriter(output_prefix, None, dtype=shard_set.dtype)
    try:
        for shard in shard_set.shards:
            writer.builder.add_dataset(shard.prefix, shard.lengths, shard.document_indices)
            if progress is not None:
                progress(shard)
        writer.finalize()
        if shard_set.record is not None:  # beside the pair before the .idx seals it, as preprocessing does
            content = dataset_fingerprint([bin_path(writer.tmp_prefix), idx_path(writer.tmp_prefix)])
            save_dataset_record(output_prefix, shard_set.record | {"content": content})
        writer.commit()
    except BaseException:
        writer.abort()
        raise
    return {"output_prefix": output_prefix, "prefixes": len(shard_set.shards),
            "documents": sum(s.documents for s in shard_set.shards),
            "tokens": sum(s.tokens for s in shard_set.shards), "dtype": np.dtype(shard_set.dtype).name}
