"""Safe reading of Megatron indexed datasets (``.bin``/``.idx``): validation with clear errors and
document-level reads.

Reading goes through megatron-core's ``IndexedDataset`` (so files written by Megatron-LM's own
preprocessor load unchanged); this module adds what it does not check: missing files named explicitly,
a bad header, a truncated index, a ``.bin`` whose size disagrees with the index, and token ids outside
the tokenizer's vocabulary. A blend file opens as its shards read as one (:class:`ShardedIndexedDataset`).

Writing (torch-free, atomic) is :mod:`megatron_crossbert.data.indexed.writer`'s, beside this module.
"""

from __future__ import annotations

import os
import struct

import numpy as np
from megatron.core.datasets.indexed_dataset import IndexedDataset, get_bin_path, get_idx_path

from megatron_crossbert.data.indexed.blend_file import is_blend_file, read_blend
from megatron_crossbert.data.indexed.writer import HEADER_BYTES, read_header, require_pair

__all__ = ["CorruptDatasetError", "open_indexed", "resolve_prefix"]


class CorruptDatasetError(ValueError):
    """A .bin/.idx pair that cannot be what it claims to be."""


def resolve_prefix(prefix: str, key: str = "text") -> str:
    """Accept ``out/corpus_text_document``, the shorter ``out/corpus`` (preprocess prefix) or a blend file."""
    if os.path.exists(get_idx_path(prefix)) or os.path.exists(get_bin_path(prefix)) or is_blend_file(prefix):
        return prefix
    for level in ("document", "sentence"):
        candidate = f"{prefix}_{key}_{level}"
        if os.path.exists(get_idx_path(candidate)):
            return candidate
    return prefix


def _check_header(idx_path: str) -> None:
    try:
        read_header(idx_path)
    except ValueError as exc:
        raise CorruptDatasetError(str(exc)) from None


def _check_index_size(idx_path: str) -> None:
    """The counts in the header fit the file, and there is at least one document.

    Checked before megatron's IndexedDataset sees the file: a short file makes its constructor
    fail half-way, and the half-built object's ``__del__`` then prints extra tracebacks.
    """
    _, sequences, doc_indices = read_header(idx_path)
    if sequences == 0:
        raise CorruptDatasetError(f"{idx_path}: the dataset holds 0 documents (was the preprocessing input empty?)")
    needed = HEADER_BYTES + sequences * (4 + 8) + doc_indices * 8
    size = os.path.getsize(idx_path)
    if size < needed:
        raise CorruptDatasetError(f"{idx_path}: truncated: {size} bytes, but its header describes {sequences} "
                                  f"sequences ({needed} bytes)")


class _ConcatIndex:
    """The index a merge of the shards would write (``IndexedDataset.index``'s fields)."""

    def __init__(self, dtype: type, lengths: np.ndarray, document_indices: np.ndarray) -> None:
        self.dtype, self.dtype_size = dtype, np.dtype(dtype).itemsize
        self.sequence_lengths, self.document_indices = lengths, document_indices
        self.sequence_pointers = np.zeros(lengths.size, dtype=np.int64)
        np.cumsum(lengths[:-1], dtype=np.int64, out=self.sequence_pointers[1:])
        self.sequence_pointers *= self.dtype_size

    def __len__(self) -> int:
        return int(self.sequence_lengths.size)


class _ConcatBinReader:
    """Reads at merged byte offsets from the shard holding them (a document never spans shards)."""

    def __init__(self, bin_paths: list[str], byte_starts: np.ndarray) -> None:
        self.bin_paths, self.byte_starts = bin_paths, byte_starts
        self._maps: dict[int, np.memmap] = {}

    def read(self, dtype, count: int, offset: int) -> np.ndarray:
        shard = int(np.searchsorted(self.byte_starts, offset, side="right")) - 1
        local = offset - int(self.byte_starts[shard])
        if local + count * np.dtype(dtype).itemsize > self.byte_starts[shard + 1] - self.byte_starts[shard]:
            raise ValueError(f"{self.bin_paths[shard]}: a read of {count} tokens at byte {local} runs past the shard")
        if shard not in self._maps:
            self._maps[shard] = np.memmap(self.bin_paths[shard], dtype=np.uint8, mode="r")
        return np.frombuffer(self._maps[shard], dtype=dtype, count=count, offset=local)


