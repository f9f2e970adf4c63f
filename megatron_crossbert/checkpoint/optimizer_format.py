"""The optimizer's on-disk state: which distributed-optimizer format is written, which one a
checkpoint holds, and the Adam-state repairs a load needs without Apex/TE.

megatron-core's ``DistributedOptimizer.sharded_state_dict`` can write its Adam state in several
layouts (``distrib_optim_sharding_type``). This module is the one place that picks the layout for
new checkpoints, records it in the checkpoint (dist_checkpointing ``content_metadata``, JSON-safe
and read back with a weights-only loader), recognises the layout of an existing checkpoint and
says whether it can be resumed under a different TP/PP layout.

Per-parameter Adam ``step`` counts are not part of any of these layouts (megatron keeps one step
in the param groups); :func:`restore_adam_steps` re-derives them after a load.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

import torch

from megatron_crossbert.checkpoint.errors import CheckpointError
from megatron_crossbert.checkpoint.safe_pickle import checked_read
from megatron_crossbert.config import RunConfig

SHARDING_TYPE_KEY = "distrib_optim_sharding_type"
"""The megatron-core metadata key (sharded_state_dict ``metadata``) that selects the layout."""

FULLY_RESHARDABLE = "fully_reshardable"
LEGACY_DP_RESHARDABLE = "dp_reshardable"

SAVE_SHARDING_TYPE = FULLY_RESHARDABLE
"""The layout every new distributed-optimizer checkpoint is written in.

