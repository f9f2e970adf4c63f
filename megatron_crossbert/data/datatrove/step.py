"""``crossbert-preprocess`` as a datatrove pipeline step, so it runs on datatrove's executors.

:class:`CrossbertTokenize` is not a second tokenizer: each task calls
:func:`megatron_crossbert.data.preprocessing.preprocess.preprocess` (the single-node tool's code) on its share of
the input, so the ids, the sentence splitting, the ``--append-eod`` rule, the skip accounting and the
atomic ``.bin/.idx`` writing are the single-node tool's by construction. Task ``r`` writes
``<output_dir>/<r:05d>_<key>_document.bin/.idx``, its tokenizer record and its report
(``shards``). Two ways in:

* **No reader in front** (the default): the step reads the task's contiguous run of the input files
  itself (``shards.task_files``), with the single-node reader, so N tasks merged are byte-identical to
  one run over the same files, and the report counts every bad line with its ``file:line``.
* **A datatrove reader in front** (``JsonlReader``/``ParquetReader`` over any fsspec path): the step
  tokenizes the documents it is given, in the reader's order (datatrove gives task ``r`` the files
  ``r, r+N, ...``). The reader drops documents without text before the step sees them (datatrove
  counts them in its stats, not in our report); report locations are ``<datatrove reader>:<n>``, the
  n-th document of the task.

Every task that finishes writes its report, also one whose share was no file at all or only empty files,
blank lines and bad JSON (then the report counts the skips and there is no ``.bin/.idx``): a merge knows a
run is whole when tasks 0..N-1 have reports (``shards.checked_prefixes``). A rerun skips every task whose
report exists (the report is renamed into place last); datatrove's executors also skip the tasks they
recorded as complete; the run's record (``shard_run``) makes sure a rerun is the same run. A task killed
mid-write leaves only temporaries, which no merge or blend reads and the task's rerun on that host removes.

datatrove's own ``MegatronDocumentTokenizer`` is wrong for BERT-style data (its end-of-document token
defaults to GPT-2's ``<|endoftext|>``, a missing token id breaks its template or drops the token, and
its ``$A <EOS>`` template replaces the tokenizer's ``[CLS] $A [SEP]``); :func:`check_pipeline` refuses
it. Here the eod id is the tokenizer's (``[EOD]``, else ``[SEP]``: never dropped), documents are stored
without wrappers, and the dataset places ``[CLS]``/``[SEP]`` when it packs samples.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Iterator
from dataclasses import replace
from itertools import islice

from datatrove.pipeline.base import PipelineStep

from megatron_crossbert.data.datatrove.shards import task_files, task_prefix
from megatron_crossbert.data.jsonl import LineChunk, expand_inputs
from megatron_crossbert.data.preprocessing.preprocess import PreprocessOptions, planned_outputs, preprocess, report_path

logger = logging.getLogger(__name__)

READER_PATH = "<datatrove reader>"
"""The file name that report locations of reader-fed tasks carry."""

_DATATROVE_TOKENIZERS = ("MegatronDocumentTokenizer", "DocumentTokenizer")


def check_pipeline(pipeline: Iterable) -> None:
    """Refuse datatrove's own tokenizer steps in a CrossBERT pipeline, in one line."""
    for step in pipeline:
        if type(step).__name__ in _DATATROVE_TOKENIZERS:
            raise ValueError(
                f"pipeline: datatrove's {type(step).__name__} writes GPT-2's <|endoftext|> as end-of-document "
                "(a WordPiece vocabulary has none) and replaces the [CLS] $A [SEP] template; use "
                "megatron_crossbert.data.datatrove.step.CrossbertTokenize")


def _eod_note(options: PreprocessOptions) -> str:
    """Which token ends documents, said once at set-up (a vocabulary without [EOD] uses [SEP])."""
    from megatron_crossbert.data.tokenizers.sources import open_tokenizer

    tokenizer = open_tokenizer(options.tokenizer, options.tokenizer_kind)
    text = tokenizer.backend.id_to_token(tokenizer.eod_id)
    return f"end-of-document token {text!r} (id {tokenizer.eod_id})" + ("" if options.append_eod else ", not appended")


