"""The on-disk cache of pooled text features, shared by the probes and the MTEB encoder.

Encoding is the expensive part of every evaluation (minutes on CPU), fitting a probe or an mteb
evaluator is cheap, so pooled features are stored as ``.npy`` under ``<cache>/features/``, keyed by
whatever decides them (the caller's ``FeatureCache.key(...)``: model identity, task, split, pooling,
max tokens, the texts' digest). The texts' digest is part of every key, so subsets and edited data
files never hit a stale entry. Writes are atomic (``fsutil.atomic_open``) so concurrent runs sharing
a cache never read half a file; a write that fails (a full disk) is a warning naming the file, since the
features it would have kept are already computed.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from megatron_crossbert.fsutil import atomic_open
from megatron_crossbert.outputs import no_space_in_chain

logger = logging.getLogger(__name__)


def texts_digest(texts: Sequence[str]) -> str:
    digest = hashlib.sha256()
    for text in texts:
        digest.update(text.encode("utf-8", "surrogatepass"))
        digest.update(b"\x00")
    return digest.hexdigest()[:24]


class FeatureCache:
    """A directory of ``<key>.npy`` arrays; ``root=None`` disables caching (everything recomputed)."""

    def __init__(self, root: str | Path | None) -> None:
        self.root = None if root is None else Path(root) / "features"

    @staticmethod
    def key(**parts: object) -> str:
        blob = json.dumps(parts, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:32]

    def get_or_compute(self, key: str, compute: Callable[[], np.ndarray]) -> np.ndarray:
        if self.root is None:
            return compute()
        path = self.root / f"{key}.npy"
        if path.is_file():
            return np.load(path)
        array = compute()
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            with atomic_open(path, "wb") as handle:
                np.save(handle, array)
        except OSError as err:  # the features are computed: an unwritable cache costs a rerun, not this run
            logger.warning("%s: not cached (%s); the next run encodes these texts again", path,
                           "no space left on device" if no_space_in_chain(err) else err)
        return array
