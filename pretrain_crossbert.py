"""Pretrain CrossBERT / BERT on megatron-core; run one process per device under torchrun.

Usage:
    torchrun --nproc_per_node 2 pretrain_crossbert.py --config examples/tiny_cpu.yaml --save /tmp/ckpt
    python pretrain_crossbert.py --help

Thin shim over ``megatron_crossbert.cli.pretrain`` (console script ``crossbert-pretrain``). The
``__main__`` guard is required: dist_checkpointing's writer spawns processes that re-import this file.
"""

import sys

from megatron_crossbert.cli.pretrain import main

if __name__ == "__main__":
    sys.exit(main())
