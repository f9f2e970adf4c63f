"""``crossbert-convert-hf``: convert between native checkpoints and Hugging Face model directories.

  crossbert-convert-hf export CHECKPOINT OUT_DIR [--format NAME] [--tokenizer DIR] [--force]
  crossbert-convert-hf import HF_DIR OUT_ROOT [--force]

``export`` reads a dist checkpoint (root or iter_* dir, saved at any TP/PP) in one process and writes
config.json + model.safetensors + tokenizer + sentence-transformers files + README.md. The format
defaults to the fastest exact target: ``xlmr-xl`` (XLMRobertaXLModel, SDPA/flash) for the classic
encoder; ``--format megatron-bert`` writes MegatronBertModel (eager attention only). CrossBERT exports
the encoder only; the BERT baseline also exports its MLM head (fill-mask). ``import`` detects the
format from config.json and writes a model-only checkpoint for ``checkpoint.init_from`` (a CrossBERT
decoder is freshly initialised).
Exit status 2 with a one-line message for conversion errors.
"""

from __future__ import annotations

import argparse
import logging
import sys

from megatron_crossbert.cli import add_verify_flag
from megatron_crossbert.cli.errors import add_debug_flag, cli_main


def _format_names() -> list[str]:
    from megatron_crossbert.convert.formats import format_names

    return format_names()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="crossbert-convert-hf", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="{export,import}")
    export = sub.add_parser("export", help="native checkpoint -> HF directory")
    export.add_argument("checkpoint", help="checkpoint root (with 'latest') or an iter_* directory")
    export.add_argument("out_dir", help="HF directory to write")
    export.add_argument("--tokenizer", default=None,
                        help="tokenizer directory to ship (default: data.tokenizer of the run config)")
    export.add_argument("--force", action="store_true",
                        help="replace OUT_DIR if it exists (the old one moves to OUT_DIR.replaced-<time>-<id>)")
    export.add_argument("--format", dest="format_name", default=None, choices=_format_names(),
                        help="HF target (default: the first exact one, in this order)")
    add_verify_flag(export)
    imp = sub.add_parser("import", help="HF directory -> native model-only checkpoint")
    imp.add_argument("hf_dir", help="HF directory of a supported format (config.json + model.safetensors)")
    imp.add_argument("out_root", help="checkpoint root to write (use as checkpoint.init_from)")
    imp.add_argument("--force", action="store_true",
                     help="replace OUT_ROOT if it exists (the old one moves to OUT_ROOT.replaced-<time>-<id>)")
    add_debug_flag(parser)
    return parser


def run(args: argparse.Namespace) -> str:
    """Dispatch a parsed command; returns the line to print on success."""
    from megatron_crossbert.convert import export_to_hf, import_from_hf

    if args.command == "export":
        out = export_to_hf(args.checkpoint, args.out_dir, tokenizer_dir=args.tokenizer, force=args.force,
                           format_name=args.format_name, verify=args.verify)
        return f"exported {args.checkpoint} -> {out}"
    ckpt_dir = import_from_hf(args.hf_dir, args.out_root, force=args.force)
    return f"imported {args.hf_dir} -> {ckpt_dir}"


@cli_main
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    print(run(args))  # ConversionError: one line and status 2 via cli_main
    return 0


if __name__ == "__main__":
    sys.exit(main())
