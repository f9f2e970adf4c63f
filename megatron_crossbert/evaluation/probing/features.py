"""Probe inputs of a task's splits, through the embedder's feature cache (``Embedder.features``).

Features are computed once per (model identity, task, split, side of the pair, pooling, layers,
max_len, exact texts), so ``--max-train`` subsets and edited data files never hit a stale entry;
sentence pairs are combined into the probe's input here (``linear_probes.task_features``).

The cache holds pooled backbone features; the model's own modules after pooling are applied here, so a
sentence-transformers directory is read as ``SentenceTransformer(dir).encode`` reads it: its ``Dense`` modules
(a pooler trained on the frozen backbone, ``evaluation/pooler``), then, with ``whiten``, PCA whitening
(``evaluation/whitening.py``: one map per layer fitted on the train split's sentences, both sides of a pair, so
the test split and its labels never shape it), then its ``Normalize``: the order ``crossbert-mteb`` uses.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from megatron_crossbert.evaluation.dense_head import apply_dense, l2_normalize
from megatron_crossbert.evaluation.embedder import Embedder
from megatron_crossbert.evaluation.encoders import Layers
from megatron_crossbert.evaluation.probing.linear_probes import task_features
from megatron_crossbert.evaluation.recipe import EmbeddingRecipe
from megatron_crossbert.evaluation.tasks.data import ProbeTask, Split, TaskSpec
from megatron_crossbert.evaluation.whitening import fit_whitening

Sides = tuple[np.ndarray, np.ndarray | None]
"""One split's pooled features: its texts and (pair tasks) second sentences, ``[n_layers, n, h]`` each."""


@dataclass
class TaskFeatures:
    """Probe inputs for one task, ``[n_layers, n, d]`` per split (pairs already combined)."""

    train: np.ndarray
    test: np.ndarray


def split_sides(embedder: Embedder, task: ProbeTask, split_name: str, split: Split, layers: Layers) -> Sides:
    """Pooled features of one split's texts and (pair tasks) second sentences, through the embedder's cache."""
    def side(texts: list[str], name: str) -> np.ndarray:
        parts = {"task": task.spec.name, "split": split_name, "side": name, "layers": layers}
        return embedder.features(texts, parts, layers=layers, desc=f"{task.spec.name}/{split_name}/{name}")

    return side(split.texts, "text"), None if split.pairs is None else side(split.pairs, "pair")


def extract_task_features(embedder: Embedder, task: ProbeTask, *, layers: Layers = "last",
                          whiten: bool = False) -> TaskFeatures:
    """Probe inputs for the task's train and test splits (sentence features from the cache when present),
    read through the embedder's recipe: its modules after pooling (``probe_inputs``)."""
    return probe_inputs(task.spec, *task_sides(embedder, task, layers=layers), whiten, embedder.readout)


def task_sides(embedder: Embedder, task: ProbeTask, *, layers: Layers = "last") -> tuple[Sides, Sides]:
    """The pooled backbone features of the task's train and test splits (through the cache): what every
    readout of the task (``probe_inputs``) and the feature statistics are computed from, encoded once."""
    return (split_sides(embedder, task, "train", task.train, layers),
            split_sides(embedder, task, "test", task.test, layers))


def sentence_rows(*splits: Sides) -> np.ndarray:
    """Every sentence's last-layer pooled features ``[n, h]`` of the given splits (both sides of a pair)."""
    return np.concatenate([side[-1] for sides in splits for side in sides if side is not None], axis=0)


def _each_side(fn, sides: Sides) -> Sides:
    return tuple(None if side is None else fn(side) for side in sides)


def probe_inputs(spec: TaskSpec, train: Sides, test: Sides, whiten: bool = False,
                 head: EmbeddingRecipe | None = None) -> TaskFeatures:
    """Pair-combined probe inputs from each split's (text, pair) pooled features: ``head``'s Dense modules, then
    with ``whiten`` one PCA map per layer fitted on the train sentences (both sides), then ``head``'s L2 norm
    (the one rule for every probe path)."""
    if head is not None and head.dense:
        train, test = (_each_side(lambda x: apply_dense(head.dense, x), sides) for sides in (train, test))
    if whiten:
        whitening = fit_whitening(np.concatenate([side for side in train if side is not None], axis=-2),
                                  f"task {spec.name}: --whiten (fitted on its train split)")
        train, test = (_each_side(whitening, sides) for sides in (train, test))
    if head is not None and head.normalize:
        train, test = (_each_side(l2_normalize, sides) for sides in (train, test))
    return TaskFeatures(train=task_features(spec, *train), test=task_features(spec, *test))
