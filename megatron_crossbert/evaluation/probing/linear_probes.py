"""Linear probes on frozen features (scikit-learn).

- Classification: standardise, then L2 logistic regression with ``C`` picked by stratified k-fold
  cross-validation on the TRAIN split only (the test split is never seen until scoring).
- Regression (STS-B): standardise, then ridge with ``alpha`` picked by efficient leave-one-out CV.
- Sentence pairs are embedded one side at a time and combined as ``[a, b, |a-b|, a*b]`` (the
  InferSent/SentEval recipe), so the probe stays linear in the encoder's sentence embeddings.

The CV selection score is the task's headline metric (e.g. Matthews for CoLA), so C is tuned for
what is reported.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from sklearn.linear_model import LogisticRegression, RidgeCV
from sklearn.metrics import make_scorer
from sklearn.model_selection import GridSearchCV, StratifiedKFold
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import StandardScaler

from megatron_crossbert.evaluation.tasks.metrics import METRICS, compute_metrics, task_score
from megatron_crossbert.evaluation.tasks.data import TaskSpec

DEFAULT_CS = (0.001, 0.01, 0.1, 1.0, 10.0)
DEFAULT_ALPHAS = tuple(10.0 ** k for k in range(-2, 6))


@dataclass
class ProbeConfig:
    """Probe hyper-parameter grids and CV settings; small defaults keep a 2-core run in minutes."""

    cs: tuple[float, ...] = DEFAULT_CS
    alphas: tuple[float, ...] = DEFAULT_ALPHAS
    folds: int = 3
    max_iter: int = 1000
    seed: int = 0


@dataclass
class ProbeResult:
    """Test metrics (0-100), the task score, the chosen regularisation and the data sizes."""

    metrics: dict[str, float]
    score: float
    chosen: dict[str, float] = field(default_factory=dict)
    n_train: int = 0
    n_test: int = 0


def pair_features(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``[a, b, |a-b|, a*b]`` along the last axis (works for [n, h] or [layers, n, h])."""
    return np.concatenate([a, b, np.abs(a - b), a * b], axis=-1)


def _cv_folds(y: np.ndarray, folds: int, seed: int) -> StratifiedKFold:
    """At most as many folds as the rarest class has members (and at least 2)."""
    smallest = int(np.unique(y, return_counts=True)[1].min())
    return StratifiedKFold(n_splits=max(2, min(folds, smallest)), shuffle=True, random_state=seed)


def check_train_classes(spec: TaskSpec, y_train: np.ndarray) -> None:
    """Cross-validating C splits the train rows into at least two stratified folds, which needs some class with
    two rows (a class with one row is left out of one fold's training part, as scikit-learn allows); a split
    where every class has a single row is refused naming the task, instead of scikit-learn's ``n_splits``
    message."""
    classes, counts = np.unique(y_train, return_counts=True)
    if len(classes) and counts.max() < 2:
        raise ValueError(f"task {spec.name}: its train split has {len(y_train)} rows, one of each class, too few "
                         "to cross-validate the probe (give at least 2 train rows of every class: more data, or a "
                         "larger --max-train)")


def fit_classifier(x: np.ndarray, y: np.ndarray, metric: str = "accuracy",
                   config: ProbeConfig | None = None) -> Pipeline:
    """Standardise + logistic regression, C by CV on (x, y) with ``metric`` as the selection score."""
    config = config or ProbeConfig()
    pipe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=config.max_iter))
    if len(np.unique(y)) < 2:
        raise ValueError("cannot train a classifier probe on a train split with a single class")
    search = GridSearchCV(pipe, {"logisticregression__C": list(config.cs)},
                          scoring=make_scorer(METRICS[metric]), cv=_cv_folds(y, config.folds, config.seed),
                          refit=True, n_jobs=1)
    search.fit(x, y)
    return search.best_estimator_


def fit_regressor(x: np.ndarray, y: np.ndarray, config: ProbeConfig | None = None) -> Pipeline:
    """Standardise + ridge, alpha by efficient leave-one-out CV (closed form, so cheap)."""
    config = config or ProbeConfig()
    pipe = make_pipeline(StandardScaler(), RidgeCV(alphas=list(config.alphas)))
    return pipe.fit(x, y)


def _chosen(model: Pipeline) -> dict[str, float]:
    last = model[-1]
    if hasattr(last, "alpha_"):
        return {"alpha": float(last.alpha_)}
    return {"C": float(last.C)}


def probe_features(spec: TaskSpec, x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray,
                   y_test: np.ndarray, config: ProbeConfig | None = None) -> ProbeResult:
    """Fit the task's probe on train features and score it on test features with the task's metrics."""
    if spec.kind == "regression":
        model = fit_regressor(x_train, y_train, config)
    else:
        check_train_classes(spec, y_train)
        model = fit_classifier(x_train, y_train, metric=spec.metrics[0], config=config)
    metrics = compute_metrics(spec.metrics, y_test, model.predict(x_test))
    return ProbeResult(metrics=metrics, score=task_score(metrics, spec.metrics), chosen=_chosen(model),
                       n_train=len(y_train), n_test=len(y_test))


def task_features(spec: TaskSpec, text_feats: np.ndarray, pair_feats: np.ndarray | None) -> np.ndarray:
    """The probe input for a task: the sentence embedding, or the pair combination for two-sentence tasks."""
    if spec.is_pair:
        if pair_feats is None:
            raise ValueError(f"task {spec.name} is a pair task but no second-sentence features were given")
        return pair_features(text_feats, pair_feats)
    return text_feats
