"""crossbert-demo: corpus -> tokenizer -> preprocess -> pretrain -> HF export -> frozen probe, on the CPU."""

from __future__ import annotations

import argparse
import sys

from megatron_crossbert.cli import quiet_library_warnings
from megatron_crossbert.cli.errors import add_debug_flag, cli_main
from megatron_crossbert.demo import DemoOptions, format_summary, run_demo


def build_parser() -> argparse.ArgumentParser:
    defaults = DemoOptions()
    parser = argparse.ArgumentParser(
        prog="crossbert-demo", description=__doc__,
        epilog="The default corpus is built from the docstrings of installed Python packages, so the demo "
               "needs no network. Takes a few minutes on 2 CPU cores.")
    parser.add_argument("--out-dir", default=defaults.out_dir, help="where everything is written (default: %(default)s)")
    parser.add_argument("--corpus", help="JSONL(.gz) with a 'text' field instead of the embedded docstring corpus")
    parser.add_argument("--corpus-bytes", type=int, default=defaults.corpus_bytes,
                        help="size of the embedded corpus in bytes of text (default: %(default)s)")
    parser.add_argument("--vocab-size", type=int, default=defaults.vocab_size)
    parser.add_argument("--seq-length", type=int, default=defaults.seq_length)
    parser.add_argument("--hidden-size", type=int, default=defaults.hidden_size)
    parser.add_argument("--num-layers", type=int, default=defaults.num_layers)
    parser.add_argument("--train-iters", type=int, default=defaults.train_iters)
    parser.add_argument("--micro-batch-size", type=int, default=defaults.micro_batch_size)
    parser.add_argument("--probe-train", type=int, default=defaults.probe_train, help="probe training rows (max)")
    parser.add_argument("--probe-test", type=int, default=defaults.probe_test, help="probe test rows (max)")
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--force", action="store_true", help="replace an existing, non-empty --out-dir")
    add_debug_flag(parser)
    return parser


@cli_main
def main(argv: list[str] | None = None) -> int:
    args = vars(build_parser().parse_args(argv))
    args.pop("debug")  # cli_main's flag, not a demo option
    quiet_library_warnings()
    result = run_demo(DemoOptions(**args))  # FileExistsError / ValueError: one line via cli_main
    print(format_summary(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
