"""The Megatron indexed-dataset file format (``.bin``/``.idx``), written with numpy only.

Why not ``megatron.core.datasets.indexed_dataset.IndexedDatasetBuilder``: importing that module
imports torch, which costs the preprocessor ~7 CPU-seconds and ~1 GB of RSS before the first
document is read. This module owns the format for writing (and the header for checking); the
bytes are the builder's, byte for byte (``tests/data/indexed/test_writer.py`` compares them, and reads
the result back with megatron-core's ``IndexedDataset``).

Layout of ``.idx`` (little-endian): the 9-byte magic ``MMIDIDX\\0\\0``, version ``<Q`` = 1, the token
dtype code ``<B``, the sequence count ``<Q``, the document-index count ``<Q``; then int32 sequence
lengths, int64 byte offsets of each sequence in the ``.bin``, and int64 document indices (``0``
followed by the number of sequences after each document). ``.bin`` holds the tokens back to back.

:class:`AtomicIndexedWriter` writes under ``<prefix>.tmp-<pid>`` and renames into place on commit:
old ``.idx`` removed first, then ``.bin`` then ``.idx`` renamed, so a crash leaves the old pair, no
``.idx``, or the new pair, never an index describing the wrong data.
"""

from __future__ import annotations

import os
import shutil
import struct
from pathlib import Path

import numpy as np

from megatron_crossbert.fsutil import commit_group, temp_sibling

INDEX_HEADER = b"MMIDIDX\x00\x00"
"""Magic bytes opening every ``.idx`` file."""

DTYPE_CODES: dict[type, int] = {np.uint8: 1, np.int8: 2, np.int16: 3, np.int32: 4, np.int64: 5,
                                np.float64: 6, np.float32: 7, np.uint16: 8}
"""Token dtype -> the code stored in the header (megatron-core's ``DType``)."""

HEADER_BYTES = len(INDEX_HEADER) + 8 + 1 + 8 + 8


def optimal_dtype(vocab_size: int | None) -> type:
    """uint16 below 65,500 ids (megatron-core's threshold, so files match), else int32."""
    return np.uint16 if vocab_size is not None and vocab_size < 65500 else np.int32


def dtype_from_code(code: int) -> type:
    for dtype, value in DTYPE_CODES.items():
        if value == code:
            return dtype
    raise ValueError(f"unknown token dtype code {code}")


def read_header(idx_path: str) -> tuple[type, int, int]:
    """``(dtype, sequence_count, document_index_count)``; ValueError naming the file if malformed."""
    with open(idx_path, "rb") as handle:
        head = handle.read(HEADER_BYTES)
    if len(head) < HEADER_BYTES or not head.startswith(INDEX_HEADER):
        raise ValueError(f"{idx_path}: not a Megatron indexed-dataset index (bad or truncated header)")
    version, code = struct.unpack("<QB", head[9:18])
    if version != 1:
        raise ValueError(f"{idx_path}: unsupported index version {version}")
    try:
        dtype = dtype_from_code(code)
    except ValueError:
        raise ValueError(f"{idx_path}: unknown token dtype code {code}") from None
    sequences, documents = struct.unpack("<QQ", head[18:34])
    return dtype, sequences, documents


def read_index(prefix: str) -> tuple[type, np.ndarray, np.ndarray]:
    """``(dtype, sequence lengths, document indices)`` of ``prefix.idx``, checked against the file sizes
    (ValueError naming the file): what a merge needs, without torch."""
    path = idx_path(prefix)
    dtype, sequences, documents = read_header(path)
    needed = HEADER_BYTES + sequences * (4 + 8) + documents * 8
    if os.path.getsize(path) < needed:
        raise ValueError(f"{path}: truncated: {os.path.getsize(path)} bytes, its header describes {needed}")
    lengths = np.fromfile(path, dtype=np.int32, count=sequences, offset=HEADER_BYTES)
    docs = np.fromfile(path, dtype=np.int64, count=documents, offset=HEADER_BYTES + sequences * 12)
    expected = int(lengths.sum(dtype=np.int64)) * np.dtype(dtype).itemsize
    if os.path.getsize(bin_path(prefix)) != expected:
        raise ValueError(f"{bin_path(prefix)}: {os.path.getsize(bin_path(prefix))} bytes, but {path} describes "
                         f"{expected} (truncated or mismatched .bin/.idx pair)")
    if documents < 1 or docs[0] != 0 or docs[-1] != sequences or np.any(np.diff(docs) < 0):
        raise ValueError(f"{path}: document indices do not cover its {sequences} sequences in order")
    return dtype, lengths, docs


def bin_path(prefix: str) -> str:
    return prefix + ".bin"


def require_pair(prefix: str, named_by: str | None = None,
                 remedy: str = "run crossbert-preprocess, or pass the prefix without .bin/.idx") -> None:
    """Both files of ``prefix`` exist, else FileNotFoundError in one line naming the missing ones and
    (``named_by``: ``"run.blend.json: entry 3"``, ``"data.data_path"``) what named the prefix."""
    missing = [p for p in (idx_path(prefix), bin_path(prefix)) if not os.path.isfile(p)]
    if missing:
        where = f"{named_by}: " if named_by else ""
        raise FileNotFoundError(f"{where}indexed dataset {prefix!r} is incomplete; missing: {', '.join(missing)} "
                                f"({remedy})")


