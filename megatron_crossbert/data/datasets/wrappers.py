"""Documents that already carry [CLS]/[SEP]/eod wrappers (Megatron-LM-written data) and stripping them.

Megatron-LM's ``preprocess_data.py`` with a BERT-style HF tokenizer writes each document as
``[CLS] doc [SEP]`` plus an eod token. Packed as they are, samples would read
``[CLS] [CLS] ... [SEP] [SEP] [SEP] [CLS] ...``, and [CLS]/[SEP] would become reconstruction
targets. Our layout (:mod:`megatron_crossbert.data.datasets.packing`) places [CLS] and [SEP] itself, so
wrappers found in the data are removed before packing.

Detection (:func:`detect_wrappers`) looks at the first token and the last two tokens of up to
``sample`` documents spread evenly over the dataset. The decision is one pair for the whole
dataset, ``lead`` (0 or 1: a leading [CLS]) and ``trail`` (0-2 trailing tokens out of
{[SEP], eod, [CLS]}), so every document is cut the same way:

- ``auto``: strip a position only when *every* sampled document has a wrapper token there (a
  dataset of plain text keeps all its tokens);
- ``always``: strip the pattern most sampled documents show (for data with a few exceptions);
- ``never``: keep every token (the pre-0.x behaviour).

The decision is logged and goes into the dataset's cache key (``WrapperStrip.describe``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import get_args

import numpy as np

from megatron_crossbert.config import StripMode

STRIP_MODES = get_args(StripMode)


@dataclass(frozen=True)
class WrapperStrip:
    """How many tokens to drop at the start (``lead``) and end (``trail``) of every document."""

    lead: int = 0
    """0 or 1: documents start with [CLS]."""
    trail: int = 0
    """0, 1 or 2: documents end with that many of [SEP]/eod/[CLS]."""
    mode: str = "never"
    """The configured mode the decision came from."""
    evidence: str = ""
    """What the sample showed, for the log."""

    def __post_init__(self) -> None:
        if self.mode not in STRIP_MODES:
            raise ValueError(f"strip_wrapper_tokens must be one of {', '.join(STRIP_MODES)}, got {self.mode!r}")
        if self.lead not in (0, 1) or self.trail not in (0, 1, 2):
            raise ValueError(f"WrapperStrip lead must be 0/1 and trail 0-2, got {self.lead}/{self.trail}")

    @property
    def active(self) -> bool:
        return bool(self.lead or self.trail)

    def describe(self) -> str:
        """Short, stable text for the cache key."""
        return f"{self.mode}:lead={self.lead},trail={self.trail}"

    def lengths(self, doc_lengths: np.ndarray) -> np.ndarray:
        """Document lengths after stripping (never below 0)."""
        return np.maximum(np.asarray(doc_lengths, dtype=np.int64) - self.lead - self.trail, 0)


def _sample_ids(num_docs: int, sample: int) -> np.ndarray:
    return np.unique(np.linspace(0, num_docs - 1, num=min(sample, num_docs)).astype(np.int64))


def _ends(read: Callable, doc_lengths: np.ndarray, docs: np.ndarray) -> tuple[list[int], list[tuple[int, ...]]]:
    """First token and the last (up to) two tokens of each sampled non-empty document."""
    firsts, lasts = [], []
    for doc in docs:
        length = int(doc_lengths[doc])
        if length == 0:
            continue
        firsts.append(int(read(int(doc), 0, 1)[0]))
        tail = min(2, length)
        lasts.append(tuple(int(t) for t in read(int(doc), length - tail, tail)))
    return firsts, lasts


def _trail_share(lasts: list[tuple[int, ...]], k: int, wrap: set[int]) -> float:
    return float(np.mean([len(t) >= k and all(x in wrap for x in t[-k:]) for t in lasts])) if lasts else 0.0


def detect_wrappers(read: Callable, doc_lengths: np.ndarray, *, cls_id: int, sep_id: int, eod_id: int,
                    mode: str = "auto", sample: int = 1000) -> WrapperStrip:
    """Decide what to strip from ``read(doc, offset, count)``'s documents (see the module docstring)."""
    if mode == "never" or len(doc_lengths) == 0:
        return WrapperStrip(mode=mode if mode in STRIP_MODES else "invalid", evidence="not checked")
    firsts, lasts = _ends(read, doc_lengths, _sample_ids(len(doc_lengths), sample))
    if not firsts:
        return WrapperStrip(mode=mode, evidence="no non-empty documents sampled")
    need = 1.0 if mode == "auto" else 0.5
    lead_share = float(np.mean([t == cls_id for t in firsts]))
    wrap = {sep_id, eod_id, cls_id}
    shares = {k: _trail_share(lasts, k, wrap) for k in (1, 2)}
    trail = 2 if shares[2] >= need else 1 if shares[1] >= need else 0
    evidence = (f"{len(firsts)} documents sampled: {lead_share:.0%} start with [CLS], {shares[1]:.0%} end with "
                f"[SEP]/eod, {shares[2]:.0%} with two of them")
    return WrapperStrip(lead=int(lead_share >= need), trail=trail, mode=mode, evidence=evidence)


class StrippedReader:
    """``read(doc, offset, count)`` over the stripped documents (skips ``lead`` tokens). A class,
    not a closure, so datasets pickle into spawned DataLoader workers."""

    def __init__(self, read: Callable, lead: int) -> None:
        self.read = read
        self.lead = lead

    def __call__(self, doc: int, offset: int, count: int) -> np.ndarray:
        return self.read(doc, offset + self.lead, count)
