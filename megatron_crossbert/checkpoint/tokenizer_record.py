"""Refuse to mix tokenizers: checkpoints and datasets carry the fingerprint of the one they used.

Two WordPiece vocabularies of the same size fit the same embedding table, so nothing else would
notice that id 517 now means a different token. Every checkpoint gets ``checkpoint.tokenizer.json``
beside its ``run_config.json``: the record ``data.fingerprint.dataset_record`` builds, named and read
like the ``<prefix>.tokenizer.json`` preprocessing writes beside a dataset (the record format stays
in ``data.fingerprint`` because preprocessing, below this package, writes it). Resume and init_from
compare the checkpoint's record with this run's ``data.tokenizer`` (once, in ``checkpoint.verify``);
training compares every dataset prefix's record. A mismatch is an error naming both fingerprints and
files unless ``checkpoint.allow_tokenizer_change`` is set. A dataset without a record (written by
another tool) or a checkpoint without one (older version) warns, once per start. Runs without
``data.tokenizer`` (synthetic ids) have nothing to compare and record nothing.
"""

from __future__ import annotations

import functools
import json
import logging
from pathlib import Path
from typing import Literal

from megatron_crossbert.checkpoint.errors import CheckpointError
from megatron_crossbert.config import RunConfig
from megatron_crossbert.data.fingerprint import dataset_record, read_dataset_record, record_path
from megatron_crossbert.fsutil import atomic_write_text

logger = logging.getLogger(__name__)

RECORD_PREFIX = "checkpoint"
"""A checkpoint's record is ``<iter dir>/checkpoint.tokenizer.json`` (``data.fingerprint.record_path``)."""
RECORD_FILE = record_path(RECORD_PREFIX).name

TokenizerVerdict = Literal["same", "changed (allowed)", "unrecorded", "no tokenizer", "not checked"]
"""What verifying a checkpoint found about its tokenizer: the same as this run's; a different one
that ``checkpoint.allow_tokenizer_change`` let through; none recorded in the checkpoint (older
version); none configured for this run (synthetic ids); or not compared (export and evaluation,
which have no run tokenizer of their own)."""


class TokenizerMismatchError(ValueError):
    """A dataset was tokenized with a different tokenizer than this run's."""


@functools.lru_cache(maxsize=4)
def _record_for(tokenizer_path: str) -> dict:
    from megatron_crossbert.data.tokenizer import load_tokenizer

    return dataset_record(load_tokenizer(tokenizer_path), tokenizer_path)


def run_record(run_cfg: RunConfig) -> dict | None:
    """This run's tokenizer record (fingerprint, path, vocab, special ids); None without data.tokenizer."""
    return _record_for(run_cfg.data.tokenizer) if run_cfg.data.tokenizer else None


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


def _mismatch(what: str, saved: dict, saved_file: Path, current: dict) -> str:
    return (f"{saved_file}: {what} used tokenizer {saved['fingerprint']} ({saved.get('tokenizer')}), but this "
            f"run's data.tokenizer is {current['fingerprint']} ({current['tokenizer']}); the same ids would "
            f"mean different tokens. Set --allow-tokenizer-change (checkpoint.allow_tokenizer_change) "
            f"only if the change is deliberate")


def check_checkpoint_tokenizer(ckpt_dir: Path, run_cfg: RunConfig) -> TokenizerVerdict:
    """Resume / init_from: CheckpointError when the checkpoint's tokenizer is not this run's."""
    current = run_record(run_cfg)
    if current is None:
        return "no tokenizer"
    saved = read_dataset_record(ckpt_dir / RECORD_PREFIX)
    if saved is None:
        logger.warning("%s has no %s (saved by an older version): the tokenizer cannot be checked",
                       ckpt_dir, record_path(ckpt_dir / RECORD_PREFIX).name)
        return "unrecorded"
    if saved["fingerprint"] == current["fingerprint"]:
        return "same"
    message = _mismatch("the checkpoint", saved, record_path(ckpt_dir / RECORD_PREFIX), current)
    if not run_cfg.checkpoint.allow_tokenizer_change:
        raise CheckpointError(message)
    logger.warning("allowed by checkpoint.allow_tokenizer_change: %s", message)
    return "changed (allowed)"


def _prefixes(run_cfg: RunConfig) -> list[str]:
    """Every dataset prefix of the run, each once (a blend may name one prefix twice)."""
    from megatron_crossbert.data.indexed import resolve_prefix

    if run_cfg.data.static_masks:
        return [run_cfg.data.static_masks]
    return list(dict.fromkeys(resolve_prefix(prefix) for prefix in run_cfg.data.blend()[0]))


def check_dataset_tokenizers(run_cfg: RunConfig) -> None:
    """Training: TokenizerMismatchError when a dataset's record names another tokenizer; warn without one."""
    current = run_record(run_cfg)
    if current is None or not run_cfg.data.data_path and not run_cfg.data.static_masks:
        return
    for prefix in _prefixes(run_cfg):
        saved = read_dataset_record(prefix)
        if saved is None:
            logger.warning("dataset %s has no tokenizer record (%s): written by another tool? Its "
                           "tokenizer cannot be checked", prefix, record_path(prefix))
        elif saved["fingerprint"] != current["fingerprint"]:
            message = _mismatch("this dataset", saved, record_path(prefix), current)
            if not run_cfg.checkpoint.allow_tokenizer_change:
                raise TokenizerMismatchError(message)
            logger.warning("allowed by checkpoint.allow_tokenizer_change: %s", message)
