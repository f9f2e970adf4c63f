"""CrossBERT: an encoder over the visible tokens of each view and a cross-attention reconstruction decoder."""

from __future__ import annotations

from functools import partial

import torch

from megatron_crossbert.arch import get_arch
from megatron_crossbert.architectures.spec import TrainSpec, loss_func, to_device
from megatron_crossbert.models.crossbert import build_crossbert_model


class CrossBertSpec(TrainSpec):
    """Samples carry views; the model reconstructs each view's targets from its visible tokens."""

    arch = get_arch("crossbert")

    def build_model(self, run_cfg, **parts) -> torch.nn.Module:
        return build_crossbert_model(run_cfg, **parts)

    def forward_step(self, device: torch.device, data_iterator, model):
        """Every target position of every view is supervised, so the loss mask is all ones."""
        batch = to_device(next(data_iterator), device)
        output = model(batch["tokens"], batch["visible"], batch["targets"], segments=batch.get("segments"))
        b, views, num_targets = batch["targets"].shape
        loss_mask = torch.ones(b * views, num_targets, dtype=torch.float32, device=device)
        return output, partial(loss_func, loss_mask)


TRAIN_SPEC = CrossBertSpec()