``fully_reshardable`` stores each Adam moment (and the optimizer's main weight) in model space: one
tensor per parameter, with the parameter's own TP/PP sharding metadata, so a later run may use any TP, PP
and DP the model config allows, exactly. The alternatives fall short here: ``dp_reshardable``
stores raw DP buckets, which only map back under the same TP/PP; megatron-core's default
``fully_sharded_model_space`` fails on load in 0.19 ("flattened_range is not supported").
The price is a gather of the DP shards at save time (over the DP group) and each rank reading a
superset of its shard at load time; the ``crossbert-bench checkpoint`` numbers show the cost.
"""

CONTENT_FORMAT_KEY = "crossbert_distrib_optim_format"
"""Our key in the checkpoint's content metadata; absent in checkpoints written before this format."""


OPTIMIZER_IMPL_KEY = "crossbert_optimizer_impl"
"""Our key for the Adam implementation that wrote the optimizer state; absent in older checkpoints."""


def optimizer_impl() -> str:
    """The Adam class megatron-core builds here: Transformer Engine's FusedAdam when TE imports, else apex's
    FusedAdam, else torch's AdamW. Their states share names (exp_avg, exp_avg_sq), but a resume across them
    is a change of implementation the log must show."""
    from megatron.core import optimizer as megatron_optimizer

    adam = megatron_optimizer.Adam
    return f"{adam.__module__}.{adam.__qualname__}"


def save_content_metadata(run_cfg: RunConfig) -> dict:
    """What ``dist_checkpointing.save(content_metadata=...)`` records for this run's optimizer: its Adam
    implementation and, with the distributed optimizer, the layout of its state."""
    content = {OPTIMIZER_IMPL_KEY: optimizer_impl()}
    if run_cfg.parallel.use_distributed_optimizer:
        content[CONTENT_FORMAT_KEY] = SAVE_SHARDING_TYPE
    return content


def sharding_metadata(sharding_type: str | None) -> dict | None:
    """The ``metadata`` argument for ``optimizer.sharded_state_dict`` (None: not a distributed optimizer)."""
    return None if sharding_type is None else {SHARDING_TYPE_KEY: sharding_type}


@dataclass(frozen=True)
class SavedOptimizer:
    """What a checkpoint's content metadata says about its optimizer state, read once."""

    sharding_type: str | None = None
    """The distributed-optimizer layout stored (None: saved without one). A checkpoint without our entry
    predates this format and is ``dp_reshardable`` (that includes a directory holding only
    run_config.json, e.g. in tests)."""
    impl: str | None = None
    """The Adam implementation that wrote the state (:func:`optimizer_impl`); None: not recorded."""


def read_saved_optimizer(ckpt_dir: Path, saved_cfg: RunConfig) -> SavedOptimizer:
    """The optimizer layout and Adam implementation of the checkpoint in ``ckpt_dir``, which ``saved_cfg``
    (its run_config.json) wrote."""
    content = saved_content(ckpt_dir)
    layout = content.get(CONTENT_FORMAT_KEY, LEGACY_DP_RESHARDABLE) if saved_cfg.parallel.use_distributed_optimizer \
        else None
    return SavedOptimizer(layout, content.get(OPTIMIZER_IMPL_KEY))


def saved_content(ckpt_dir: Path) -> dict:
    """The content metadata ``save_content_metadata`` wrote ({} for a checkpoint without any)."""
    if not (Path(ckpt_dir) / "metadata.json").is_file():
        return {}
    from megatron.core.dist_checkpointing import load_content_metadata

    try:
        with checked_read(Path(ckpt_dir)):  # restricted unpickling of .metadata and the common state
            return load_content_metadata(str(ckpt_dir)) or {}
    except CheckpointError:
        raise
    except Exception as err:
        raise CheckpointError(f"cannot read the content metadata of {ckpt_dir}: {err}") from err


def _layout(cfg: RunConfig) -> tuple[int, int]:
    return cfg.parallel.tensor_model_parallel_size, cfg.parallel.pipeline_model_parallel_size


def reshard_refusal(ckpt_dir: Path, saved_cfg: RunConfig, sharding_type: str | None,
                    current: RunConfig) -> list[str]:
    """One-line reasons why ``current`` cannot resume the optimizer state in ``ckpt_dir``, whose
    layout :func:`read_saved_optimizer` read as ``sharding_type``. Switching the distributed optimizer on
    or off between save and resume is refused by name: the two layouts store Adam's state differently
    and megatron's loader fails on the other one with a serialized traceback (resharding between them
    is possible in principle; not done or verified here)."""
    saved_on, now_on = saved_cfg.parallel.use_distributed_optimizer, current.parallel.use_distributed_optimizer
    if saved_on != now_on:
        return [f"parallel.use_distributed_optimizer: {ckpt_dir} was saved with {str(saved_on).lower()}, this run "
                f"sets {str(now_on).lower()}; its optimizer state cannot be read in the other layout: set it back, "
                f"or start from its weights with --init-from (a fresh optimizer)"]
    both = saved_on and now_on
    if not both or _layout(saved_cfg) == _layout(current) or sharding_type != LEGACY_DP_RESHARDABLE:
        return []
    tp, pp = _layout(saved_cfg)
    return [f"parallel: the distributed-optimizer state in {ckpt_dir} is in the older "
            f"'{LEGACY_DP_RESHARDABLE}' format, saved at TP={tp}/PP={pp}, and can only be resumed at that "
            f"TP/PP (any DP); resume at that layout, or load the weights only with checkpoint.init_from"]


def _with_current_step(inner, set_states):
    """Wrap one DistributedOptimizer's ``_set_main_param_and_optimizer_states`` (see below)."""
    def set_states_keeping_step(model_param, tensors):
        if "step" not in tensors:
            group_index, group_order = inner.model_param_group_index_map[model_param]
            main_param = inner.optimizer.param_groups[group_index]["params"][group_order]
            step = inner.optimizer.state[main_param].get("step")
            if isinstance(step, torch.Tensor):
                tensors = {**tensors, "step": step.clone()}
        return set_states(model_param, tensors)
    return set_states_keeping_step


@contextlib.contextmanager
def model_space_load(optimizer):
    """While loading a model-space layout, tolerate torch Adam's per-parameter ``step`` tensor.

    Without Apex/Transformer Engine (the CPU case) the inner optimizer is torch AdamW, whose state
    holds a ``step`` tensor per parameter. megatron-core 0.19 copies every tensor of that state
    from the loaded ``fully_reshardable`` entry, which (rightly) has no ``step``, and fails with
    KeyError 'step'. For the duration of the load each parameter's current step is offered as
    its own value (a no-op copy); :func:`restore_adam_steps` sets the true count after.
    The wrapper is an instance attribute, removed again on exit.
    """
    patched = []
    for inner in getattr(optimizer, "chained_optimizers", [optimizer]):
        original = getattr(inner, "_set_main_param_and_optimizer_states", None)
        if original is not None and hasattr(inner, "model_param_group_index_map"):
            inner._set_main_param_and_optimizer_states = _with_current_step(inner, original)
            patched.append(inner)
    try:
        yield
    finally:
        for inner in patched:
            del inner._set_main_param_and_optimizer_states


def prime_optimizer_state(optimizer) -> None:
    """Give a fresh optimizer zero Adam moments and step 0 before it is loaded into.

    megatron's DistributedOptimizer.state_dict() reads a single 'step' from torch's Adam state when
    neither Apex nor Transformer Engine is installed (the CPU case) and asserts on an optimizer that
    has not stepped yet; its own init_state_fn does not create 'step'. The loaded checkpoint then
    overwrites every value set here.
    """
    for inner in getattr(optimizer, "chained_optimizers", [optimizer]):
        torch_opt = getattr(inner, "optimizer", None)
        if not isinstance(torch_opt, (torch.optim.Adam, torch.optim.AdamW)):
            continue
        for group in torch_opt.param_groups:
            for param in group["params"]:
                state = torch_opt.state[param]
                if not state:
                    state.update(step=torch.tensor(0.0), exp_avg=torch.zeros_like(param.data),
                                 exp_avg_sq=torch.zeros_like(param.data))


def restore_adam_steps(optimizer, steps: int) -> None:
    """Set every parameter's Adam 'step' to ``steps``, each in its own tensor.

    Without Apex/TE, megatron's DistributedOptimizer load leaves torch AdamW's per-parameter 'step'
    wrong (one tensor shared by every parameter, and reset to 0 with the dp_reshardable format), so
    the bias correction of a resumed run would differ; no optimizer layout stores per-parameter
    steps. Applied optimizer steps equal the scheduler's step count here (both advance only when a
    step is applied), which gives the true value.
    """
    for inner in getattr(optimizer, "chained_optimizers", [optimizer]):
        torch_opt = getattr(inner, "optimizer", None)
        if isinstance(torch_opt, torch.optim.Optimizer):
            for state in torch_opt.state.values():
                if isinstance(state.get("step"), torch.Tensor):
                    state["step"] = torch.tensor(float(steps), dtype=state["step"].dtype,
                                                 device=state["step"].device)
