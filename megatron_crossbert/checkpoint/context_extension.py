"""Context extension (``init_from`` a shorter-context checkpoint): what may change, what is refused.

ModernBERT's recipe: train at 1024 tokens (global and local RoPE base 10000, 128-token windows), then
continue at 8192 with the global RoPE base raised to 160000 (``examples/modern-8k-extend.yaml``). RoPE
frequencies are not saved, so a new base needs no weight surgery; what has rows per position is:

- CrossBERT's learned ``decoder_position_embedding`` (``max_position_embeddings`` rows, both families):
  grown on load, the checkpoint's rows copied and the new rows kept at their fresh initialisation;
- the classic encoder's learned absolute position table: positions past it were never trained, so a
  classic checkpoint cannot be extended past its table (one line says so and what to do instead).
  Growing ``seq_length`` inside the saved table is BERT's own 128 -> 512 recipe: allowed, with a
  warning that the rows past the trained length start untrained.

A full resume must not change the meaning of positions at all: ``resume_mismatches`` lists the RoPE
and window options that differ. An ``init_from`` is decided once (:func:`extension_of`): what it refuses,
what it changes (logged) and which tables it grows travel together in one :class:`ContextExtension`.
"""

from __future__ import annotations

from dataclasses import dataclass

from megatron_crossbert.arch import get_encoder
from megatron_crossbert.config import RunConfig

POSITION_FIELDS = ("rotary_base", "local_rotary_base", "local_attention", "global_attn_every_n_layers")
"""ModelConfig fields that fix what a position means to a trained model (beyond the table sizes)."""
_NAMES = {"rotary_base": "global RoPE base", "local_rotary_base": "local RoPE base",
          "local_attention": "local attention window", "global_attn_every_n_layers": "global layer every n"}


def resume_mismatches(saved: RunConfig, current: RunConfig) -> list[str]:
    """A full resume keeps positions' meaning: every changed RoPE/window option, in the verifier's format."""
    return [f"model.{name}: checkpoint {getattr(saved.model, name)!r} vs run {getattr(current.model, name)!r} "
            f"(change it with checkpoint.init_from, not on resume)"
            for name in POSITION_FIELDS if getattr(saved.model, name) != getattr(current.model, name)]


@dataclass(frozen=True)
class ContextExtension:
    """What an ``init_from`` does with positions, decided once from the saved and the current config."""

    refusals: tuple[str, ...]
    """What it cannot do, in the verifier's format (empty: the load may go ahead)."""
    changes: tuple[str, ...]
    """Every position-related change it applies (the verifier logs them once the load is allowed)."""
    grown_tables: dict[str, int]
    """``{state-dict key suffix: saved rows}`` of the learned position tables the load grows."""


NO_EXTENSION = ContextExtension((), (), {})
"""A full resume extends nothing: positions keep their meaning (:func:`resume_mismatches`)."""


def _refusals(saved: RunConfig, current: RunConfig, learned: bool) -> list[str]:
    old, new = saved.model.max_position_embeddings, current.model.max_position_embeddings
    if new < old:
        return [f"model.max_position_embeddings: checkpoint {old} vs run {new} (a position table cannot shrink)"]
    if new > old and learned:
        return [f"classic encoder: the learned position table has {old} rows, seq_length "
                f"{current.data.seq_length} needs {new}; positions past the table were never trained (use "
                f"model.encoder=modern for context extension, or train with max_position_embeddings >= {new} "
                f"from the start)"]
    return []


def _changes(saved: RunConfig, current: RunConfig, learned: bool) -> list[str]:
    changes = [f"{_NAMES[name]} {getattr(saved.model, name)!r} -> {getattr(current.model, name)!r}"
               for name in POSITION_FIELDS if getattr(saved.model, name) != getattr(current.model, name)]
    old, new = saved.model.max_position_embeddings, current.model.max_position_embeddings
    if new > old:
        changes.append(f"max_position_embeddings {old} -> {new} (learned decoder position rows {old}..{new - 1} "
                       "start from their initialisation)")
    if current.data.seq_length > saved.data.seq_length:
        changes.append(f"seq_length {saved.data.seq_length} -> {current.data.seq_length}")
        if learned:
            changes.append(f"warning: position-table rows {saved.data.seq_length}..{current.data.seq_length - 1} "
                           "were never trained by that checkpoint")
    return changes


def extension_of(saved: RunConfig, current: RunConfig) -> ContextExtension:
    """An ``init_from``'s refusals, changes and grown tables; the encoder family (learned or rotary
    positions) is looked up once for all three."""
    learned = get_encoder(current.model.encoder).learned_positions
    old, new = saved.model.max_position_embeddings, current.model.max_position_embeddings
    grown = {"decoder_position_embedding.weight": old} if new != old and current.model.decoder_position_embedding \
        else {}
    return ContextExtension(tuple(_refusals(saved, current, learned)), tuple(_changes(saved, current, learned)), grown)
