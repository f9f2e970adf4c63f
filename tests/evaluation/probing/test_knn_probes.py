"""The k-NN probe against scikit-learn's brute-force cosine neighbours on known data."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.neighbors import KNeighborsClassifier, KNeighborsRegressor

from megatron_crossbert.evaluation.probing.knn_probes import knn_predict, knn_probe, nearest_neighbours
from megatron_crossbert.evaluation.tasks.data import TaskSpec


def _blobs(seed: int = 0, n: int = 300, d: int = 16, classes: int = 4):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(classes, d)) * 2
    y = rng.integers(0, classes, size=n)
    return centres[y] + rng.normal(size=(n, d)), y


@pytest.mark.parametrize("k", [1, 5, 10])
def test_neighbours_and_votes_match_scikit_learn(k):
    x, y = _blobs()
    x_train, y_train, x_test = x[:200], y[:200], x[200:]
    ours = nearest_neighbours(x_train, x_test, k)
    reference = KNeighborsClassifier(n_neighbors=k, metric="cosine", algorithm="brute").fit(x_train, y_train)
    np.testing.assert_array_equal(np.sort(ours, axis=1), np.sort(reference.kneighbors(x_test)[1], axis=1))
    np.testing.assert_array_equal(knn_predict(x_train, y_train, x_test, k, regression=False),
                                  reference.predict(x_test))


def test_regression_is_the_neighbours_mean_as_scikit_learn():
    x, _ = _blobs(seed=1)
    target = x[:, 0] * 2 + x[:, 1]
    reference = KNeighborsRegressor(n_neighbors=7, metric="cosine", algorithm="brute").fit(x[:200], target[:200])
    np.testing.assert_allclose(knn_predict(x[:200], target[:200], x[200:], 7, regression=True),
                               reference.predict(x[200:]))


def test_a_tied_vote_goes_to_the_smallest_label():
    x_train = np.array([[1.0, 0.0], [1.0, 0.01], [0.0, 1.0]])
    # the two nearest rows of the test point carry labels 3 and 1, one vote each
    assert knn_predict(x_train, np.array([3, 1, 1]), np.array([[1.0, 0.005]]), 2, regression=False)[0] == 1


def test_the_probe_scores_with_the_tasks_metric_and_caps_k():
    x, y = _blobs(seed=2, classes=2)
    spec = TaskSpec(name="toy", kind="classification", metrics=("accuracy",))
    result = knn_probe(spec, x[:100], y[:100], x[100:], y[100:], k=5)
    expected = 100 * np.mean(knn_predict(x[:100], y[:100], x[100:], 5, regression=False) == y[100:])
    assert result.score == pytest.approx(expected) and result.chosen == {"k": 5.0}
    assert result.score > 80  # the blobs are separable: a working read-out finds them
    assert knn_probe(spec, x[:20], y[:20], x[20:], y[20:], k=50).chosen == {"k": 20.0}


def test_k_outside_the_train_rows_is_refused():
    with pytest.raises(ValueError, match="k=0"):
        nearest_neighbours(np.ones((3, 2)), np.ones((1, 2)), 0)