def idx_path(prefix: str) -> str:
    return prefix + ".idx"


class IndexedWriter:
    """Streams tokens into ``.bin``; keeps only per-sequence lengths (int32) until :meth:`finalize`.

    Memory is 4 bytes per sequence plus 8 per document, independent of the number of tokens.
    """

    def __init__(self, bin_file: str, dtype: type = np.int32) -> None:
        self.dtype = np.dtype(dtype).type
        self.data_file = open(bin_file, "wb")  # noqa: SIM115 (closed in finalize/abort)
        self._lengths: list[np.ndarray] = []
        self._doc_ends: list[np.ndarray] = []
        self.num_sequences = 0

    def add_document(self, tokens, lengths) -> None:
        """One document of one or more sequences (``lengths`` sum to ``len(tokens)``)."""
        self.add_documents(np.asarray(tokens), np.asarray(lengths, dtype=np.int64),
                           np.array([len(lengths)], dtype=np.int64))

    def add_documents(self, tokens: np.ndarray, seq_lengths: np.ndarray, seqs_per_doc: np.ndarray) -> None:
        """Many documents at once: flat ``tokens``, each sequence's length, each document's sequence count."""
        self.data_file.write(np.ascontiguousarray(tokens, dtype=self.dtype).tobytes())
        self._lengths.append(np.asarray(seq_lengths, dtype=np.int32))
        self._doc_ends.append(self.num_sequences + np.cumsum(seqs_per_doc, dtype=np.int64))
        self.num_sequences += int(len(seq_lengths))

    def add_dataset(self, prefix: str, seq_lengths: np.ndarray, document_indices: np.ndarray) -> None:
        """Append a whole ``.bin/.idx`` pair of this dtype (its index already read): the bytes copied
        as they are, its documents after ours (Megatron's ``IndexedDatasetBuilder.add_index``)."""
        with open(bin_path(prefix), "rb") as source:
            shutil.copyfileobj(source, self.data_file, 16 << 20)
        self._lengths.append(np.asarray(seq_lengths, dtype=np.int32))
        self._doc_ends.append(self.num_sequences + np.asarray(document_indices[1:], dtype=np.int64))
        self.num_sequences += int(len(seq_lengths))

    def finalize(self, idx_file: str) -> None:
        """Close the ``.bin`` and write the ``.idx``."""
        self.data_file.close()
        lengths = np.concatenate([np.zeros(0, np.int32), *self._lengths])
        doc_index = np.concatenate([np.zeros(1, np.int64), *self._doc_ends])
        pointers = np.zeros(len(lengths), dtype=np.int64)
        np.cumsum(lengths[:-1], dtype=np.int64, out=pointers[1:])
        pointers *= np.dtype(self.dtype).itemsize
        with open(idx_file, "wb") as handle:
            handle.write(INDEX_HEADER + struct.pack("<QB", 1, DTYPE_CODES[self.dtype]))
            handle.write(struct.pack("<QQ", len(lengths), len(doc_index)))
            for array in (lengths, pointers, doc_index):
                handle.write(array.tobytes())


class AtomicIndexedWriter:
    """:class:`IndexedWriter` on temporary names, renamed into place by :meth:`commit`."""

    def __init__(self, prefix: str, vocab_size: int | None, dtype=None) -> None:
        self.prefix = prefix
        self.tmp_prefix = temp_sibling(prefix)
        self.dtype = dtype if dtype is not None else optimal_dtype(vocab_size)
        Path(prefix).parent.mkdir(parents=True, exist_ok=True)
        self.builder = IndexedWriter(bin_path(self.tmp_prefix), dtype=self.dtype)
        self.finalized = False

    def add_document(self, tokens, lengths) -> None:
        self.builder.add_document(tokens, lengths)

    def add_documents(self, tokens: np.ndarray, seq_lengths: np.ndarray, seqs_per_doc: np.ndarray) -> None:
        self.builder.add_documents(tokens, seq_lengths, seqs_per_doc)

    def finalize(self) -> None:
        """Write the temporary .idx (data complete, still under the temporary name)."""
        self.builder.finalize(idx_path(self.tmp_prefix))
        self.finalized = True

    def commit(self) -> None:
        if not self.finalized:
            self.finalize()
        commit_group([(bin_path(self.tmp_prefix), bin_path(self.prefix)),
                      (idx_path(self.tmp_prefix), idx_path(self.prefix))])  # the .idx seals the pair

    def abort(self) -> None:
        """Remove temporary files (after an error or Ctrl-C); final names are left untouched."""
        if not self.builder.data_file.closed:
            self.builder.data_file.close()
        for path in (bin_path(self.tmp_prefix), idx_path(self.tmp_prefix)):
            if os.path.exists(path):
                os.remove(path)
