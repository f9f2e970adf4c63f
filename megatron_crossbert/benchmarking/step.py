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
    """Model, DDP, optimizer and scheduler exactly as the training package builds them."""
    from megatron_crossbert.models import build_model
    from megatron_crossbert.training import optimizer as opt_lib

    cfg = case.run_cfg
    model = _cast_for_precision(build_model(cfg), cfg)
    ddp = opt_lib.wrap_ddp(model, cfg)
    opt_lib.install_schedule_hooks(ddp, cfg)
    optimizer = opt_lib.build_optimizer(ddp, cfg)
    scheduler = opt_lib.build_scheduler(optimizer, cfg)
    ddp.train()
    return StepRunner(case=case, model=ddp, optimizer=optimizer, scheduler=scheduler, device=device)


def _cast_for_precision(model: torch.nn.Module, cfg) -> torch.nn.Module:
    """bf16/fp8 runs keep bf16 parameters (megatron's Float16Module), as the training loop does."""
    from megatron_crossbert.training.optimizer import uses_half_precision

    if not uses_half_precision(cfg):
        return model
    from megatron.core.transformer.module import Float16Module
    from megatron.core.utils import get_model_config

    return Float16Module(get_model_config(model), model)
