"""Our side of the conversion: build a TP=1/PP=1 model and load or save native checkpoints.

A checkpoint saved at any TP/PP is opened once (``checkpoint.verify.open_checkpoint``: resolved,
run config read) and loaded in one process at TP=1/PP=1 through
``checkpoint.load.read_model_weights`` (dist_checkpointing reshards). Two details make that exact:
- the embedding table height does not depend on TP (``ModelConfig.padded_vocab_size``), so the
  TP=1 build has exactly the saved rows;
- the model is built with the local layer spec in fp32 (checkpoint keys are spec-independent), so a
  GPU/TE/bf16 run exports on a CPU-only machine.
"""

from __future__ import annotations

import dataclasses
from contextlib import contextmanager
from pathlib import Path

import torch

from megatron_crossbert.checkpoint.errors import CheckpointError
from megatron_crossbert.checkpoint.verify import VerifiedCheckpoint, open_checkpoint
from megatron_crossbert.config import CheckpointConfig, ParallelConfig, RunConfig
from megatron_crossbert.convert.errors import ConversionError


def open_export_source(checkpoint: str | Path | VerifiedCheckpoint, verify: str = "full") -> VerifiedCheckpoint:
    """The checkpoint to export, opened (and its files checked, ``verify``: full or off) once;
    checkpoint-layout problems become ``ConversionError``.

    A caller that already opened it (evaluation, which also hashes the directory) passes the
    :class:`VerifiedCheckpoint` itself, so the reference is never resolved twice.
    """
    if isinstance(checkpoint, VerifiedCheckpoint):
        return checkpoint
    try:
        return open_checkpoint(checkpoint, verify)
    except CheckpointError as err:
        raise ConversionError(f"cannot export {checkpoint}: {err}") from err


def single_process_config(run_cfg: RunConfig) -> RunConfig:
    """The same model at TP=1/PP=1, local spec, fp32, with the saved embedding-table height."""
    model = dataclasses.replace(run_cfg.model, transformer_impl="local")
    training = dataclasses.replace(run_cfg.training, precision="fp32")
    return dataclasses.replace(run_cfg, model=model, training=training, parallel=ParallelConfig(),
                               checkpoint=CheckpointConfig())


@contextmanager
def tp1_parallel_state(seed: int):
    """Reuse a TP=1/PP=1 parallel state when the caller has one; else create one and tear it down after.

    A caller at TP/PP > 1 (or in a multi-rank job) must convert from a separate process: re-initialising
    its groups would break it, and dist_checkpointing loads are collective.
    """
    import torch.distributed as dist
    from megatron.core import parallel_state

    from megatron_crossbert.platform.distributed import destroy, initialize

    if parallel_state.model_parallel_is_initialized():
        if (parallel_state.get_tensor_model_parallel_world_size() != 1
                or parallel_state.get_pipeline_model_parallel_world_size() != 1):
            raise ConversionError("HF conversion needs TP=1/PP=1; run it in a separate (single) process")
        yield
        return
    owns_group = not dist.is_initialized()
    if not owns_group and dist.get_world_size() != 1:
        raise ConversionError("HF conversion runs in one process; call it outside the multi-rank job")
    initialize(ParallelConfig(), seed)
    try:
        yield
    finally:  # leave a caller's process group alone; tear down only what was created here
        if owns_group:
            destroy()
        else:
            parallel_state.destroy_model_parallel()


def build_single_process_model(run_cfg: RunConfig) -> torch.nn.Module:
    """``architectures.build.build_model`` for ``single_process_config(run_cfg)``, in eval mode (caller holds TP=1 state)."""
    from megatron_crossbert.architectures.build import build_model

    return build_model(single_process_config(run_cfg)).eval()


def _load_weights(model: torch.nn.Module, source: VerifiedCheckpoint) -> None:
    """``read_model_weights`` with every failure as ConversionError (it already maps DCP's
    BaseException-derived CheckpointException to CheckpointError)."""
    from megatron_crossbert.checkpoint.load import read_model_weights

    try:
        read_model_weights(model, source)
    except Exception as err:
        summary = str(err).strip().splitlines()[-1] if str(err).strip() else type(err).__name__
        raise ConversionError(f"cannot load model weights from {source.reference}: {summary}") from err


def load_native_state(source: VerifiedCheckpoint) -> dict[str, torch.Tensor]:
    """Every tensor of the checkpoint's model at TP=1 (CPU copies; ``_extra_state`` dropped)."""
    run_cfg = source.saved
    with tp1_parallel_state(run_cfg.training.seed):
        model = build_single_process_model(run_cfg)
        _load_weights(model, source)
        return {key: value.detach().cpu().clone() for key, value in model.state_dict().items()
                if isinstance(value, torch.Tensor) and not key.endswith("_extra_state")}


def save_native(run_cfg: RunConfig, weights: dict[str, torch.Tensor], out_root: Path) -> Path:
    """Build a fresh TP=1 model (CrossBERT decoder randomly initialised from ``training.seed``), overwrite
    it with ``weights`` (all encoder tensors must be present) and write a model-only checkpoint."""
    from megatron_crossbert.checkpoint.save import save_model_only

    with tp1_parallel_state(run_cfg.training.seed):
        model = build_single_process_model(run_cfg)
        state = model.state_dict()
        unknown = sorted(set(weights) - set(state))
        if unknown:
            raise ConversionError(f"converted tensors not in the native model: {unknown[:6]}")
        for key, value in weights.items():
            if tuple(state[key].shape) != tuple(value.shape):
                raise ConversionError(f"{key}: HF shape {tuple(value.shape)}, native {tuple(state[key].shape)}")
            state[key] = value.to(state[key].dtype)
        model.load_state_dict(state, strict=True)
        return save_model_only(model, run_cfg, out_root)
