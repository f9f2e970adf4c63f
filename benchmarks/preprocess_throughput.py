"""Preprocessing throughput, side by side: ``crossbert-preprocess`` per backend, the raw ``tokenizers``
ceiling and (with ``--megatron-lm DIR``) Megatron-LM's ``tools/preprocess_data.py`` and
``tools/preprocess_data_fast.py``. A shim over ``crossbert-bench preprocess`` (same flags; see
``megatron_crossbert/benchmarking/preprocess.py`` for what is measured). Usage::

    flock /tmp/bench.lock python benchmarks/preprocess_throughput.py --tokenizer TOKDIR --megatron-lm ~/Megatron-LM
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from megatron_crossbert.cli.bench import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["preprocess", *sys.argv[1:]]))
