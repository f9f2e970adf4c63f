"""What a resume does with schedules and settings that differ from the checkpoint's.

A resume continues a schedule at a step: the LR schedule (megatron's scheduler state), the batch-size warmup
and the masking-rate schedule (functions of consumed samples and of the sample index). A resume under other
values is exact only if the run says which to follow (``checkpoint.lr_schedule_on_resume``): ``refuse``
(the default) names every difference, ``checkpoint`` keeps the saved schedules, ``config`` applies this run's
from the resumed step on. A few settings change no tensor's shape and no schedule (:data:`LOGGED_CHANGES`):
they may change, with a log line.

This is a policy over a verified checkpoint (``verify.VerifiedCheckpoint``); ``verify`` checks what a
checkpoint is, this decides what the run trains with. The front door (``manager``) applies it once.
"""

from __future__ import annotations

import logging
from megatron_crossbert.checkpoint.directories import iteration_of
from megatron_crossbert.checkpoint.errors import CheckpointError
from megatron_crossbert.checkpoint.verify import VerifiedCheckpoint
from megatron_crossbert.config import RunConfig, replace_sections

logger = logging.getLogger(__name__)

LR_SCHEDULE_FIELDS = ("training.train_iters", "training.lr_warmup_iters", "training.lr_decay_style",
                      "training.lr", "training.min_lr", "training.lr_wsd_decay_iters",
                      "training.lr_wsd_decay_fraction", "training.lr_wsd_decay_style")
"""What the LR scheduler is built from (``training.optimizer.build_scheduler``). megatron's scheduler state
holds the first five; the WSD fields it does not (``checkpoint.load`` sets them from the saved run)."""
DATA_SCHEDULE_FIELDS = ("training.step_batch_size_schedule", "training.rampup_batch_size",
                        "masking.bert_mask_prob_schedule", "masking.bert_mask_prob_schedule_style")
"""The batch-size warmup and the masking-rate schedule: functions of consumed samples and of the sample
index, so a resume is exact only under the same values."""
SCHEDULE_FIELDS = LR_SCHEDULE_FIELDS + DATA_SCHEDULE_FIELDS
"""``section.field`` of every schedule a resume must agree on (``checkpoint.lr_schedule_on_resume``)."""

LOGGED_CHANGES = {
    "training.global_batch_size": "samples per step change from here on; the LR schedule counts steps",
    "training.micro_batch_size": "the same samples per step, in micro-batches of another size",
    "data.document_mask": "what attention sees changes, no shape does",
}
"""Settings a resume may change (no tensor's shape depends on them): allowed, and logged, as schedule
changes are. ``load_saved_config`` reads checkpoints from before document masks as trained without."""


def schedule_changes(saved: RunConfig, current: RunConfig) -> list[str]:
    """'section.field: checkpoint X -> run Y' for every schedule field that differs."""
    return [f"{key}: checkpoint {saved.value_at(key)!r} -> run {current.value_at(key)!r}"
            for key in SCHEDULE_FIELDS if saved.value_at(key) != current.value_at(key)]


def _apply_policy(source: VerifiedCheckpoint, current: RunConfig) -> list[str]:
    """Refuse (``refuse``) or log (``checkpoint``, ``config``) the schedule differences; returns them."""
    changes = schedule_changes(source.saved, current)
    policy, ckpt_dir = current.checkpoint.lr_schedule_on_resume, source.directory
    if changes and policy == "refuse":
        raise CheckpointError(
            f"{ckpt_dir}: the schedule differs from the checkpoint's ({'; '.join(changes)}); set "
            f"--lr-schedule-on-resume checkpoint (keep the saved schedule) or config (apply this run's "
            f"from step {iteration_of(ckpt_dir) or 0} on), or restore the old values")
    if changes:
        verb = "keeping the checkpoint's schedule" if policy == "checkpoint" else "applying this run's schedule"
        logger.warning("resume from %s: schedule changed (%s); %s (checkpoint.lr_schedule_on_resume=%s)",
                       ckpt_dir, "; ".join(changes), verb, policy)
    for key, why in LOGGED_CHANGES.items():
        before, after = source.saved.value_at(key), current.value_at(key)
        if before != after:
            logger.warning("resume from %s: %s %r -> %r from step %d (%s)", ckpt_dir, key, before, after,
                           iteration_of(ckpt_dir) or 0, why)
    return changes


def schedule_on_resume(current: RunConfig, source: VerifiedCheckpoint | None) -> RunConfig:
    """The run config a start trains with: unchanged for a fresh start or ``init_from``; for a resume, the
    policy applied (CheckpointError under ``refuse``, log lines otherwise) and, under ``checkpoint``, the
    checkpoint's data schedules in place of this run's."""
    if source is None or source.weights_only:
        return current
    _apply_policy(source, current)
    if current.checkpoint.lr_schedule_on_resume != "checkpoint":
        return current
    # the checkpoint's batch-size and masking-rate schedules; its LR schedule comes from the scheduler state
    return replace_sections(current, {key: source.saved.value_at(key) for key in DATA_SCHEDULE_FIELDS})
