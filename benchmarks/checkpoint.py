"""Checkpoint save/load cost at 10M/50M/200M parameters (same as ``crossbert-bench checkpoint``).

Usage: ``flock /tmp/bench.lock python benchmarks/checkpoint.py [--sizes 10M 50M 200M] [--out FILE]``.
Importable: ``from megatron_crossbert.benchmarking.checkpoint import run_checkpoint_bench``.
"""

import sys

from megatron_crossbert.cli.bench import main

if __name__ == "__main__":
    sys.exit(main(["checkpoint", *sys.argv[1:]]))
