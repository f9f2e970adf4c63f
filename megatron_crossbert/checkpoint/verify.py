"""Verify a checkpoint once, before anything is built, and let the result drive the load.

megatron-core's idiom (``verify_checkpoint_and_load_strategy``, then load): the directory is
resolved once, ``run_config.json`` parsed once, the model shape, optimizer format, LR schedule and
tokenizer are checked once, and everything a later step needs travels in one frozen
:class:`VerifiedCheckpoint`. Resume and ``init_from`` (``checkpoint.start_guard.plan_start``),
HF export (``convert``) and evaluation take that object and never resolve the reference again.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

from megatron_crossbert.checkpoint.context_extension import extension_refusals, log_extension, resume_mismatches
from megatron_crossbert.checkpoint.errors import CheckpointError
from megatron_crossbert.checkpoint.layout import (
    RUN_CONFIG_FILE, iteration_of, load_saved_config, resolve_checkpoint_dir,
)
from megatron_crossbert.checkpoint.optimizer_format import reshard_refusal, saved_sharding_type
from megatron_crossbert.checkpoint.tokenizer_record import TokenizerVerdict, check_checkpoint_tokenizer
from megatron_crossbert.config import RunConfig

logger = logging.getLogger(__name__)

# Fields that fix parameter shapes or the meaning of positions: a mismatch makes a resume wrong.
_MODEL_FIELDS = ("arch", "encoder", "vocab_size", "hidden_size", "num_layers", "num_attention_heads", "ffn",
                 "max_position_embeddings", "decoder_num_layers", "dec_hidden", "dec_heads", "dec_ffn",
                 "decoder_position_embedding")

SCHEDULE_FIELDS = ("train_iters", "lr_warmup_iters", "lr_decay_style", "lr", "min_lr")
"""TrainingConfig fields the LR scheduler is built from (see training.optimizer.build_scheduler)."""


@dataclass(frozen=True)
class VerifiedCheckpoint:
    """A checkpoint that passed every check for one use; later steps read it from here only."""

    directory: Path
    """The complete ``iter_*`` directory to read (the reference resolved once)."""
    saved: RunConfig
    """Its ``run_config.json``, parsed once."""
    sharding_type: str | None
    """The distributed-optimizer layout stored in it (``optimizer_format``); None for a weights-only
    use, or when neither the saved run nor this one uses the distributed optimizer."""
    tokenizer: TokenizerVerdict
    """What the tokenizer check found (``tokenizer_record.TokenizerVerdict``)."""
    weights_only: bool
    """True when only the ``"model"`` entry is read (init_from, export, evaluation)."""
    reference: str
    """The reference as the user gave it (a root, an ``iter_*`` directory), for messages."""

    def __post_init__(self) -> None:
        if self.weights_only and self.sharding_type is not None:
            raise ValueError(f"{self.directory}: a weights-only use reads no optimizer state, "
                             f"so it has no sharding type (got {self.sharding_type!r})")


def config_mismatches(saved: RunConfig, current: RunConfig, *, weights_only: bool = False) -> list[str]:
    """Human-readable differences that make ``saved`` unusable for ``current``.

    ``init_from`` (``weights_only``) may extend the context (``context_extension``: a longer position
    table, new RoPE bases and windows); a full resume may change none of them.
    """
    fields = [name for name in _MODEL_FIELDS if not (weights_only and name == "max_position_embeddings")]
    diffs = [f"model.{name}: checkpoint {getattr(saved.model, name)!r} vs run {getattr(current.model, name)!r}"
             for name in fields if getattr(saved.model, name) != getattr(current.model, name)]
    if weights_only:
        return diffs + extension_refusals(saved, current)
    if saved.data.seq_length != current.data.seq_length:
        diffs.append(f"data.seq_length: checkpoint {saved.data.seq_length} vs run {current.data.seq_length}")
    return diffs + resume_mismatches(saved, current)


def schedule_changes(saved: RunConfig, current: RunConfig) -> list[str]:
    """'field: checkpoint X -> run Y' for every LR-schedule field that differs."""
    return [f"training.{name}: checkpoint {getattr(saved.training, name)!r} -> run {getattr(current.training, name)!r}"
            for name in SCHEDULE_FIELDS if getattr(saved.training, name) != getattr(current.training, name)]


def check_schedule(ckpt_dir: Path, saved: RunConfig, current: RunConfig) -> list[str]:
    """Apply checkpoint.lr_schedule_on_resume to the differences; returns them (logged when kept/applied)."""
    changes = schedule_changes(saved, current)
    policy = current.checkpoint.lr_schedule_on_resume
    if changes and policy == "refuse":
        raise CheckpointError(
            f"{ckpt_dir}: the LR schedule differs from the checkpoint's ({'; '.join(changes)}); set "
            f"--lr-schedule-on-resume checkpoint (keep the saved schedule) or config (apply this run's "
            f"from step {iteration_of(ckpt_dir) or 0} on), or restore the old values")
    if changes:
        verb = "keeping the checkpoint's schedule" if policy == "checkpoint" else "applying this run's schedule"
        logger.warning("resume from %s: LR schedule changed (%s); %s (checkpoint.lr_schedule_on_resume=%s)",
                       ckpt_dir, "; ".join(changes), verb, policy)
    return changes


def _note_document_mask(ckpt_dir: Path, current: RunConfig) -> None:
    """Turning document masks on or off changes what attention sees, not any shape: allowed, logged.
    Checkpoints written before document masks existed record none: they were trained without."""
    saved_data = json.loads((ckpt_dir / RUN_CONFIG_FILE).read_text()).get("data") or {}
    trained = bool(saved_data.get("document_mask", False))
    if trained != current.data.document_mask:
        logger.warning("resume from %s: checkpoint trained %s document masks; this run uses %s", ckpt_dir,
                       "with" if trained else "without", "them" if current.data.document_mask else "none")


def _stored_sharding_type(ckpt_dir: Path, saved: RunConfig, current: RunConfig) -> str | None:
    """The optimizer layout a full resume must request (read from disk once); None without a distributed optimizer."""
    if not current.parallel.use_distributed_optimizer:
        return None
    return saved_sharding_type(ckpt_dir, saved)


def verify_checkpoint(ckpt_dir: Path, current: RunConfig, *, weights_only: bool = False,
                      reference: str | Path | None = None) -> VerifiedCheckpoint:
    """Check a resolved checkpoint directory against this run; CheckpointError naming every problem.

    A full resume (``weights_only=False``) checks model shape and sequence length, that the stored
    optimizer state can be read at this TP/PP, and the LR-schedule policy; ``init_from`` checks the
    model shape only. Both check the tokenizer.
    """
    saved = load_saved_config(ckpt_dir)
    diffs = config_mismatches(saved, current, weights_only=weights_only)
    sharding_type = None if weights_only else _stored_sharding_type(ckpt_dir, saved, current)
    if not weights_only:
        diffs += reshard_refusal(ckpt_dir, saved, sharding_type, current)
    if diffs:
        raise CheckpointError(f"checkpoint {ckpt_dir} is incompatible with this run:\n  " + "\n  ".join(diffs))
    if not weights_only:
        check_schedule(ckpt_dir, saved, current)
        _note_document_mask(ckpt_dir, current)
    else:
        log_extension(str(ckpt_dir), saved, current)
    verdict = check_checkpoint_tokenizer(ckpt_dir, current)
    return VerifiedCheckpoint(ckpt_dir, saved, sharding_type, verdict, weights_only,
                              str(ckpt_dir if reference is None else reference))


def open_checkpoint(reference: str | Path) -> VerifiedCheckpoint:
    """Resolve a root or ``iter_*`` directory and read its config once, for a weights-only reader with
    no run of its own to compare against (HF export, evaluation)."""
    ckpt_dir = resolve_checkpoint_dir(reference)
    return VerifiedCheckpoint(ckpt_dir, load_saved_config(ckpt_dir), None, "not checked", True, str(reference))
