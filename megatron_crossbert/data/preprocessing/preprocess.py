"""JSONL(.gz) -> Megatron indexed datasets (``{prefix}_{key}_document.bin/.idx``).

Guarantees:

* **Nothing lost silently.** Every input line is read, then written or skipped; the report
  (``{prefix}_preprocess_report.json``) has ``documents_read == documents_written +
  documents_skipped``, counts per skip kind and the first ``file:line`` of each kind. ``strict``
  turns the first bad line into :class:`~megatron_crossbert.data.jsonl.BadInputError`.
* **Same bytes for any worker count and backend.** ``--workers`` sizes the Rust encoder's
  threads (or, with ``--split-sentences``, a process pool); the parent writes chunk results in
  input order. The backend (``encoding.choose_encoder``) gives HF ``tokenizers``' ids by contract.
* **Bounded memory, light process.** Lines are read, encoded and written chunk by chunk (at most
  ``4 * workers`` chunks in flight); the writer keeps only per-sequence lengths. No line longer than
  ``max_document_bytes`` is ever held (``too_long``), and long documents are encoded in pieces with
  the same ids (``pieces``). Nothing here
  imports torch (the ``.bin/.idx`` writer is numpy, ``indexed.writer``), except ``--emit-mask-pairs``.
* **Atomic outputs.** Everything is written under temporary names and renamed into place only
  after all outputs are complete (``AtomicIndexedWriter``); on an error or Ctrl-C temporaries are
  removed, and the next run removes those a killed run left (``fsutil``). Existing outputs are
  refused unless ``force``.

One input line is one document for every key; sentence-split documents (``split_sentences``) keep
one sequence per sentence inside the document, as Megatron-LM does, but the file name stays
``_document`` (the dataset packs whole documents either way).
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import time
from collections import Counter, deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path

import numpy as np

from megatron_crossbert.config import MaskingConfig
from megatron_crossbert.content_identity import dataset_fingerprint
from megatron_crossbert.data.indexed.writer import AtomicIndexedWriter, bin_path, idx_path
from megatron_crossbert.data.jsonl import (
    MAX_DOCUMENT_BYTES, BadInputError, LineChunk, expand_inputs, iter_line_chunks, iter_texts, parse_line,
)
from megatron_crossbert.data.preprocessing.encoding import choose_encoder
from megatron_crossbert.data.preprocessing.pieces import PiecewiseEncoder
from megatron_crossbert.data.preprocessing.worker import (
    ChunkResult, WorkerSpec, init_pool_worker, init_worker, process_chunk,
)
from megatron_crossbert.data.tokenizers.fingerprint import record_path, write_dataset_record
from megatron_crossbert.data.tokenizers.sources import open_tokenizer
from megatron_crossbert.fsutil import atomic_write_text, remove_stale_temporaries
from megatron_crossbert.outputs import require_output_dir, writing
from megatron_crossbert.progress import progress_bar

logger = logging.getLogger(__name__)


@dataclass
class PreprocessOptions:
    """What ``crossbert-preprocess`` does; see ``megatron_crossbert/cli/preprocess.py`` for help texts."""

    inputs: list[str]
    output_prefix: str
    tokenizer: str
    json_keys: list[str] = field(default_factory=lambda: ["text"])
    workers: int = 1
    split_sentences: bool = False
    append_eod: bool = False
    strict: bool = False
    force: bool = False
    log_interval: int = 10000
    chunk_lines: int = 4096
    """Lines per chunk: one encode batch (large enough for the Rust threads to pay off)."""
    progress: bool = True
    emit_mask_pairs: bool = False
    seq_length: int | None = None
    """Packed sample length L of the static mask pairs (the run's ``data.seq_length``)."""
    masking: MaskingConfig = field(default_factory=MaskingConfig)
    """The static mask pairs' masking (ratio, complementary views, packing and mask seed): the run's section."""
    tokenizer_kind: str = "auto"
    """How to read ``tokenizer``: auto (directory/tokenizer.json), bert-lower/bert-cased (a BERT vocab.txt)."""
    backend: str = "auto"
    """Encoding backend: auto (gigatoken where verified identical, else tokenizers), gigatoken, tokenizers."""
    max_document_bytes: int = MAX_DOCUMENT_BYTES
    """Longer lines are skipped (``too_long``) without ever being held: the per-document memory bound."""
    splitter_inputs: list[str] | None = None
    """Files whose first texts train Punkt where punkt_tab is absent (default: ``inputs``). A task of a
    sharded run passes the whole corpus, so every task splits sentences as one run over it would."""
    allow_empty: bool = False
    """A run that writes no document writes its report (what was skipped, and where) and no dataset, instead of
    failing: a task of a sharded run whose share is empty files, blank lines or bad JSON is a finished task
    (the other tasks' documents are the dataset), as those lines are skips in one run over the whole input."""


def document_prefix(output_prefix: str, key: str) -> str:
    return f"{output_prefix}_{key}_document"


def mask_pairs_prefix(output_prefix: str, key: str) -> str:
    return f"{output_prefix}_{key}_maskpairs"


def report_path(output_prefix: str) -> str:
    return f"{output_prefix}_preprocess_report.json"


def planned_outputs(opts: PreprocessOptions) -> list[str]:
    """Every file a run will create (used for the overwrite check)."""
    paths = [report_path(opts.output_prefix)]
    for key in opts.json_keys:
        prefix = document_prefix(opts.output_prefix, key)
        paths += [prefix + ".bin", prefix + ".idx", str(record_path(prefix))]
        if opts.emit_mask_pairs:
            base = mask_pairs_prefix(opts.output_prefix, key)
            paths += [f"{base}_{part}{ext}" for part in ("samples", "visible", "targets") for ext in (".bin", ".idx")]
            paths.append(f"{base}_meta.json")
    return paths


def _check_options(opts: PreprocessOptions) -> None:
    if opts.workers < 1:
        raise ValueError(f"--workers must be >= 1, got {opts.workers}")
    if opts.max_document_bytes < 1:
        raise ValueError(f"--max-document-bytes must be >= 1, got {opts.max_document_bytes}")
    if opts.emit_mask_pairs and not opts.seq_length:
        raise ValueError("--emit-mask-pairs needs --seq-length")
    require_output_dir(Path(opts.output_prefix).parent, "--output-prefix's directory")
    existing = [p for p in planned_outputs(opts) if os.path.exists(p)]
    if existing and not opts.force:
        raise FileExistsError(f"refusing to overwrite existing outputs (pass --force): {', '.join(existing[:4])}"
                              + (" ..." if len(existing) > 4 else ""))


class _Tally:
    """Counts for the report, plus progress (tqdm bar and periodic log lines)."""

    def __init__(self, opts: PreprocessOptions) -> None:
        self.read = self.written = self.bytes = 0
        self.skips: Counter[str] = Counter()
        self.first_skip: dict[str, str] = {}
        self.tokens: Counter[str] = Counter()
        self.sequences: Counter[str] = Counter()
        self.start = time.perf_counter()
        self.opts = opts
        self.bar = progress_bar(unit=" docs", disable=not opts.progress, dynamic_ncols=True, mininterval=0.5)

    def add(self, result: ChunkResult) -> None:
        for line_no, kind, detail in result.skips:
            where = f"{result.path}:{line_no}"
            if self.opts.strict:
                raise BadInputError(f"{where}: {kind}" + (f" ({detail})" if detail else ""))
            self.skips[kind] += 1
            self.first_skip.setdefault(kind, where)
        self.read += result.lines_read
        self.written += result.written
        self.bytes += result.nbytes
        for key, kt in result.docs.items():
            self.tokens[key] += int(kt.tokens.size)
            self.sequences[key] += int(kt.seq_lengths.size)
        every = max(1, self.opts.log_interval)
        if self.read // every != (self.read - result.lines_read) // every:  # crossed a --log-interval mark
            self.log()

    def check_written(self) -> None:
        """A run that writes nothing is an error that says what was skipped and why."""
        if self.written:
            return
        skips = ", ".join(f"{kind}={n} (first at {self.first_skip[kind]})" for kind, n in sorted(self.skips.items()))
        raise BadInputError(f"{', '.join(self.opts.inputs)}: no documents written; {self.read} read, all skipped"
                            + (f": {skips}" if skips else " (the inputs hold no lines)"))

    def rates(self) -> tuple[float, float, float]:
        elapsed = max(time.perf_counter() - self.start, 1e-9)
        return elapsed, self.read / elapsed, self.bytes / elapsed / 1e6

    def log(self) -> None:
        _, docs_s, mb_s = self.rates()
        self.bar.set_postfix_str(f"{docs_s:,.0f} docs/s, {mb_s:.2f} MB/s", refresh=False)
        if not self.opts.progress:
            logger.info("%d documents, %.0f docs/s, %.2f MB/s", self.read, docs_s, mb_s)

    def as_dict(self) -> dict:
        elapsed, docs_s, mb_s = self.rates()
        return {"documents_read": self.read, "documents_written": self.written,
                "documents_skipped": sum(self.skips.values()), "skipped_by_kind": dict(sorted(self.skips.items())),
                "first_skip_location": dict(sorted(self.first_skip.items())), "tokens": dict(self.tokens),
                "sequences": dict(self.sequences), "bytes_read": self.bytes, "seconds": round(elapsed, 3),
                "docs_per_s": round(docs_s, 1), "mb_per_s": round(mb_s, 3)}


def _ordered_results(spec: WorkerSpec, chunks: Iterator[LineChunk], workers: int,
                     encoder) -> Iterator[ChunkResult]:
    """Results chunk by chunk in input order. Inline (the encoder threads itself) unless sentence
    splitting (Python) needs processes; then at most ``4 * workers`` chunks are in flight."""
    if workers == 1 or spec.splitter is None:
        init_worker(spec, encoder)
        yield from (process_chunk(chunk) for chunk in chunks)
        return
    with multiprocessing.get_context("spawn").Pool(workers, initializer=init_pool_worker, initargs=(spec,)) as pool:
        pending: deque = deque()
        for chunk in chunks:
            pending.append(pool.apply_async(process_chunk, (chunk,)))
            if len(pending) >= 4 * workers:
                yield pending.popleft().get()
        while pending:
            yield pending.popleft().get()


def _sample_texts(chunk: LineChunk | None, key: str, limit: int = 512) -> list[str]:
    """Good texts of the first chunk: the real-input sample the backend is verified on."""
    parsed = (parse_line(data, [key])[0] for data in (chunk.lines[:limit] if chunk else []))
    return [texts[key] for texts in parsed if texts is not None]


def _write_json_atomic(path: str, payload: dict) -> None:
    atomic_write_text(path, json.dumps(payload, indent=2, sort_keys=True) + "\n")


def _emit_mask_pairs(opts: PreprocessOptions, writers: dict[str, AtomicIndexedWriter], tokenizer):
    """Static mask pairs from the (finalized, still temporary) document files."""
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    from megatron_crossbert.data.datasets.static_masks import write_static_masks

    extra, metas = [], {}
    for key, writer in writers.items():
        docs = IndexedDataset(writer.tmp_prefix)
        made, meta = write_static_masks(
            docs, mask_pairs_prefix(opts.output_prefix, key), seq_length=opts.seq_length, masking=opts.masking,
            vocab_size=tokenizer.vocab_size, cls_id=tokenizer.cls_id, sep_id=tokenizer.sep_id)
        extra += made
        metas[key] = meta
    return extra, metas


def _splitter(opts: PreprocessOptions, paths):
    if not opts.split_sentences:
        return None
    from megatron_crossbert.data.preprocessing.sentences import make_splitter  # nltk import is slow: only when needed

    sample = opts.splitter_inputs if opts.splitter_inputs is not None else [str(p) for p in paths]
    return make_splitter(iter_texts(sample, opts.json_keys[0]))


def _consume(opts: PreprocessOptions, spec: WorkerSpec, chunks: Iterator[LineChunk], encoder, tally: _Tally,
             writers: dict[str, AtomicIndexedWriter]) -> None:
    """Process and write every chunk in input order; finalize the document files."""
    for result in _ordered_results(spec, chunks, opts.workers, encoder):
        tally.add(result)
        for key, kt in result.docs.items():
            writers[key].add_documents(kt.tokens, kt.seq_lengths, kt.seqs_per_doc)
        tally.bar.update(result.lines_read)
    tally.log()
    tally.bar.close()
    if opts.allow_empty and not tally.written:
        return
    tally.check_written()
    for writer in writers.values():
        writer.finalize()


def _commit(opts: PreprocessOptions, writers: list[AtomicIndexedWriter], metas: dict, report: dict,
            tokenizer) -> None:
    """Rename everything into place, each document dataset's tokenizer record just before it;
    the report goes last (its presence means a complete run)."""
    documents = {document_prefix(opts.output_prefix, key) for key in opts.json_keys}
    for writer in writers:
        if writer.prefix in documents:  # the content is the pair about to be renamed into place
            content = dataset_fingerprint([bin_path(writer.tmp_prefix), idx_path(writer.tmp_prefix)])
            write_dataset_record(writer.prefix, tokenizer, opts.tokenizer, content)
        writer.commit()
    for key, meta in metas.items():
        _write_json_atomic(f"{mask_pairs_prefix(opts.output_prefix, key)}_meta.json", meta)
    _write_json_atomic(report_path(opts.output_prefix), report)


def _start(opts: PreprocessOptions, chunks: Iterator[LineChunk], tokenizer) -> tuple[Iterator[LineChunk], object]:
    """The chunk stream and the encoder, verified on the stream's first chunk (put back in front)."""
    first = next(chunks, None)
    encoder = choose_encoder(tokenizer, opts.backend, opts.workers, _sample_texts(first, opts.json_keys[0]))
    return (chain([first], chunks) if first is not None else chunks), encoder


def preprocess(opts: PreprocessOptions, lines: Iterator[LineChunk] | None = None) -> dict:
    """Run the whole conversion; returns the report dict (also written next to the outputs).

    ``lines``: the input as chunks of JSON lines from elsewhere (a datatrove reader), instead of
    ``opts.inputs``. Temporaries of these outputs that a killed run (SIGKILL, OOM) left on this host
    are removed first."""
    _check_options(opts)
    remove_stale_temporaries(planned_outputs(opts))
    paths = expand_inputs(opts.inputs) if lines is None else []
    tokenizer = open_tokenizer(opts.tokenizer, opts.tokenizer_kind)
    splitter = _splitter(opts, paths)
    if lines is None:
        lines = iter_line_chunks(paths, opts.chunk_lines, opts.max_document_bytes)
    chunks, encoder = _start(opts, lines, tokenizer)
    spec = WorkerSpec(str(opts.tokenizer), opts.tokenizer_kind, tuple(opts.json_keys), splitter, opts.append_eod,
                      tokenizer.eod_id, encoder.name, isinstance(encoder, PiecewiseEncoder))
    tally = _Tally(opts)
    with writing(document_prefix(opts.output_prefix, opts.json_keys[0]) + ".bin", "the preprocessed dataset"):
        writers = {key: AtomicIndexedWriter(document_prefix(opts.output_prefix, key), tokenizer.vocab_size)
                   for key in opts.json_keys}
        all_writers = list(writers.values())
        try:
            _consume(opts, spec, chunks, encoder, tally, writers)
            if not tally.written:  # allow_empty: the report alone says what was read and skipped
                return _report_only(opts, tokenizer, splitter, tally, all_writers, encoder)
            metas: dict = {}
            if opts.emit_mask_pairs:
                extra, metas = _emit_mask_pairs(opts, writers, tokenizer)
                all_writers += extra
            report = _report(opts, tokenizer, splitter, tally, writers, metas, encoder)
            _commit(opts, all_writers, metas, report, tokenizer)
            return report
        except BaseException:
            tally.bar.close()
            for writer in all_writers:
                writer.abort()
            raise


def _report_only(opts: PreprocessOptions, tokenizer, splitter, tally: _Tally, writers: list, encoder) -> dict:
    """No document written (``allow_empty``): the temporaries go, the report is written with no outputs."""
    for writer in writers:
        writer.abort()
    log = logger.warning if tally.read else logger.info
    log("%s: no documents written; %d read, all skipped %s", ", ".join(opts.inputs) or "no input", tally.read,
        dict(sorted(tally.skips.items())))
    report = _report(opts, tokenizer, splitter, tally, {}, {}, encoder)
    _write_json_atomic(report_path(opts.output_prefix), report)
    return report


def _report(opts: PreprocessOptions, tokenizer, splitter, tally: _Tally, writers, metas, encoder) -> dict:
    return {"inputs": opts.inputs, "output_prefix": opts.output_prefix, "tokenizer": str(opts.tokenizer),
            "tokenizer_kind": opts.tokenizer_kind,
            "vocab_size": tokenizer.vocab_size, "json_keys": opts.json_keys, "workers": opts.workers,
            "backend": encoder.name,
            "split_sentences": opts.split_sentences, "append_eod": opts.append_eod,
            "max_document_bytes": opts.max_document_bytes, "pieces": isinstance(encoder, PiecewiseEncoder),
            "sentence_splitter": splitter.describe() if splitter else None,
            "dtype": np.dtype(next(iter(writers.values())).dtype).name if writers else None,
            "outputs": {key: w.prefix for key, w in writers.items()}, "mask_pairs": metas or None,
            **tally.as_dict()}
