"""Refuse to mix tokenizers: checkpoints and datasets carry the fingerprint of the one they used.

Two WordPiece vocabularies of the same size fit the same embedding table, so nothing else would
notice that id 517 now means a different token. Every checkpoint gets ``checkpoint.tokenizer.json``
beside its ``run_config.json``: the record ``data.tokenizers.fingerprint.dataset_record`` builds, named and
read like the ``<prefix>.tokenizer.json`` preprocessing writes beside a dataset (the record format stays
in ``data.tokenizers.fingerprint`` because preprocessing, below this package, writes it). A training start
compares the checkpoint's record (resume and init_from) and every dataset prefix's with this run's
``data.tokenizer``, all in one pass (:func:`check_tokenizers`, called by ``checkpoint.manager``). A
mismatch is an error naming both fingerprints and files unless ``checkpoint.allow_tokenizer_change`` is set. A dataset without a record (written by
another tool) or a checkpoint without one (older version) warns, once per start. Runs without
``data.tokenizer`` (synthetic ids) have nothing to compare and record nothing.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from megatron_crossbert.checkpoint.errors import CheckpointError
from megatron_crossbert.config import RunConfig
from megatron_crossbert.data.tokenizers.fingerprint import (
    dataset_record, read_dataset_record, record_mismatch, record_path,
)
from megatron_crossbert.fsutil import atomic_write_text

logger = logging.getLogger(__name__)

RECORD_PREFIX = "checkpoint"
"""A checkpoint's record is ``<iter dir>/checkpoint.tokenizer.json`` (``data.tokenizers.fingerprint.record_path``)."""
RECORD_FILE = record_path(RECORD_PREFIX).name

_ALLOW = "Set --allow-tokenizer-change (checkpoint.allow_tokenizer_change) only if the change is deliberate"
"""How a refused tokenizer change is let through, said at the end of every refusal."""


class TokenizerMismatchError(ValueError):
    """A dataset was tokenized with a different tokenizer than this run's."""


def run_record(run_cfg: RunConfig) -> dict | None:
    """This run's tokenizer record (fingerprint, path, vocab, special ids); None without data.tokenizer."""
    from megatron_crossbert.data.tokenizers.tokenizer import run_tokenizer

    tokenizer_path = run_cfg.data.tokenizer
    return dataset_record(run_tokenizer(tokenizer_path), tokenizer_path) if tokenizer_path else None


def write_checkpoint_record(ckpt_dir: Path, run_cfg: RunConfig) -> None:
    """Rank 0, before run_config.json marks the save complete. A tokenizer the data pipeline cannot
    load (an HF import's, say) is logged and left unrecorded, like a checkpoint of an older version
    (resume then warns); a failed write (a full disk) is raised."""
    try:
        record = run_record(run_cfg)
    except (ValueError, OSError) as err:
        logger.warning("%s: no tokenizer record written (%s)", ckpt_dir, err)
        return
    if record is not None:
        atomic_write_text(record_path(ckpt_dir / RECORD_PREFIX), json.dumps(record, indent=2) + "\n")


def _prefixes(run_cfg: RunConfig) -> list[str]:
    """Every dataset prefix of the run, each once (a blend may name one prefix twice); none for synthetic ids."""
    from megatron_crossbert.data.indexed.reader import resolve_prefix

    if run_cfg.data.static_masks:
        return [run_cfg.data.static_masks]
    if not run_cfg.data.data_path:
        return []
    return list(dict.fromkeys(resolve_prefix(prefix) for prefix in run_cfg.data.blend()[0]))


def check_tokenizers(run_cfg: RunConfig, checkpoint: Path | None = None) -> None:
    """Every start: the checkpoint it starts from (a resume or ``init_from``; ``checkpoint``) and every
    dataset of the run were tokenized with this run's ``data.tokenizer``: CheckpointError for the
    checkpoint's record, TokenizerMismatchError for a dataset's, unless ``checkpoint.allow_tokenizer_change``
    (then logged); a missing record warns. The run's tokenizer is loaded once, and each record read once."""
    if not run_cfg.data.tokenizer:
        return  # synthetic ids: nothing to compare
    sources = [(p, "this dataset", TokenizerMismatchError) for p in _prefixes(run_cfg)]
    if checkpoint is not None:
        sources.insert(0, (checkpoint / RECORD_PREFIX, "the checkpoint", CheckpointError))
    current = run_record(run_cfg)
    for prefix, what, error in sources:
        saved, saved_file = read_dataset_record(prefix), record_path(prefix)
        mismatch = None if saved is None else record_mismatch(saved, saved_file, what, current)
        if saved is None and error is CheckpointError:
            logger.warning("%s has no %s (saved by an older version): the tokenizer cannot be checked",
                           checkpoint, RECORD_FILE)
        elif saved is None:
            logger.warning("dataset %s has no tokenizer record (%s): written by another tool? Its "
                           "tokenizer cannot be checked", prefix, saved_file)
        elif mismatch and not run_cfg.checkpoint.allow_tokenizer_change:
            raise error(f"{mismatch}. {_ALLOW}")
        elif mismatch:
            logger.warning("allowed by checkpoint.allow_tokenizer_change: %s. %s", mismatch, _ALLOW)
