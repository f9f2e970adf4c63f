"""GLUE metrics and score aggregation.

Metrics follow the GLUE definitions: accuracy; binary F1 of the positive class (MRPC, QQP);
Matthews correlation (CoLA); Pearson and Spearman correlation (STS-B). All are reported on a
0-100 scale, like the GLUE leaderboard. A task's score is the mean of its metrics (MRPC: F1 and
accuracy; STS-B: Pearson and Spearman) and the GLUE-style average is the mean task score over the
GLUE tasks that were run (a partial GLUE average when some are missing, named as such in reports).
"""

from __future__ import annotations

from typing import Callable, Iterable, Mapping

import numpy as np
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef


def _corr(fn: Callable, y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """A correlation that is 0 for a constant *prediction* (a probe that learned nothing), so averages stay
    defined. Constant *gold* makes it undefined: NaN, which the reports turn into a failed task (the
    readers refuse such files: ``evaluation/tasks/gold.py``; only a tiny subsample can still get here)."""
    if np.std(y_true) == 0:
        return float("nan")
    if np.std(y_pred) == 0:
        return 0.0
    return float(fn(y_true, y_pred)[0])


METRICS: dict[str, Callable[[np.ndarray, np.ndarray], float]] = {
    "accuracy": lambda t, p: float(accuracy_score(t, p)),
    "f1": lambda t, p: float(f1_score(t, p, pos_label=1, average="binary", zero_division=0)),
    "macro_f1": lambda t, p: float(f1_score(t, p, average="macro", zero_division=0)),
    "matthews": lambda t, p: float(matthews_corrcoef(t, p)),
    "pearson": lambda t, p: _corr(pearsonr, t, p),
    "spearman": lambda t, p: _corr(spearmanr, t, p),
}


def compute_metrics(names: Iterable[str], y_true: np.ndarray, y_pred: np.ndarray) -> dict[str, float]:
    """``{metric: 100 * value}`` for each requested metric name."""
    unknown = [n for n in names if n not in METRICS]
    if unknown:
        raise KeyError(f"unknown metrics {unknown}; known: {sorted(METRICS)}")
    return {name: 100.0 * METRICS[name](np.asarray(y_true), np.asarray(y_pred)) for name in names}


def task_score(metrics: Mapping[str, float], names: Iterable[str]) -> float:
    """The GLUE per-task score: the plain mean of the task's metrics."""
    values = [metrics[n] for n in names]
    return float(np.mean(values))


def average_scores(scores: Mapping[str, float | None]) -> float | None:
    """Mean of the finite task scores, or None when there are none (so a report never shows a fake 0 or a
    NaN); a task whose score is None or not finite failed, and its report says so."""
    finite = [v for v in scores.values() if v is not None and np.isfinite(v)]
    return float(np.mean(finite)) if finite else None


def finite_or_none(value: float | None) -> float | None:
    """``value``, or None when it is not a finite number (reports hold no NaN: strict JSON, no fake average)."""
    return value if value is not None and np.isfinite(value) else None
