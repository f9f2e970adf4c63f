"""Training-step throughput, CrossBERT vs megatron-core BertModel (same as ``crossbert-bench throughput``).

Usage: ``python benchmarks/throughput.py [--size cpu|base|large] [--profile] [--out FILE]``.
Importable: ``from megatron_crossbert.benchmarking.throughput import run_throughput``.
"""

import sys

from megatron_crossbert.cli.bench import main

if __name__ == "__main__":
    sys.exit(main(["throughput", *sys.argv[1:]]))
