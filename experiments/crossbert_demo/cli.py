"""crossbert-demo: corpus -> tokenizer -> preprocess -> pretrain -> HF export -> frozen probe, on the CPU."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from megatron_crossbert.cli import quiet_library_warnings
from megatron_crossbert.cli.config_flags import ConfigFlag, add_config_flags, flag_values
from megatron_crossbert.cli.errors import add_debug_flag, cli_main
from megatron_crossbert.config import replace_sections

from .pipeline import DemoOptions, DemoStopped, format_summary, run_demo

RUN_FLAGS: tuple[ConfigFlag, ...] = (
    ConfigFlag("--arch", ("model.arch",), "architecture to pretrain"),
    ConfigFlag("--encoder", ("model.encoder",), "encoder family ('mlm' needs 'modern', 'bert' 'classic')"),
    ConfigFlag("--vocab-size", ("model.vocab_size",), "tokenizer vocabulary"),
    ConfigFlag("--seq-length", ("data.seq_length",)),
    ConfigFlag("--hidden-size", ("model.hidden_size",)),
    ConfigFlag("--num-layers", ("model.num_layers",)),
    ConfigFlag("--train-iters", ("training.train_iters",)),
    ConfigFlag("--micro-batch-size", ("training.micro_batch_size", "training.global_batch_size"),
               "sequences per step"),
    ConfigFlag("--seed", ("training.seed", "masking.seed")),
)
"""The run's sizes: shorthands for fields of DemoOptions' config sections."""


def build_parser() -> argparse.ArgumentParser:
    defaults = DemoOptions()
    parser = argparse.ArgumentParser(
        prog="crossbert-demo", description=__doc__,
        epilog="The default corpus is built from the docstrings of installed Python packages, so the demo "
               "needs no network. Takes a few minutes on 2 CPU cores.")
    parser.add_argument("--out-dir", default=defaults.out_dir,
                        help="where everything is written (default: %(default)s)")
    parser.add_argument("--corpus", help="JSONL(.gz) with a 'text' field instead of the embedded docstring corpus")
    parser.add_argument("--corpus-bytes", type=int, default=defaults.corpus_bytes,
                        help="size of the embedded corpus in bytes of text (default: %(default)s)")
    add_config_flags(parser, RUN_FLAGS, defaults=defaults)
    parser.add_argument("--probe-train", type=int, default=defaults.probe_train, help="probe training rows (max)")
    parser.add_argument("--probe-test", type=int, default=defaults.probe_test, help="probe test rows (max)")
    parser.add_argument("--mteb-lite-dir", default=defaults.mteb_lite_dir,
                        help="MTEB-lite folders: both encoders' average over its STS folders is printed, each named "
                             "('none': print the "
                             "crossbert-mteb command instead; default: mteb_lite/ of the shared data folder "
                             "($CROSSBERT_DATA_DIR, else ../shared/data) when present, "
                             "here %(default)s)")
    parser.add_argument("--force", action="store_true", help="move an existing, non-empty --out-dir aside (to <dir>.replaced-<time>-<id>; nothing is deleted)")
    add_debug_flag(parser)
    return parser


def options_from_args(args: argparse.Namespace) -> DemoOptions:
    """DemoOptions with the run flags applied to its config sections (each section validates itself)."""
    mteb_lite = None if (args.mteb_lite_dir or "none").lower() == "none" else args.mteb_lite_dir
    if mteb_lite is not None and not Path(mteb_lite).is_dir():
        raise FileNotFoundError(f"--mteb-lite-dir {mteb_lite} does not exist")
    opts = DemoOptions(out_dir=args.out_dir, corpus=args.corpus, corpus_bytes=args.corpus_bytes,
                       probe_train=args.probe_train, probe_test=args.probe_test, force=args.force,
                       mteb_lite_dir=mteb_lite)
    return replace_sections(opts, flag_values(args, RUN_FLAGS))


@cli_main
def main(argv: list[str] | None = None) -> int:
    opts = options_from_args(build_parser().parse_args(argv))  # ValueError: one line via cli_main
    quiet_library_warnings()
    try:
        result = run_demo(opts)  # FileExistsError / ValueError: one line via cli_main
    except DemoStopped as stopped:
        print(f"stopped: {stopped}", file=sys.stderr)
        return 128 + stopped.signum
    print(format_summary(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
