"""H200 validation in one go (<8 min): bf16 BERT-base/large throughput and MFU, FP8 if TE imports.

Usage: ``python benchmarks/gpu_check.py [--peak-tflops 790] [--out FILE]``; same as
``crossbert-bench gpu-check``. Without CUDA it says so, writes a 'skipped' JSON and exits 0.
"""

import sys

from megatron_crossbert.cli.bench import main

if __name__ == "__main__":
    sys.exit(main(["gpu-check", *sys.argv[1:]]))
