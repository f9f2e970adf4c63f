"""One optimizer step and one validation pass, on megatron-core's pipeline schedules.

The forward-step functions are per architecture (the batch contracts differ, see
docs/architecture.md): each is its ``architectures`` module's ``TrainSpec.forward_step``; all return per-token
losses and use the per-token loss convention (``calculate_per_token_loss=True``): each micro-batch reports ``(loss_sum, num_tokens)`` and
``finalize_model_grads`` divides the gradients by the job-wide token count, so the result does not
depend on how the global batch is split into micro-batches or DP ranks.

Non-finite handling: megatron's fp32/bf16 optimizers do not check for Inf/NaN (only fp16 loss
scaling does), so ``train_step`` checks the reduced loss and the gradient buffers itself and skips
the optimizer step when any rank saw a non-finite value.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

import torch
import torch.distributed as dist
from megatron.core import parallel_state
from megatron.core.pipeline_parallel import get_forward_backward_func

from megatron_crossbert.architectures.registry import get_train_spec
from megatron_crossbert.config import RunConfig


@dataclass
class StepResult:
    """What one step reports (identical on every rank after the reductions)."""

    loss_sum: float
    num_tokens: float
    skipped: bool = False
    """The optimizer step was not applied (non-finite loss or gradients)."""
    nonfinite: bool = False
    """Loss, gradients or grad norm were Inf/NaN (counts towards max_nonfinite_steps)."""
    grad_norm: float | None = None
    extras: dict = field(default_factory=dict)

    @property
    def loss(self) -> float:
        return self.loss_sum / max(self.num_tokens, 1.0)


def run_schedule(model, data_iterator, run_cfg: RunConfig, num_micro: int, device, forward_only: bool):
    """Run megatron's schedule (no pipelining, or 1F1B for PP>1) for ``num_micro`` micro-batches."""
    seq_length, micro_batch = run_cfg.pipeline_shape()
    return get_forward_backward_func()(
        forward_step_func=partial(get_train_spec(run_cfg.model.arch).forward_step, device), data_iterator=data_iterator,
        model=[model], num_microbatches=num_micro, seq_length=seq_length,
        micro_batch_size=micro_batch, forward_only=forward_only,
    )


def _local_loss(losses_reduced: list, device) -> torch.Tensor:
    """Sum of [loss_sum, num_tokens] over micro-batches; zeros off the last stage or on TP rank > 0.

    Only one TP rank contributes so a single world all-reduce gives the job-wide figures.
    """
    total = torch.zeros(2, dtype=torch.float64, device=device)
    if parallel_state.get_tensor_model_parallel_rank() != 0:
        return total
    for item in losses_reduced:
        total += item["lm loss"].to(device=device, dtype=torch.float64)
    return total


def grads_nonfinite(model) -> bool:
    """Whether this rank's gradient buffers hold any Inf/NaN (whole buffers: one check each)."""
    buffers = getattr(model, "buffers", None) or []
    tensors = [buf.grad_data for buf in buffers if getattr(buf, "grad_data", None) is not None]
    if not tensors:
        tensors = [getattr(p, "main_grad", p.grad) for p in model.parameters()]
        tensors = [t for t in tensors if t is not None]
    return any(not bool(torch.isfinite(t).all()) for t in tensors)


def reduce_step_stats(losses_reduced: list, model, device, check_grads: bool) -> tuple[float, float, bool]:
    """Job-wide (loss_sum, num_tokens, nonfinite) with one all-reduce."""
    loss = _local_loss(losses_reduced, device)
    flag = 1.0 if check_grads and grads_nonfinite(model) else 0.0
    packed = torch.cat([loss, torch.tensor([flag], dtype=torch.float64, device=device)])
    if dist.is_initialized():
        dist.all_reduce(packed)
    loss_sum, num_tokens, bad = packed.tolist()
    nonfinite = bad > 0 or not torch.isfinite(torch.tensor(loss_sum)).item()
    return loss_sum, num_tokens, nonfinite


def train_step(model, optimizer, scheduler, data_iterator, run_cfg: RunConfig, num_micro: int, device) -> StepResult:
    """Forward/backward over the global batch, then (unless non-finite) clip, step and advance the LR."""
    model.zero_grad_buffer()
    optimizer.zero_grad()
    losses = run_schedule(model, data_iterator, run_cfg, num_micro, device, forward_only=False)
    loss_sum, num_tokens, nonfinite = reduce_step_stats(losses, model, device, check_grads=True)
    if nonfinite:
        model.zero_grad_buffer()
        optimizer.zero_grad()
        return StepResult(loss_sum, num_tokens, skipped=True, nonfinite=True)
    _, grad_norm, _ = optimizer.step()
    scheduler.step(increment=1)
    norm = None if grad_norm is None else float(grad_norm)
    bad_norm = norm is not None and not torch.isfinite(torch.tensor(norm)).item()
    return StepResult(loss_sum, num_tokens, nonfinite=bad_norm, grad_norm=norm)


@torch.no_grad()
def evaluate(model, data_iterator, run_cfg: RunConfig, num_micro: int, device) -> float:
    """Mean per-token validation loss over ``num_micro`` micro-batches per DP rank (dropout off)."""
    model.eval()
    try:
        losses = run_schedule(model, data_iterator, run_cfg, num_micro, device, forward_only=True)
    finally:
        model.train()
    loss_sum, num_tokens, _ = reduce_step_stats(losses, model, device, check_grads=False)
    return loss_sum / max(num_tokens, 1.0)
