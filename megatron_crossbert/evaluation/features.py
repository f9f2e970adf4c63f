"""Feature extraction for probe tasks, cached on disk.

Encoding is the expensive part of probing (minutes on CPU), fitting probes is cheap, so features are
computed once per (model identity, task, split, side of the pair, pooling, layers, max_len, exact
texts) and stored as ``.npy`` under ``<cache>/features/``. The texts' digest is part of the key, so
``--max-train`` subsets and edited data files never hit a stale entry. Writes are atomic
(``fsutil.atomic_open``) so concurrent runs sharing a cache never read half a file.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from megatron_crossbert.evaluation.encoders import HFEncoder, Layers, Pooling
from megatron_crossbert.evaluation.probes import task_features
from megatron_crossbert.evaluation.tasks import ProbeTask, Split
from megatron_crossbert.fsutil import atomic_open


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
        self.root.mkdir(parents=True, exist_ok=True)
        with atomic_open(path, "wb") as handle:
            np.save(handle, array)
        return array


@dataclass
class TaskFeatures:
    """Probe inputs for one task, ``[n_layers, n, d]`` per split (pairs already combined)."""

    train: np.ndarray
    test: np.ndarray


def _side_features(encoder: HFEncoder, cache: FeatureCache, texts: list[str], *, task: str, split: str,
                   side: str, pooling: Pooling, layers: Layers) -> np.ndarray:
    key = cache.key(model=encoder.identity, task=task, split=split, side=side, pooling=pooling,
                    layers=layers, max_len=encoder.max_len, texts=texts_digest(texts))
    return cache.get_or_compute(key, lambda: encoder.embed(
        texts, pooling=pooling, layers=layers, desc=f"{task}/{split}/{side}"))


def split_features(encoder: HFEncoder, cache: FeatureCache, task: ProbeTask, split_name: str, split: Split,
                   pooling: Pooling, layers: Layers) -> np.ndarray:
    """Embed one split (both sides for pair tasks) and build the probe input."""
    common = dict(task=task.spec.name, split=split_name, pooling=pooling, layers=layers)
    text = _side_features(encoder, cache, split.texts, side="text", **common)
    pair = None
    if split.pairs is not None:
        pair = _side_features(encoder, cache, split.pairs, side="pair", **common)
    return task_features(task.spec, text, pair)


def extract_task_features(encoder: HFEncoder, task: ProbeTask, *, pooling: Pooling = "mean",
                          layers: Layers = "last", cache: FeatureCache | None = None) -> TaskFeatures:
    """Features for the task's train and test splits (from the cache when present)."""
    cache = cache or FeatureCache(None)
    return TaskFeatures(train=split_features(encoder, cache, task, "train", task.train, pooling, layers),
                        test=split_features(encoder, cache, task, "test", task.test, pooling, layers))