class ShardedIndexedDataset:
    """The shards of a blend file as one indexed dataset: the merged dataset's index and bytes
    (:mod:`megatron_crossbert.data.indexed.blend_file`). Pickles as its path (DataLoader workers reopen it)."""

    def __init__(self, path: str) -> None:
        self.path_prefix = path
        shard_set = read_blend(path)
        shards = shard_set.shards
        doc_offsets = np.cumsum([0] + [int(s.lengths.size) for s in shards[:-1]], dtype=np.int64)
        docs = np.concatenate([np.zeros(1, np.int64)] + [s.document_indices[1:] + off
                                                         for s, off in zip(shards, doc_offsets)])
        self.index = _ConcatIndex(shard_set.dtype, np.concatenate([s.lengths for s in shards]), docs)
        self.parts = [(get_bin_path(s.prefix), s.tokens) for s in shards]
        starts = np.cumsum([0] + [tokens * self.index.dtype_size for _, tokens in self.parts], dtype=np.int64)
        self.bin_reader = _ConcatBinReader([p for p, _ in self.parts], starts)

    @property
    def document_indices(self) -> np.ndarray:
        return self.index.document_indices

    def __len__(self) -> int:
        return len(self.index)

    def __getstate__(self) -> str:
        return self.path_prefix

    def __setstate__(self, path: str) -> None:
        self.__init__(path)


def open_indexed(prefix: str, mmap: bool = True) -> IndexedDataset | ShardedIndexedDataset:
    """Open ``prefix.bin/.idx`` after checking they exist, the header, and the sizes agree; a blend
    file (``*.blend.json``) opens as its shards' :class:`ShardedIndexedDataset`."""
    if is_blend_file(prefix):
        return ShardedIndexedDataset(prefix)
    idx_path, bin_path = get_idx_path(prefix), get_bin_path(prefix)
    require_pair(prefix)
    _check_header(idx_path)
    _check_index_size(idx_path)
    try:
        dataset = IndexedDataset(prefix, multimodal=False, mmap=mmap)
    except (AssertionError, ValueError, struct.error, OSError) as exc:
        raise CorruptDatasetError(f"{idx_path}: corrupt or truncated index ({exc!r})") from exc
    expected = int(dataset.index.sequence_lengths.astype(np.int64).sum()) * dataset.index.dtype_size
    actual = os.path.getsize(bin_path)
    if actual != expected:
        raise CorruptDatasetError(f"{bin_path}: size {actual} bytes, but {idx_path} describes {expected} bytes "
                                  "(truncated or mismatched .bin/.idx pair)")
    return dataset


def document_lengths(dataset: IndexedDataset) -> np.ndarray:
    """Tokens per document (sum of its sequences; sentence-split documents have several)."""
    seq = np.concatenate([[0], np.cumsum(dataset.index.sequence_lengths, dtype=np.int64)])
    docs = np.asarray(dataset.index.document_indices, dtype=np.int64)
    return seq[docs[1:]] - seq[docs[:-1]]


class DocumentReader:
    """``reader(doc, offset, count)``: a document's tokens are contiguous in the .bin (as written by
    ``IndexedDatasetBuilder``), so one read from its first sequence's pointer suffices. A class, not
    a closure, so datasets pickle into spawned DataLoader workers."""

    def __init__(self, dataset: IndexedDataset) -> None:
        self.dataset = dataset
        self.first_seq = np.asarray(dataset.index.document_indices, dtype=np.int64)

    def __call__(self, doc: int, offset: int, count: int) -> np.ndarray:
        index = self.dataset.index
        start = int(index.sequence_pointers[self.first_seq[doc]]) + offset * index.dtype_size
        return self.dataset.bin_reader.read(dtype=index.dtype, count=count, offset=start)


def document_reader(dataset: IndexedDataset) -> DocumentReader:
    return DocumentReader(dataset)


def check_vocab(dataset: IndexedDataset, vocab_size: int, prefix: str, max_tokens: int = 1 << 26) -> None:
    """Raise if token ids reach ``vocab_size`` (data made with another tokenizer). Scans at most
    ``max_tokens`` tokens from each end of the file; samples are also checked when read."""
    files = getattr(dataset, "parts", None) or [
        (get_bin_path(prefix), int(dataset.index.sequence_lengths.astype(np.int64).sum()))]
    top = max((_max_id(path, dataset.index.dtype, total, max_tokens) for path, total in files if total), default=0)
    if top >= vocab_size:
        raise ValueError(f"{prefix}: token id {top} >= tokenizer vocab size {vocab_size}; the data was "
                         "tokenized with a different (larger) vocabulary than the configured tokenizer")


def _max_id(bin_file: str, dtype, total: int, max_tokens: int) -> int:
    """The largest id among the first and last ``max_tokens`` tokens of one ``.bin``."""
    data = np.memmap(bin_file, dtype=dtype, mode="r", shape=(total,))
    parts = [data] if total <= 2 * max_tokens else [data[:max_tokens], data[-max_tokens:]]
    return max(int(part.max()) for part in parts)
