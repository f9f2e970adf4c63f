"""The per-chunk work of ``crossbert-preprocess``: parse, validate, split and tokenize lines.

A chunk's result is columnar (flat token array, sequence lengths, sequences per document, per
key) so the parent writes it with one ``write`` per key instead of one per document. The same
code runs inline (the usual case: the Rust encoders thread internally) or in pool workers
(``--split-sentences`` with ``--workers > 1``, where sentence splitting is Python and needs
processes). Either way the parent consumes results in input order and is the only writer, so
``--workers N`` is byte-identical to ``--workers 1``. Imports no torch/megatron; nltk arrives only
with a pickled splitter.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from megatron_crossbert.data.jsonl import LineChunk, parse_line
from megatron_crossbert.data.preprocessing.encoding import Encoder, make_encoder
from megatron_crossbert.data.tokenizers.sources import open_tokenizer

if TYPE_CHECKING:  # nltk costs seconds to import; only --split-sentences needs it
    from megatron_crossbert.data.preprocessing.sentences import SentenceSplitter


@dataclass(frozen=True)
class WorkerSpec:
    """Everything a worker needs; picklable (the tokenizer travels as a path, the backend as a name)."""

    tokenizer_path: str
    tokenizer_kind: str
    keys: tuple[str, ...]
    splitter: SentenceSplitter | None = None
    append_eod: bool = False
    eod_id: int = 0
    backend: str = "tokenizers"
    pieces: bool = False
    """Encode very long documents in pieces (verified exact for this tokenizer by the parent)."""


@dataclass
class KeyTokens:
    """One key's documents of a chunk: flat ids, each sequence's length, each document's sequence count."""

    tokens: np.ndarray
    seq_lengths: np.ndarray
    seqs_per_doc: np.ndarray


@dataclass
class ChunkResult:
    """What one chunk produced: per-key tokens of the kept documents and every skip, in line order."""

    path: str
    lines_read: int
    nbytes: int
    skips: list[tuple[int, str, str]] = field(default_factory=list)
    """``(line_no, kind, detail)`` sorted by line."""
    docs: dict[str, KeyTokens] = field(default_factory=dict)

    @property
    def written(self) -> int:
        return self.lines_read - len(self.skips)


_STATE: dict[str, object] = {}


def init_worker(spec: WorkerSpec, encoder: Encoder | None = None) -> None:
    """Set the chunk context (also called inline with the parent's verified encoder)."""
    _STATE["spec"] = spec
    _STATE["encoder"] = encoder if encoder is not None else make_encoder(
        open_tokenizer(spec.tokenizer_path, spec.tokenizer_kind), spec.backend, threads=1, pieces=spec.pieces)


def init_pool_worker(spec: WorkerSpec) -> None:
    """Pool initializer: one Rust thread per worker process (processes are the parallelism)."""
    from megatron_crossbert.data.preprocessing.encoding import set_threads

    set_threads(1)
    init_worker(spec)


def _encode_key(texts: list[str], spec: WorkerSpec, encoder: Encoder) -> KeyTokens:
    """Encode one key's texts (one batch over all their sentences); empty sentences are dropped."""
    if spec.splitter is None:
        flat, lengths = encoder.encode(texts)
        return KeyTokens(flat, lengths[lengths > 0], (lengths > 0).astype(np.int64))
    pieces = [spec.splitter.split(t) or [t] for t in texts]
    flat, lengths = encoder.encode([p for doc in pieces for p in doc])
    doc_of_piece = np.repeat(np.arange(len(texts)), [len(doc) for doc in pieces])
    keep = lengths > 0
    return KeyTokens(flat, lengths[keep], np.bincount(doc_of_piece[keep], minlength=len(texts)))


def _drop_docs(kt: KeyTokens, good: np.ndarray) -> KeyTokens:
    """Only the documents where ``good`` holds (documents another key found empty)."""
    seq_doc = np.repeat(np.arange(good.size), kt.seqs_per_doc)
    keep_seq = good[seq_doc]
    return KeyTokens(kt.tokens[np.repeat(keep_seq, kt.seq_lengths)], kt.seq_lengths[keep_seq],
                     kt.seqs_per_doc[good])


def _append_eod(kt: KeyTokens, eod_id: int) -> KeyTokens:
    """One eod token after each document's last sequence (every kept document has one)."""
    last = np.cumsum(kt.seqs_per_doc) - 1
    ends = np.cumsum(kt.seq_lengths)[last]
    lengths = kt.seq_lengths.copy()
    lengths[last] += 1
    return KeyTokens(np.insert(kt.tokens, ends, eod_id), lengths, kt.seqs_per_doc)


def _parse(chunk: LineChunk, keys: tuple[str, ...]) -> tuple[list[tuple[int, str, str]], list[int], dict]:
    skips, good_lines, texts = [], [], {key: [] for key in keys}
    for offset, data in enumerate(chunk.lines):
        parsed, kind = parse_line(data, keys)
        if parsed is None:
            skips.append((chunk.first_line + offset, kind, ""))
            continue
        good_lines.append(chunk.first_line + offset)
        for key in keys:
            texts[key].append(parsed[key])
    return skips, good_lines, texts


def process_chunk(chunk: LineChunk) -> ChunkResult:
    """Tokens of the chunk's good documents and its skips (parse errors, no_tokens, read errors)."""
    spec: WorkerSpec = _STATE["spec"]  # type: ignore[assignment]
    encoder: Encoder = _STATE["encoder"]  # type: ignore[assignment]
    skips, good_lines, texts = _parse(chunk, spec.keys)
    docs = {key: _encode_key(texts[key], spec, encoder) for key in spec.keys}
    good = np.logical_and.reduce([kt.seqs_per_doc > 0 for kt in docs.values()]) if good_lines else None
    if good is not None and not good.all():
        skips += [(line, "no_tokens", "") for line, ok in zip(good_lines, good) if not ok]
        docs = {key: _drop_docs(kt, good) for key, kt in docs.items()}
    if spec.append_eod:
        docs = {key: _append_eod(kt, spec.eod_id) for key, kt in docs.items()}
    lines_read = len(chunk.lines)
    if chunk.error is not None:
        skips.append((chunk.first_line + len(chunk.lines), chunk.error, chunk.detail))
        lines_read += 1
    return ChunkResult(chunk.path, lines_read, sum(map(len, chunk.lines)), sorted(skips), docs)
