"""k-nearest-neighbour probes on frozen features: the paper's second probe, beside the linear one.

A linear probe can learn to read a feature that is there but badly scaled; a k-NN probe cannot, so it
measures how the embedding space itself is organised (DINO and the CrossBERT paper report both). The
rule, with nothing fitted and no hyper-parameter searched:

- cosine similarity between each test row and every train row (rows L2-normalised, one matmul per
  block of test rows, so memory stays ``block x n_train``);
- the ``k`` most similar train rows vote: classification takes the most frequent label (a tie goes to
  the smallest label, as scikit-learn's ``KNeighborsClassifier`` with uniform weights breaks it);
  regression (STS-B) takes the mean of their targets (``KNeighborsRegressor``);
- the task's own metrics score the predictions, as for the linear probe.

Features are the probe inputs the linear probe gets (the recipe's pooling and whitening; sentence
pairs combined as ``[a, b, |a-b|, a*b]``), so the two probes differ only in the read-out.
"""

from __future__ import annotations

import numpy as np

from megatron_crossbert.evaluation.probing.linear_probes import ProbeResult
from megatron_crossbert.evaluation.tasks.metrics import compute_metrics, task_score
from megatron_crossbert.evaluation.tasks.data import TaskSpec

DEFAULT_K = 10
"""Neighbours per vote (the paper's k-NN probe uses a small fixed k; 10 is DINO's and SentEval's order)."""

_BLOCK = 1024


def _unit_rows(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(norms > 0, norms, 1.0)


def nearest_neighbours(x_train: np.ndarray, x_test: np.ndarray, k: int) -> np.ndarray:
    """``[n_test, k]`` indices of the most cosine-similar train rows, most similar first (ties: lower index)."""
    if not 1 <= k <= len(x_train):
        raise ValueError(f"k={k} neighbours need 1 <= k <= {len(x_train)} train rows")
    train = _unit_rows(x_train)
    test = _unit_rows(x_test)
    out = np.empty((len(test), k), dtype=np.int64)
    for start in range(0, len(test), _BLOCK):
        distance = 1.0 - test[start:start + _BLOCK] @ train.T
        order = np.argsort(distance, axis=1, kind="stable")
        out[start:start + _BLOCK] = order[:, :k]
    return out


def knn_predict(x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray, k: int,
                regression: bool) -> np.ndarray:
    """Predictions for ``x_test``: the neighbours' mean target (regression) or their majority label."""
    y_train = np.asarray(y_train)
    votes = y_train[nearest_neighbours(x_train, x_test, k)]
    if regression:
        return votes.astype(np.float64).mean(axis=1)
    labels, coded = np.unique(votes, return_inverse=True)
    counts = np.zeros((len(votes), len(labels)), dtype=np.int64)
    np.add.at(counts, (np.repeat(np.arange(len(votes)), k), coded.reshape(-1)), 1)
    return labels[counts.argmax(axis=1)]  # argmax takes the first maximum: the smallest label on a tie


def knn_probe(spec: TaskSpec, x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray, y_test: np.ndarray,
              k: int = DEFAULT_K) -> ProbeResult:
    """The task's metrics of the k-NN read-out (``k`` capped at the train rows)."""
    k = min(k, len(x_train))
    predictions = knn_predict(x_train, y_train, x_test, k, regression=spec.kind == "regression")
    metrics = compute_metrics(spec.metrics, y_test, predictions)
    return ProbeResult(metrics=metrics, score=task_score(metrics, spec.metrics), chosen={"k": float(k)},
                       n_train=len(y_train), n_test=len(y_test))
