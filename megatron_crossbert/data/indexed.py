"""Safe access to Megatron indexed datasets (``.bin``/``.idx``): validation with clear errors,
document-level reads, and atomic writing.

Reading and writing go through ``megatron.core.datasets.indexed_dataset`` (so files written by
Megatron-LM's own preprocessor load unchanged); this module adds what it does not check: missing
files named explicitly, a bad header, a truncated index, a ``.bin`` whose size disagrees with the
index, and token ids outside the tokenizer's vocabulary.

Writing (torch-free, atomic) lives in :mod:`megatron_crossbert.data.idx_format`; its
``AtomicIndexedWriter`` is re-exported here for existing callers.
"""

from __future__ import annotations

import os
import struct

import numpy as np
from megatron.core.datasets.indexed_dataset import IndexedDataset, get_bin_path, get_idx_path

from megatron_crossbert.data.idx_format import HEADER_BYTES, AtomicIndexedWriter, read_header

__all__ = ["AtomicIndexedWriter", "CorruptDatasetError", "open_indexed", "resolve_prefix"]


class CorruptDatasetError(ValueError):
    """A .bin/.idx pair that cannot be what it claims to be."""


def resolve_prefix(prefix: str, key: str = "text") -> str:
    """Accept ``out/corpus_text_document`` or the shorter ``out/corpus`` (preprocess prefix)."""
    if os.path.exists(get_idx_path(prefix)) or os.path.exists(get_bin_path(prefix)):
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


def open_indexed(prefix: str, mmap: bool = True) -> IndexedDataset:
    """Open ``prefix.bin/.idx`` after checking they exist, the header, and the sizes agree."""
    idx_path, bin_path = get_idx_path(prefix), get_bin_path(prefix)
    missing = [p for p in (idx_path, bin_path) if not os.path.isfile(p)]
    if missing:
        raise FileNotFoundError(f"indexed dataset {prefix!r} is incomplete; missing: {', '.join(missing)} "
                                "(run crossbert-preprocess, or pass the prefix without .bin/.idx)")
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
    total = int(dataset.index.sequence_lengths.astype(np.int64).sum())
    if total == 0:
        return
    data = np.memmap(get_bin_path(prefix), dtype=dataset.index.dtype, mode="r", shape=(total,))
    parts = [data] if total <= 2 * max_tokens else [data[:max_tokens], data[-max_tokens:]]
    top = max(int(part.max()) for part in parts)
    if top >= vocab_size:
        raise ValueError(f"{prefix}: token id {top} >= tokenizer vocab size {vocab_size}; the data was "
                         "tokenized with a different (larger) vocabulary than the configured tokenizer")
