"""Probe inputs of a task's splits, through the feature cache (``evaluation.feature_cache``).

Features are computed once per (model identity, task, split, side of the pair, pooling, layers,
max_len, exact texts), so ``--max-train`` subsets and edited data files never hit a stale entry;
sentence pairs are combined into the probe's input here (``linear_probes.task_features``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from megatron_crossbert.evaluation.encoders import HFEncoder, Layers, Pooling
from megatron_crossbert.evaluation.feature_cache import FeatureCache, texts_digest
from megatron_crossbert.evaluation.probing.linear_probes import task_features
from megatron_crossbert.evaluation.probing.tasks import ProbeTask, Split


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
