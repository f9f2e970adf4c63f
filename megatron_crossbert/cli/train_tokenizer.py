"""``crossbert-train-tokenizer``: train a vocabulary from JSONL(.gz) and save a tokenizer directory.

The directory loads with ``megatron_crossbert.data.tokenizers.tokenizer.load_tokenizer`` (every project tool)
and with ``transformers.AutoTokenizer.from_pretrained`` (no remote code), giving the same ids.
"""

from __future__ import annotations

import argparse
import sys

from megatron_crossbert.cli import DefaultsHelpFormatter
from megatron_crossbert.cli.errors import add_debug_flag, cli_main
from megatron_crossbert.outputs import require_output_dir


def build_parser() -> argparse.ArgumentParser:
    from megatron_crossbert.data.tokenizers.training import MODEL_TYPES

    parser = argparse.ArgumentParser(
        prog="crossbert-train-tokenizer", description=__doc__,
        formatter_class=DefaultsHelpFormatter)
    parser.add_argument("--input", nargs="+", required=True, help="JSONL or JSONL.gz files or globs")
    parser.add_argument("--output-dir", required=True, help="tokenizer directory to write")
    parser.add_argument("--json-keys", nargs="+", default=["text"],
                        help="JSON key holding the text (the first key is used for training)")
    parser.add_argument("--model", choices=MODEL_TYPES, default="unigram",
                        help="sentencepiece unigram/BPE (bit-reproducible), or HF tokenizers WordPiece (its "
                             "trainer breaks frequency ties arbitrarily: reruns can differ in a few tokens)")
    parser.add_argument("--vocab-size", type=int, default=32768,
                        help="target vocabulary size, special tokens included")
    parser.add_argument("--max-docs", type=int, default=None, help="train on at most this many documents")
    parser.add_argument("--lowercase", action="store_true", help="lowercase + strip accents (wordpiece only)")
    parser.add_argument("--force", action="store_true", help="overwrite an existing tokenizer directory")
    add_debug_flag(parser)
    return parser


@cli_main
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    out = require_output_dir(args.output_dir, "--output-dir")  # before training, not after it
    if (out / "tokenizer.json").exists() and not args.force:
        raise FileExistsError(f"{out}: already holds a tokenizer; pass --force to overwrite")
    from megatron_crossbert.data.tokenizers.training import train_tokenizer

    tokenizer = train_tokenizer(args.input, out, model_type=args.model, vocab_size=args.vocab_size,
                                json_key=args.json_keys[0], max_docs=args.max_docs, lowercase=args.lowercase)
    print(f"saved {args.model} tokenizer with {tokenizer.vocab_size} tokens to {out} "
          f"(special ids: {tokenizer.special_ids})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
