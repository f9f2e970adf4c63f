"""Wrap the model in megatron-core DDP and build the optimizer and LR/WD scheduler.

All settings come from the RunConfig passed in; nothing is read from globals. The model's
TransformerConfig is also where megatron's pipeline schedules look for the hooks that tie DDP to
the schedule (``no_sync_func``, ``grad_sync_func``, ``finalize_model_grads_func``); we set them
here because they only exist once DDP does.
"""

from __future__ import annotations

import torch
from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig, finalize_model_grads
from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler
from megatron.core.utils import get_model_config

from megatron_crossbert.config import RunConfig


def wrap_ddp(model: torch.nn.Module, run_cfg: RunConfig) -> DistributedDataParallel:
    """megatron-core DDP: contiguous grad buffers, bucketed (optionally overlapped) DP reduce."""
    parallel = run_cfg.parallel
    ddp_config = DistributedDataParallelConfig(
        grad_reduce_in_fp32=run_cfg.training.half_precision,
        overlap_grad_reduce=parallel.overlap_grad_reduce,
        use_distributed_optimizer=parallel.use_distributed_optimizer,
        check_for_nan_in_grad=False,  # non-finite steps are skipped by the loop, not raised here
    )
    config = get_model_config(model)
    ddp = DistributedDataParallel(config=config, ddp_config=ddp_config, module=model)
    ddp.broadcast_params()  # identical replicas even if init RNG ever diverged across DP ranks
    return ddp


def install_schedule_hooks(ddp_model: DistributedDataParallel, run_cfg: RunConfig) -> None:
    """Point the schedules at DDP's sync hooks and at the per-token-loss gradient finaliser."""
    config = get_model_config(ddp_model)
    config.calculate_per_token_loss = True
    config.finalize_model_grads_func = finalize_model_grads
    config.no_sync_func = ddp_model.no_sync
    config.grad_sync_func = ddp_model.start_grad_sync if run_cfg.parallel.overlap_grad_reduce else None
    if run_cfg.parallel.pipeline_model_parallel_size > 1 and config.pipeline_dtype is None:
        config.pipeline_dtype = torch.bfloat16 if run_cfg.training.half_precision else torch.float32


def optimizer_config(run_cfg: RunConfig) -> OptimizerConfig:
    """AdamW (decoupled weight decay) with global-norm clipping and fp32 main params."""
    train = run_cfg.training
    half = run_cfg.training.half_precision
    return OptimizerConfig(
        optimizer="adam", decoupled_weight_decay=True, lr=train.lr, min_lr=train.min_lr,
        weight_decay=train.weight_decay, adam_beta1=train.adam_beta1, adam_beta2=train.adam_beta2,
        adam_eps=train.adam_eps, clip_grad=train.clip_grad, bf16=half, fp16=False,
        params_dtype=torch.bfloat16 if half else torch.float32,
        use_distributed_optimizer=run_cfg.parallel.use_distributed_optimizer,
    )


def build_optimizer(ddp_model: DistributedDataParallel, run_cfg: RunConfig):
    """megatron's optimizer over the DDP chunk; its grad_scale_func is handed to the schedules."""
    # no gloo groups exist (``platform.process_group_args``): the optimizer must not ask for them
    optimizer = get_megatron_optimizer(optimizer_config(run_cfg), [ddp_model], use_gloo_process_groups=False)
    get_model_config(ddp_model).grad_scale_func = optimizer.scale_loss
    return optimizer


def build_scheduler(optimizer, run_cfg: RunConfig) -> OptimizerParamScheduler:
    """Linear warmup to ``lr``, then cosine/linear/constant/WSD decay to ``min_lr`` at ``train_iters``
    (``TrainingConfig.scheduler_decay_kwargs``: WSD holds ``lr`` until its decay phase).

    Steps are counted in optimizer steps (increment 1 per iteration), so the schedule does not
    depend on the global batch size, which a batch-size warmup changes (Megatron-LM counts samples
    there: its warmup is linear in samples, ours in steps). Checkpointed values win on resume.
    """
    train = run_cfg.training
    decay = train.scheduler_decay_kwargs()
    return OptimizerParamScheduler(
        optimizer, init_lr=0.0, max_lr=train.lr, min_lr=train.min_lr,
        lr_warmup_steps=min(train.lr_warmup_iters, decay["lr_decay_steps"] - 1), start_wd=train.weight_decay,
        end_wd=train.weight_decay, wd_incr_steps=decay["lr_decay_steps"], wd_incr_style="constant",
        use_checkpoint_opt_param_scheduler=True, override_opt_param_scheduler=False, **decay,
    )


def current_lr(optimizer) -> float:
    """The learning rate of the first parameter group (all groups share it here)."""
    for group in optimizer.param_groups:
        lr = group["lr"]
        return float(lr.item() if isinstance(lr, torch.Tensor) else lr)
    return 0.0
