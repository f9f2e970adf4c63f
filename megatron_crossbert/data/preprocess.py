"""JSONL(.gz) -> Megatron indexed datasets (``{prefix}_{key}_document.bin/.idx``).

Guarantees:

* **Nothing lost silently.** Every input line is read, then written or skipped; the report
  (``{prefix}_preprocess_report.json``) has ``documents_read == documents_written +
  documents_skipped``, counts per skip kind and the first ``file:line`` of each kind. ``strict``
  turns the first bad line into :class:`~megatron_crossbert.data.jsonl.BadInputError`.
* **Same bytes for any worker count.** Workers transform chunks (see ``preprocess_worker``); the
  parent writes results in input order. Chunks are bounded in flight, so memory stays flat.
* **Atomic outputs.** Everything is written under temporary names and renamed into place only
  after all outputs are complete (``AtomicIndexedWriter``); on an error or Ctrl-C temporaries are
  removed. Existing outputs are refused unless ``force``.

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
from itertools import islice

import numpy as np
from tqdm import tqdm

from megatron_crossbert.checkpoint_format import atomic_write_text
from megatron_crossbert.data.indexed import AtomicIndexedWriter
from megatron_crossbert.data.jsonl import BadInputError, RawLine, expand_inputs, iter_raw_lines, iter_texts
from megatron_crossbert.data.preprocess_worker import (
    LineResult, WorkerSpec, init_pool_worker, init_worker, process_chunk,
)
from megatron_crossbert.data.tokenizer import load_tokenizer

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
    chunk_lines: int = 256
    progress: bool = True
    emit_mask_pairs: bool = False
    seq_length: int | None = None
    mask_ratio: float = 0.5
    seed: int = 1234
    complementary: bool = True


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
        paths += [document_prefix(opts.output_prefix, key) + ext for ext in (".bin", ".idx")]
        if opts.emit_mask_pairs:
            base = mask_pairs_prefix(opts.output_prefix, key)
            paths += [f"{base}_{part}{ext}" for part in ("samples", "visible", "targets") for ext in (".bin", ".idx")]
            paths.append(f"{base}_meta.json")
    return paths


def _check_options(opts: PreprocessOptions) -> None:
    if opts.workers < 1:
        raise ValueError(f"--workers must be >= 1, got {opts.workers}")
    if opts.emit_mask_pairs and not opts.seq_length:
        raise ValueError("--emit-mask-pairs needs --seq-length")
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
        self.bar = tqdm(unit=" docs", disable=not opts.progress, dynamic_ncols=True, mininterval=0.5)

    def add(self, result: LineResult) -> None:
        self.read += 1
        self.bytes += result.nbytes
        if result.skip is not None:
            where = f"{result.path}:{result.line_no}"
            if self.opts.strict:
                raise BadInputError(f"{where}: {result.skip}" + (f" ({result.detail})" if result.detail else ""))
            self.skips[result.skip] += 1
            self.first_skip.setdefault(result.skip, where)
        else:
            self.written += 1
            for key, (tokens, lengths) in result.docs.items():
                self.tokens[key] += int(tokens.size)
                self.sequences[key] += len(lengths)
        if self.read % max(1, self.opts.log_interval) == 0:
            self.log()

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


def _chunks(lines: Iterator[RawLine], size: int) -> Iterator[list[RawLine]]:
    while chunk := list(islice(lines, size)):
        yield chunk


def _ordered_results(spec: WorkerSpec, chunks: Iterator[list[RawLine]], workers: int,
                     tokenizer) -> Iterator[list[LineResult]]:
    """Results chunk by chunk in input order; at most ``4 * workers`` chunks in flight."""
    if workers == 1:
        init_worker(spec, tokenizer)
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


def _write_json_atomic(path: str, payload: dict) -> None:
    atomic_write_text(path, json.dumps(payload, indent=2, sort_keys=True) + "\n")


def _emit_mask_pairs(opts: PreprocessOptions, writers: dict[str, AtomicIndexedWriter], tokenizer):
    """Static mask pairs from the (finalized, still temporary) document files."""
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    from megatron_crossbert.data.static_masks import write_static_masks

    extra, metas = [], {}
    for key, writer in writers.items():
        docs = IndexedDataset(writer.tmp_prefix)
        made, meta = write_static_masks(
            docs, mask_pairs_prefix(opts.output_prefix, key), seq_length=opts.seq_length,
            mask_ratio=opts.mask_ratio, seed=opts.seed, complementary=opts.complementary,
            vocab_size=tokenizer.vocab_size, cls_id=tokenizer.cls_id, sep_id=tokenizer.sep_id)
        extra += made
        metas[key] = meta
    return extra, metas


def _splitter(opts: PreprocessOptions, paths):
    if not opts.split_sentences:
        return None
    from megatron_crossbert.data.sentences import make_splitter  # nltk import is slow: only when needed

    return make_splitter(iter_texts([str(p) for p in paths], opts.json_keys[0]))


def _consume(opts: PreprocessOptions, spec: WorkerSpec, paths, tokenizer, tally: _Tally,
             writers: dict[str, AtomicIndexedWriter]) -> None:
    """Read, (pool-)process and write every line in input order; finalize the document files."""
    chunks = _chunks(iter_raw_lines(paths), opts.chunk_lines)
    for results in _ordered_results(spec, chunks, opts.workers, tokenizer):
        for result in results:
            tally.add(result)
            for key, (tokens, lengths) in (result.docs or {}).items():
                writers[key].add_document(tokens, lengths)
        tally.bar.update(len(results))
    tally.log()
    tally.bar.close()
    for writer in writers.values():
        writer.finalize()


def _commit(opts: PreprocessOptions, writers: list[AtomicIndexedWriter], metas: dict, report: dict) -> None:
    """Rename everything into place; the report goes last (its presence means a complete run)."""
    for writer in writers:
        writer.commit()
    for key, meta in metas.items():
        _write_json_atomic(f"{mask_pairs_prefix(opts.output_prefix, key)}_meta.json", meta)
    _write_json_atomic(report_path(opts.output_prefix), report)


def preprocess(opts: PreprocessOptions) -> dict:
    """Run the whole conversion; returns the report dict (also written next to the outputs)."""
    _check_options(opts)
    paths = expand_inputs(opts.inputs)
    tokenizer = load_tokenizer(opts.tokenizer)
    splitter = _splitter(opts, paths)
    spec = WorkerSpec(str(opts.tokenizer), tuple(opts.json_keys), splitter, opts.append_eod)
    tally = _Tally(opts)
    writers = {key: AtomicIndexedWriter(document_prefix(opts.output_prefix, key), tokenizer.vocab_size)
               for key in opts.json_keys}
    all_writers = list(writers.values())
    try:
        _consume(opts, spec, paths, tokenizer, tally, writers)
        metas: dict = {}
        if opts.emit_mask_pairs:
            extra, metas = _emit_mask_pairs(opts, writers, tokenizer)
            all_writers += extra
        report = _report(opts, tokenizer, splitter, tally, writers, metas)
        _commit(opts, all_writers, metas, report)
        return report
    except BaseException:
        tally.bar.close()
        for writer in all_writers:
            writer.abort()
        raise


def _report(opts: PreprocessOptions, tokenizer, splitter, tally: _Tally, writers, metas) -> dict:
    return {"inputs": opts.inputs, "output_prefix": opts.output_prefix, "tokenizer": str(opts.tokenizer),
            "vocab_size": tokenizer.vocab_size, "json_keys": opts.json_keys, "workers": opts.workers,
            "split_sentences": opts.split_sentences, "append_eod": opts.append_eod,
            "sentence_splitter": splitter.describe() if splitter else None,
            "dtype": np.dtype(next(iter(writers.values())).dtype).name,
            "outputs": {key: w.prefix for key, w in writers.items()}, "mask_pairs": metas or None,
            **tally.as_dict()}
