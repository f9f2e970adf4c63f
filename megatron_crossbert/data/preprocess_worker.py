"""The per-chunk work of ``crossbert-preprocess``: parse, validate, split and tokenize lines.

Runs in pool workers (or inline for ``--workers 1``) with the same code path either way, which is
what makes ``--workers N`` byte-identical to ``--workers 1``: workers only transform chunks, the
parent consumes results strictly in input order and is the only writer. Imports no torch/megatron
so spawned workers start quickly (nltk arrives only with a pickled splitter).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from megatron_crossbert.data.jsonl import RawLine, parse_line
from megatron_crossbert.data.tokenizer import Tokenizer, load_tokenizer

if TYPE_CHECKING:  # nltk costs seconds to import; only --split-sentences needs it
    from megatron_crossbert.data.sentences import SentenceSplitter


@dataclass(frozen=True)
class WorkerSpec:
    """Everything a worker needs; picklable (the tokenizer travels as a path)."""

    tokenizer_path: str
    keys: tuple[str, ...]
    splitter: SentenceSplitter | None = None
    append_eod: bool = False


@dataclass
class LineResult:
    """Outcome of one input line: ``skip`` kind, or per-key ``(tokens, sequence_lengths)``."""

    path: str
    line_no: int
    nbytes: int
    skip: str | None = None
    detail: str = ""
    docs: dict[str, tuple[np.ndarray, list[int]]] | None = None


_STATE: dict[str, object] = {}


def init_worker(spec: WorkerSpec, tokenizer: Tokenizer | None = None) -> None:
    """Pool initializer (also called inline). Loads the tokenizer once per process."""
    _STATE["spec"] = spec
    _STATE["tokenizer"] = tokenizer if tokenizer is not None else load_tokenizer(spec.tokenizer_path)


def init_pool_worker(spec: WorkerSpec) -> None:
    """Pool initializer. Parallelism comes from the processes, so each worker's Rust tokenizer runs
    single-threaded instead of oversubscribing the cores with N rayon thread pools. Lives here,
    not in ``preprocess``, so workers never import torch/megatron."""
    import os

    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    init_worker(spec)


def _pieces(text: str, splitter: SentenceSplitter | None) -> list[str]:
    if splitter is None:
        return [text]
    return splitter.split(text) or [text]


def _encode_key(texts: list[str], spec: WorkerSpec, tokenizer: Tokenizer) -> list[tuple[np.ndarray, list[int]]]:
    """Tokenize one key's texts of a chunk; one ``encode_batch`` call over all sentences."""
    pieces = [_pieces(t, spec.splitter) for t in texts]
    flat = tokenizer.encode_batch([p for doc in pieces for p in doc])
    out, pos = [], 0
    for doc in pieces:
        seqs = [ids for ids in flat[pos:pos + len(doc)] if ids]
        pos += len(doc)
        if spec.append_eod and seqs:
            seqs[-1] = seqs[-1] + [tokenizer.eod_id]
        lengths = [len(s) for s in seqs]
        tokens = np.fromiter((t for s in seqs for t in s), dtype=np.int64, count=sum(lengths))
        out.append((tokens, lengths))
    return out


def process_chunk(lines: list[RawLine]) -> list[LineResult]:
    """Results in input order, one per line."""
    spec: WorkerSpec = _STATE["spec"]  # type: ignore[assignment]
    tokenizer: Tokenizer = _STATE["tokenizer"]  # type: ignore[assignment]
    results: list[LineResult] = []
    good: list[tuple[LineResult, dict[str, str]]] = []
    for raw in lines:
        result = LineResult(raw.path, raw.line_no, len(raw.data or b""))
        results.append(result)
        if raw.data is None:
            result.skip, result.detail = "truncated_gzip", raw.error or ""
            continue
        texts, kind = parse_line(raw.data, spec.keys)
        if texts is None:
            result.skip = kind
        else:
            good.append((result, texts))
    encoded = {key: _encode_key([t[key] for _, t in good], spec, tokenizer) for key in spec.keys}
    for i, (result, _) in enumerate(good):
        docs = {key: encoded[key][i] for key in spec.keys}
        if any(not lengths for _, lengths in docs.values()):
            result.skip = "no_tokens"
        else:
            result.docs = docs
    return results
