"""Tokenizer fingerprints: which exact tokenizer produced a dataset or trained a checkpoint.

Two tokenizers with the same vocabulary size can map the same id to different pieces. Nothing in a
``.bin`` file or a checkpoint's tensors shows the difference, so a run that mixes them trains on
garbage without a word. A fingerprint makes the mismatch checkable:

- it hashes the serialized ``tokenizer.json`` (vocabulary, merges, normalizer, pre-tokenizer) and
  the special-token ids the pipeline uses, so it changes when any id's meaning changes;
- preprocessing writes it beside the ``.bin/.idx`` pair in ``<prefix>.tokenizer.json``
  (:func:`write_dataset_record`), with the pair's content fingerprint (``content_identity.dataset_fingerprint``),
  which every training start compares (``checkpoint.data_record.check_dataset_contents``); checkpoints keep the same record in ``checkpoint.tokenizer.json``
  (``checkpoint.tokenizer_record``, which also compares the records at the start of a run).

Datasets written by other tools (Megatron-LM) have no record: :func:`read_dataset_record` returns
``None`` for them, and callers warn instead of failing.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING

from megatron_crossbert.fsutil import atomic_write_text

if TYPE_CHECKING:  # annotations only: checkpoint code reads records without loading the tokenizers library
    from megatron_crossbert.data.tokenizers.tokenizer import Tokenizer

RECORD_SUFFIX = ".tokenizer.json"
"""Appended to a dataset path prefix (``out/corpus_text_document``) to name its record."""


def tokenizer_fingerprint(tokenizer: Tokenizer) -> str:
    """``sha256:<16 hex>`` over the tokenizer's canonical JSON and its special-token ids."""
    digest = hashlib.sha256()
    digest.update(tokenizer.backend.to_str().encode("utf-8"))
    digest.update(json.dumps(tokenizer.special_ids, sort_keys=True).encode("utf-8"))
    return "sha256:" + digest.hexdigest()[:16]


def record_path(path_prefix: str | Path) -> Path:
    return Path(f"{path_prefix}{RECORD_SUFFIX}")


def dataset_record(tokenizer: Tokenizer, source: str | Path) -> dict:
    """What a dataset records about its tokenizer: fingerprint, where it came from, vocab and ids."""
    return {"fingerprint": tokenizer_fingerprint(tokenizer), "tokenizer": str(source),
            "vocab_size": tokenizer.vocab_size, "special_ids": dict(tokenizer.special_ids)}


def record_mismatch(saved: dict, saved_file: str | Path, what: str, current: dict) -> str | None:
    """One line when ``saved`` (``what``'s record, read from ``saved_file``) names another tokenizer than
    the record ``current``; None when both name the same one."""
    if saved["fingerprint"] == current["fingerprint"]:
        return None
    return (f"{saved_file}: {what} used tokenizer {saved['fingerprint']} ({saved.get('tokenizer')}), but this "
            f"run's data.tokenizer is {current['fingerprint']} ({current['tokenizer']}); the same ids would "
            f"mean different tokens")


def write_dataset_record(path_prefix: str | Path, tokenizer: Tokenizer, source: str | Path,
                         content: str | None = None) -> Path:
    """Write ``<prefix>.tokenizer.json`` atomically (readers never see half a record); ``content``: the
    ``.bin``/``.idx`` pair's fingerprint, when the writer knows it."""
    return save_dataset_record(path_prefix, dataset_record(tokenizer, source) | ({"content": content} if content else {}))


def save_dataset_record(path_prefix: str | Path, record: dict) -> Path:
    """Write a record (made here, or read from the datasets a merge or blend joins) beside ``path_prefix``."""
    path = record_path(path_prefix)
    atomic_write_text(path, json.dumps(record, indent=2) + "\n")
    return path


def read_dataset_record(path_prefix: str | Path) -> dict | None:
    """The record beside a dataset, or ``None`` when the dataset has none (written by another tool).

    Raises ``ValueError`` naming the file when a record exists but is not a valid one.
    """
    path = record_path(path_prefix)
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a valid tokenizer record ({exc})") from None
    if not isinstance(record, dict) or not str(record.get("fingerprint", "")).startswith("sha256:"):
        raise ValueError(f"{path}: tokenizer record has no 'fingerprint' field")
    return record
