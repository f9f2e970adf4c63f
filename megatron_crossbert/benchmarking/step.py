"""One real training step per benchmark model, built from the training package's own pieces.

The benchmark must time what pretraining runs: megatron-core DDP, megatron's optimizer (AdamW,
grad clipping, fp32 main weights under bf16) and ``get_forward_backward_func``. Everything here
delegates to ``megatron_crossbert.training``; the only local code is the glue that feeds a
pre-built batch into that machinery, so no second training loop exists.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from megatron_crossbert.benchmarking.cases import BenchCase


@dataclass
class StepRunner:
    """A model wrapped for training plus its optimizer; ``step(batch)`` runs one optimizer step."""

    case: BenchCase
    model: torch.nn.Module
    """The DDP-wrapped chunk (what the schedule sees)."""
    optimizer: Any
    scheduler: Any
    device: torch.device

    @property
    def unwrapped(self) -> torch.nn.Module:
        module = self.model
        while hasattr(module, "module"):
            module = module.module
        return module

    def step(self, batch: dict[str, torch.Tensor]) -> float:
        """``training.steps.train_step`` on one micro-batch: fwd, bwd, non-finite check, clip, update."""
        from megatron_crossbert.training.steps import train_step

        result = train_step(self.model, self.optimizer, self.scheduler, iter([batch]), self.case.run_cfg,
                            1, self.device)
        return result.loss


def build_runner(case: BenchCase, device: torch.device) -> StepRunner:
    """Model, DDP, optimizer and scheduler exactly as a training run builds them.

    The platform is initialised once by the caller (``training.setup.build_trainable`` neither
    re-initialises process groups nor restores checkpoints). bf16/fp8 need no wrapper: the model is
    created with bf16 params from its TransformerConfig, and megatron's TransformerBlock enters
    Transformer Engine's FP8 context itself when ``fp8`` is set.
    """
    from megatron_crossbert.training.setup import build_trainable

    _, ddp, optimizer, scheduler = build_trainable(case.run_cfg)
    ddp.train()
    return StepRunner(case=case, model=ddp, optimizer=optimizer, scheduler=scheduler, device=device)