class CrossbertTokenize(PipelineStep):
    """One datatrove task = one ``crossbert-preprocess`` run over the task's share of the input."""

    name = "CrossBERT tokenize"
    type = "🔢 - TOKENIZER"

    def __init__(self, output_dir: str, options: PreprocessOptions, input_sizes: list[int] | None = None) -> None:
        """``options``: the single-node tool's options for the whole corpus (``inputs`` all of it;
        ``output_prefix`` and ``force`` are set per task). ``input_sizes``: the inputs' sizes when the run was
        launched (its record, ``shard_run``): every task cuts its share from them, and refuses a file whose
        size has changed since, so no two tasks see different cuts (default: the sizes when a task starts)."""
        super().__init__()
        if options.emit_mask_pairs:
            raise ValueError("--emit-mask-pairs: static mask pairs pack across documents; make them from the "
                             "merged dataset with crossbert-preprocess, not per task")
        self.output_dir = str(output_dir)
        self.options = replace(options, progress=False, force=False, allow_empty=True)
        self.input_sizes = None if input_sizes is None else [int(size) for size in input_sizes]
        logger.info("CrossBERT tokenize: %s", _eod_note(self.options))

    def task_options(self, rank: int, inputs: list[str]) -> PreprocessOptions | None:
        """This task's options, or None when an earlier attempt finished it (its report exists).
        Outputs without a report are an unfinished attempt of this same task, replaced."""
        prefix = task_prefix(self.output_dir, rank)
        if os.path.exists(report_path(prefix)):
            logger.info("task %d: %s exists, the task is complete; skipped", rank, report_path(prefix))
            return None
        unsealed = [p for p in planned_outputs(replace(self.options, output_prefix=prefix)) if os.path.exists(p)]
        if unsealed:
            logger.warning("task %d: replacing the unreported outputs of an earlier attempt: %s", rank,
                           ", ".join(unsealed))
        return replace(self.options, inputs=inputs, output_prefix=prefix, force=bool(unsealed))

    def run(self, data=None, rank: int = 0, world_size: int = 1):
        """A generator (datatrove drains each step); yields nothing: the outputs are the files."""
        if data is None:
            self._run_files(rank, world_size)
        else:
            self._run_documents(data, rank)
        return
        yield  # noqa: B901 (makes run a generator)

    def _run_documents(self, data, rank: int) -> None:
        """A reader's documents; a task the reader gave none (more tasks than files) reports nothing read."""
        opts = self.task_options(rank, [READER_PATH])
        if opts is not None:
            self._record(preprocess(opts, document_chunks(data, opts.json_keys, opts.chunk_lines)))

    def _run_files(self, rank: int, world_size: int) -> None:
        every = expand_inputs(self.options.inputs)
        mine = task_files(every, rank, world_size, self.input_sizes)
        opts = self.task_options(rank, mine)
        if opts is None:
            return
        opts = replace(opts, splitter_inputs=[str(p) for p in every])
        if mine:
            self._record(preprocess(opts))
        else:  # fewer files than tasks: the task is finished when its (empty) report says so
            logger.info("task %d of %d: no input files (fewer files than tasks); nothing to write", rank, world_size)
            self._record(preprocess(opts, iter(())))

    def _record(self, report: dict) -> None:
        """datatrove's per-task stats: documents and tokens as the report counts them."""
        self.stat_update("documents_read", value=report["documents_read"])
        self.stat_update("documents_written", value=report["documents_written"])
        self.stat_update("documents_skipped", value=report["documents_skipped"])
        self.stat_update("tokens", value=sum(report["tokens"].values()))


def _line(document, keys: list[str]) -> bytes:
    """A reader's document as the JSON line the single-node reader would parse: the first key is the
    reader's text, the others come from its metadata (absent ones become ``missing_key``)."""
    record = {keys[0]: document.text}
    record.update({key: document.metadata[key] for key in keys[1:] if key in document.metadata})
    return json.dumps(record, ensure_ascii=False).encode("utf-8")


def document_chunks(documents: Iterable, keys: list[str], size: int) -> Iterator[LineChunk]:
    """Documents from a datatrove reader as chunks of JSON lines, numbered in the task's stream."""
    documents, first = iter(documents), 1
    while batch := list(islice(documents, size)):
        yield LineChunk(READER_PATH, first, [_line(doc, keys) for doc in batch])
        first += len(batch)
