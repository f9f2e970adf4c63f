"""Verify a checkpoint once, before anything is built, and let the result drive the load.

megatron-core's idiom (``verify_checkpoint_and_load_strategy``, then load): the directory is
resolved once, its files' contents checked once against ``checksums.json`` (``checkpoint.verify``),
``run_config.json`` parsed once, what the checkpoint is (model shape, positions, optimizer format) checked
once, and everything a later step needs travels in one frozen :class:`VerifiedCheckpoint`. What it was
trained on (its tokenizer and data records) is the training start's next step (``checkpoint.manager``),
compared beside the datasets' own records.
Resume and ``init_from`` (``checkpoint.start_guard.choose_start``), HF export (``convert``) and
evaluation take that object and never resolve the reference again; the loads in ``checkpoint.load``
refuse one whose contents were not checked. A training start checks the contents once the process
group exists (:func:`verify_contents`, ``collective=True``), so every rank hashes only its share.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from pathlib import Path

from megatron_crossbert.checkpoint.checksums import ContentsVerdict, check_contents
from megatron_crossbert.checkpoint.context_extension import NO_EXTENSION, extension_of, resume_mismatches
from megatron_crossbert.checkpoint.directories import load_saved_config, resolve_checkpoint_dir
from megatron_crossbert.checkpoint.errors import CheckpointError
from megatron_crossbert.checkpoint.optimizer_format import SavedOptimizer, read_saved_optimizer, reshard_refusal
from megatron_crossbert.checkpoint.pins import ReaderPin, pin_resolved, reading, vanished
from megatron_crossbert.config import RunConfig

logger = logging.getLogger(__name__)

MODEL_FIELDS = ("arch", "encoder", "vocab_size", "hidden_size", "num_layers", "num_attention_heads",
                "ffn_hidden_size", "max_position_embeddings", "decoder_num_layers", "decoder_hidden_size",
                "decoder_num_attention_heads", "decoder_ffn_hidden_size", "decoder_position_embedding", "decoder_cross_attention_only",
                "decoder_context_position_embedding")
"""``ModelConfig`` fields that fix parameter shapes or the meaning of positions: a mismatch makes a resume wrong.
Compared as they take effect (``ModelConfig.resolved``: an unset width is its default), named by their key."""


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
    weights_only: bool
    """True when only the ``"model"`` entry is read (init_from, export, evaluation)."""
    reference: str
    """The reference as the user gave it (a root, an ``iter_*`` directory), for messages."""
    contents: ContentsVerdict = "pending"
    """What the checksum check found (``checksums.ContentsVerdict``); loads refuse ``"pending"``."""
    optimizer_impl: str | None = None
    """The Adam implementation that wrote its optimizer state (``optimizer_format.SavedOptimizer``), read
    with the layout when a resume is verified; None: not recorded, or a weights-only use."""
    grown_tables: dict[str, int] = field(default_factory=dict)
    """``init_from`` into a longer context: ``{state-dict key suffix: saved rows}`` of the learned position
    tables the load grows (``context_extension.ContextExtension``); empty otherwise."""
    pin: ReaderPin | None = field(default=None, compare=False, repr=False)
    """The reader's pin on ``directory`` (``pins``): pruning keeps it while this object (or a copy made
    by ``dataclasses.replace``) lives or until :meth:`release`. None: saved before pins, or no flock."""

    def release(self) -> None:
        """Done reading: a run writing into this directory may prune it again."""
        if self.pin is not None:
            self.pin.release()

    def __post_init__(self) -> None:
        if self.weights_only and self.sharding_type is not None:
            raise ValueError(f"{self.directory}: a weights-only use reads no optimizer state, "
                             f"so it has no sharding type (got {self.sharding_type!r})")


def config_mismatches(saved: RunConfig, current: RunConfig, *, weights_only: bool = False) -> list[str]:
    """Human-readable model differences that make ``saved`` unusable for ``current`` (the data,
    ``seq_length`` included, is ``data_record``'s to compare on a resume).

    ``init_from`` (``weights_only``) may extend the context: its position table and RoPE options are
    ``context_extension.extension_of``'s to judge; a full resume may change none of them.
    """
    fields = [name for name in MODEL_FIELDS if not (weights_only and name == "max_position_embeddings")]
    diffs = [f"model.{name}: checkpoint {saved.model.resolved(name)!r} vs run {current.model.resolved(name)!r}"
             for name in fields if saved.model.resolved(name) != current.model.resolved(name)]
    return diffs if weights_only else diffs + resume_mismatches(saved, current)


def verify_contents(source: VerifiedCheckpoint, mode: str, *, collective: bool = False) -> VerifiedCheckpoint:
    """``source`` with its files checked against their recorded hashes (``checkpoint.verify``:
    ``full`` or ``off``); a no-op when already checked. Collective when ``collective``."""
    if source.contents != "pending":
        return source
    return replace(source, contents=check_contents(source.directory, mode, collective))


def _pin(ckpt_dir: Path) -> ReaderPin | None:
    """Pin a resolved checkpoint before its files are read (``pins``); CheckpointError if it is gone."""
    pin = ReaderPin.take(ckpt_dir)
    if pin is False:
        raise vanished(ckpt_dir)
    return pin


def verify_checkpoint(ckpt_dir: Path, current: RunConfig, *, weights_only: bool = False,
                      reference: str | Path | None = None) -> VerifiedCheckpoint:
    """Check what a resolved checkpoint directory is against this run; CheckpointError naming every problem.

    The checkpoint is pinned first (a run writing into its directory does not prune it while the
    returned object lives, ``pins``). Its files' contents are left ``"pending"``: a training start checks
    them once its process group exists, each rank its share (:func:`verify_contents`), and every load
    refuses a pending one. Both uses check the model shape; a full resume (``weights_only=False``) that the
    stored optimizer state can be read at this TP/PP, ``init_from`` what its context extension may do
    (``context_extension``). What the checkpoint was trained on (tokenizer, data) and what a resume does
    with changed schedules are the front door's next steps (``manager``).
    """
    pin = _pin(ckpt_dir)
    saved = load_saved_config(ckpt_dir)
    diffs = config_mismatches(saved, current, weights_only=weights_only)
    extension = extension_of(saved, current) if weights_only else NO_EXTENSION
    optimizer = SavedOptimizer() if weights_only else read_saved_optimizer(ckpt_dir, saved)
    diffs += extension.refusals
    if not weights_only:
        diffs += reshard_refusal(ckpt_dir, saved, optimizer.sharding_type, current)
    if diffs:
        raise CheckpointError(f"checkpoint {ckpt_dir} is incompatible with this run:\n  " + "\n  ".join(diffs))
    for change in extension.changes:
        logger.warning("init_from %s: %s", ckpt_dir, change)
    # the layout a resume requests: none unless this run uses the distributed optimizer
    sharding_type = optimizer.sharding_type if current.parallel.use_distributed_optimizer else None
    return VerifiedCheckpoint(ckpt_dir, saved, sharding_type, weights_only,
                              str(ckpt_dir if reference is None else reference), "pending", optimizer.impl,
                              extension.grown_tables, pin)


def open_checkpoint(reference: str | Path, verify: str = "full") -> VerifiedCheckpoint:
    """Resolve a root or ``iter_*`` directory, check its files (``verify``: full or off) and read its
    config once, for a weights-only reader with no run of its own to compare against (HF export,
    evaluation). It never takes the save directory's run lock: a live run's checkpoints are readable,
    and pinned (``pins``): its pruning keeps this one while the returned object lives. A checkpoint
    removed before the pin took hold (or, unpinned, while it was read) is named as such."""
    ckpt_dir, pin = pin_resolved(Path(reference), resolve_checkpoint_dir)
    with reading(ckpt_dir):
        contents = check_contents(ckpt_dir, verify)
        saved = load_saved_config(ckpt_dir)
    return VerifiedCheckpoint(ckpt_dir, saved, None, True, str(reference), contents, pin=pin)
