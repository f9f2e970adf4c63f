"""``TrainSpec``: the parts that build and train one architecture, as real functions and classes.

torchtitan's TrainSpec: one object per architecture holds what differs when a run is built, so a reader (and
an import graph) follows a training start from ``get_train_spec`` to the model, the dataset and the forward
step. The cheap facts a config validates against stay in ``arch.py`` (no imports), the sample rules in
``arch_rules``; this module and the per-architecture modules beside it import torch and megatron.

The forward steps live with their architecture (the batch contracts differ, see docs/architecture.md); all
return per-token losses in megatron's per-token convention (``calculate_per_token_loss=True``): each
micro-batch reports ``(loss_sum, num_tokens)`` and ``finalize_model_grads`` divides by the job-wide count.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import torch

from megatron_crossbert.arch import ArchSpec
from megatron_crossbert.arch_rules import SampleLayout, sample_layout


class TrainSpec(ABC):
    """What one architecture builds: its facts, its sample layout, its model and its forward step.

    One subclass per architecture (``architectures/<name>.py``) whose methods call its real builders, so a call
    through ``get_train_spec(name)`` is a method call that a reader and an import graph can follow to the model.
    """

    arch: ClassVar[ArchSpec]
    """The cheap facts (``arch.REGISTRY``)."""

    @property
    def layout(self) -> SampleLayout:
        """Sample builder, supervised tokens and attention calls (``arch_rules.sample_layout`` owns the rule)."""
        return sample_layout(self.arch.name)

    @abstractmethod
    def build_model(self, run_cfg, *, vocab_size: int, max_sequence_length: int, use_te: bool, attention,
                    pre_process: bool, post_process: bool) -> torch.nn.Module:
        """The model chunk (``attention``: the run's ``models.attention_setup.AttentionSetup``)."""

    @abstractmethod
    def forward_step(self, device: torch.device, data_iterator, model):
        """``(output, loss_func)`` of one micro-batch, as megatron's schedules call it."""


def loss_func(loss_mask: torch.Tensor, per_token_loss: torch.Tensor):
    """(loss_sum, num_tokens, report) as megatron's schedules expect with per-token loss."""
    losses = per_token_loss.float().reshape(-1)
    mask = loss_mask.float().reshape(-1)
    loss_sum = torch.sum(losses * mask)
    num_tokens = mask.sum().to(torch.int)
    report = torch.stack([loss_sum.detach().clone(), num_tokens.detach().float()])
    return loss_sum, num_tokens, {"lm loss": report}


def to_device(batch: dict, device: torch.device) -> dict:
    """Every tensor of a micro-batch on ``device`` (asynchronous from pinned memory)."""
    return {key: value.to(device, non_blocking=True) for key, value in batch.items()}
