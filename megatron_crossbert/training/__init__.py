"""Pretraining on megatron-core: loop, optimizer/scheduler, logging, fault handling (checkpoints: ``checkpoint/``).

Public entry point: ``train(run_cfg) -> summary dict`` (see ``loop.py``). The CLI
(``crossbert-pretrain`` / ``torchrun -m megatron_crossbert.cli.pretrain``) is a thin wrapper over it.
"""

from megatron_crossbert.training.loop import NonFiniteLossError, train

__all__ = ["NonFiniteLossError", "train"]
