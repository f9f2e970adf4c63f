"""``crossbert-preprocess``: tokenize JSONL(.gz) into Megatron indexed datasets.

Writes ``{output_prefix}_{key}_document.bin/.idx`` per JSON key (readable by
``megatron.core.datasets.indexed_dataset.IndexedDataset`` and by the CrossBERT datasets) and a
report ``{output_prefix}_preprocess_report.json``. Bad lines are skipped and counted (or, with
--strict, stop the run with file:line); a run that writes nothing fails. Outputs appear
atomically; existing ones need --force. Megatron-LM's tools/preprocess_data.py flags work
unchanged (--tokenizer-type HuggingFaceTokenizer --tokenizer-model DIR, BertWordPieceLowerCase/
BertWordPieceCase --vocab-file, --workers, --partitions, --log-interval).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from dataclasses import replace

from megatron_crossbert.cli import DefaultsHelpFormatter
from megatron_crossbert.cli.config_flags import ConfigFlag, add_config_flags
from megatron_crossbert.cli.errors import cli_main
from megatron_crossbert.config import MaskingConfig, RunConfig

MASK_FLAGS = (ConfigFlag("--mask-ratio", ("masking.mask_ratio",), "masking ratio r"),
              ConfigFlag("--seed", ("masking.seed",), "packing and mask seed (= the run's masking.seed)"))
"""Static mask pairs: the run's masking section (``--no-complementary`` sets complementary=false)."""


def add_encoding_flags(p: argparse.ArgumentParser) -> None:
    """What decides the documents' ids (shared with crossbert-preprocess-datatrove, whose tasks must encode
    exactly as this tool does): tokenizer, keys, splitting, eod, skips, backend, Megatron-LM's tokenizer flags."""
    from megatron_crossbert.data.jsonl import MAX_DOCUMENT_BYTES
    from megatron_crossbert.data.preprocessing.encoding import BACKENDS

    p.add_argument("--tokenizer", default=None, help="tokenizer directory (crossbert-train-tokenizer or any HF dir)")
    p.add_argument("--json-keys", nargs="+", default=["text"], help="JSON keys to tokenize, one output per key")
    p.add_argument("--workers", type=int, default=1,
                   help="encoder threads; processes with --split-sentences (output identical for any value)")
    p.add_argument("--backend", default="auto", choices=BACKENDS,
                   help="encoding backend; auto = gigatoken when it loads the tokenizer and matches tokenizers' "
                        "ids on a sample, else tokenizers (the choice is logged)")
    p.add_argument("--split-sentences", action="store_true",
                   help="one sequence per sentence (nltk Punkt; punkt_tab if installed, else trained on the input)")
    p.add_argument("--append-eod", action="store_true", help="append the end-of-document token to each document")
    p.add_argument("--strict", action="store_true", help="fail on the first bad line (file:line) instead of skipping")
    p.add_argument("--max-document-bytes", type=int, default=MAX_DOCUMENT_BYTES,
                   help="skip (and count as too_long) any line longer than this, without ever holding it: "
                        "the per-document memory bound")
    m = p.add_argument_group("Megatron-LM tools/preprocess_data.py compatibility")
    m.add_argument("--tokenizer-type", default=None,
                   help="HuggingFaceTokenizer (with --tokenizer-model), BertWordPieceLowerCase or BertWordPieceCase "
                        "(with --vocab-file); other types are refused")
    m.add_argument("--tokenizer-model", default=None, help="HF tokenizer directory (same as --tokenizer)")
    m.add_argument("--vocab-file", default=None, help="BERT vocab.txt for the BertWordPiece types")
    m.add_argument("--merge-file", default=None, help=argparse.SUPPRESS)
    m.add_argument("--partitions", type=int, default=1,
                   help="accepted for compatibility; input is streamed, so partitions change nothing")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="crossbert-preprocess", description=__doc__,
                                formatter_class=DefaultsHelpFormatter)
    p.add_argument("--input", nargs="+", required=True, help="JSONL/JSONL.gz files or globs (quoted)")
    p.add_argument("--output-prefix", required=True, help="output path prefix")
    add_encoding_flags(p)
    p.add_argument("--force", action="store_true", help="overwrite existing outputs")
    p.add_argument("--log-interval", type=int, default=10000, help="documents between progress updates")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (log lines instead)")
    g = p.add_argument_group("static mask pairs")
    g.add_argument("--emit-mask-pairs", action="store_true",
                   help="also write packed samples and both views' visible/target positions "
                        "({output_prefix}_{key}_maskpairs_*; use as data.static_masks)")
    g.add_argument("--seq-length", type=int, default=None, help="packed sample length L (= the run's data.seq_length)")
    add_config_flags(g, MASK_FLAGS, defaults=RunConfig())
    g.add_argument("--no-complementary", action="store_true", help="one view per sample instead of two")
    return p


def encoding_options(args, inputs: list[str], output_prefix: str):
    """``PreprocessOptions`` from :func:`add_encoding_flags`' flags (user errors: ValueError in one line)."""
    from megatron_crossbert.data.preprocessing.preprocess import PreprocessOptions

    tokenizer, kind = _tokenizer_from_args(args)
    return PreprocessOptions(
        inputs=inputs, output_prefix=output_prefix, tokenizer=tokenizer, tokenizer_kind=kind, backend=args.backend,
        json_keys=args.json_keys, workers=args.workers, split_sentences=args.split_sentences,
        append_eod=args.append_eod, strict=args.strict, max_document_bytes=args.max_document_bytes)


@cli_main
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # SIGTERM (kill, job schedulers) takes the same clean-up path as Ctrl-C: temporaries removed,
    # pool workers terminated instead of orphaned.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    from megatron_crossbert.data.preprocessing.preprocess import preprocess, report_path

    opts = replace(  # user errors: one line and status 2 via cli_main
        encoding_options(args, args.input, args.output_prefix), force=args.force, log_interval=args.log_interval,
        progress=not args.no_progress, emit_mask_pairs=args.emit_mask_pairs, seq_length=args.seq_length,
        masking=MaskingConfig(mask_ratio=args.mask_ratio, seed=args.seed, complementary=not args.no_complementary))
    report = preprocess(opts)
    print(_summary(report, report_path(args.output_prefix)))
    return 0


def _tokenizer_from_args(args) -> tuple[str, str]:
    """Our --tokenizer or Megatron-LM's tokenizer flags -> (path, kind); ValueError in one line."""
    from megatron_crossbert.data.tokenizers.sources import resolve_megatron_tokenizer

    path, kind = resolve_megatron_tokenizer(args.tokenizer_type, args.tokenizer_model, args.vocab_file, args.tokenizer)
    if args.merge_file:
        raise ValueError("--merge-file (GPT-2 BPE vocab + merges) is not supported; convert the tokenizer to a "
                         "Hugging Face directory with a tokenizer.json and pass --tokenizer DIR")
    if args.partitions != 1:
        logging.getLogger(__name__).info("--partitions %d accepted and ignored: the input is streamed in chunks",
                                         args.partitions)
    return path, kind


def _summary(report: dict, path: str) -> str:
    skips = ", ".join(f"{k}={v} (first at {report['first_skip_location'][k]})"
                      for k, v in report["skipped_by_kind"].items()) or "none"
    return (f"documents: read {report['documents_read']}, written {report['documents_written']}, "
            f"skipped {report['documents_skipped']} [{skips}]\n"
            f"tokens: {report['tokens']}  ({report['docs_per_s']} docs/s, {report['mb_per_s']} MB/s)\n"
            f"report: {path}")


if __name__ == "__main__":
    sys.exit(main())
