"""PCA whitening of frozen features (``evaluation/whitening.py``): the math against scikit-learn, and
why it is CrossBERT's default: on features where a few huge directions hide a low-variance signal, the
standardised linear probe fails and the whitened one recovers the signal."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.decomposition import PCA

from megatron_crossbert.evaluation.probing.linear_probes import pair_features, probe_features
from megatron_crossbert.evaluation.tasks.data import TaskSpec
from megatron_crossbert.evaluation.whitening import fit_whitening

STS = TaskSpec("toy-sts", "regression", ("spearman", "pearson"), is_pair=True)


def _correlated(n: int, h: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, h)) @ rng.normal(size=(h, h)) * rng.uniform(0.1, 10, size=h) + 3.0


def test_whitening_equals_sklearn_pca_whiten_up_to_component_signs():
    x = _correlated(400, 6, seed=0)
    ours = fit_whitening(x)(x).astype(np.float64)
    theirs = PCA(whiten=True).fit_transform(x)
    signs = np.sign((ours * theirs).sum(axis=0))
    np.testing.assert_allclose(ours, theirs * signs, atol=1e-4)
    np.testing.assert_allclose(np.cov(ours.T), np.eye(6), atol=1e-4)


def test_new_rows_go_through_the_map_fitted_on_others():
    fit, new = _correlated(300, 5, seed=1), _correlated(50, 5, seed=2)
    pca = PCA(whiten=True).fit(fit)
    ours, theirs = fit_whitening(fit)(new).astype(np.float64), pca.transform(new)
    np.testing.assert_allclose(np.abs(ours), np.abs(theirs), rtol=1e-4, atol=1e-4)


def test_one_map_per_layer():
    layers = np.stack([_correlated(200, 4, seed=3), _correlated(200, 4, seed=4)])
    together = fit_whitening(layers)(layers)
    for i in range(2):
        np.testing.assert_allclose(together[i], fit_whitening(layers[i])(layers[i]), atol=1e-5)


def test_fewer_rows_than_dimensions_stay_finite():
    x = _correlated(5, 16, seed=5)
    assert np.isfinite(fit_whitening(x)(x)).all()
    with pytest.raises(ValueError, match="two feature rows"):
        fit_whitening(x[:1])


def _dominated_pairs(n: int, rng: np.random.Generator, rotation: np.ndarray) -> tuple[np.ndarray, ...]:
    """Sentence pairs whose similarity lives in 8 low-variance directions (std 0.1) while 3 directions of std
    100 carry unrelated noise, all mixed by one rotation, like CrossBERT's pooled features."""
    signal_a = rng.normal(size=(n, 8))
    rho = rng.uniform(-1, 1, size=(n, 1))
    signal_b = rho * signal_a + np.sqrt(1 - rho ** 2) * rng.normal(size=(n, 8))
    embed = lambda signal: np.hstack([0.1 * signal, 100 * rng.normal(size=(n, 3))]) @ rotation  # noqa: E731
    return embed(signal_a), embed(signal_b), (signal_a * signal_b).sum(axis=1)


def test_raw_probe_fails_and_whitened_probe_recovers_a_low_variance_signal():
    rng = np.random.default_rng(0)
    rotation = np.linalg.qr(rng.normal(size=(11, 11)))[0]
    a_train, b_train, y_train = _dominated_pairs(3000, rng, rotation)
    a_test, b_test, y_test = _dominated_pairs(1000, rng, rotation)
    raw = probe_features(STS, pair_features(a_train, b_train), y_train, pair_features(a_test, b_test), y_test)
    white = fit_whitening(np.concatenate([a_train, b_train]))
    whitened = probe_features(STS, pair_features(white(a_train), white(b_train)), y_train,
                              pair_features(white(a_test), white(b_test)), y_test)
    assert raw.score < 30.0
    assert whitened.score > 80.0


@pytest.mark.parametrize("arch, whiten", [("crossbert", True), ("bert", True), ("mlm", True)])
def test_an_exports_architecture_sets_the_whitening_default(tmp_path, arch, whiten):
    from megatron_crossbert.config import ModelConfig, RunConfig
    from megatron_crossbert.convert.artifacts import RUN_CONFIG_COPY
    from megatron_crossbert.evaluation.recipe import describe, resolve_recipe

    encoder = "modern" if arch == "mlm" else "classic"
    RunConfig(model=ModelConfig(arch=arch, encoder=encoder)).save_json(tmp_path / RUN_CONFIG_COPY)
    recipe = resolve_recipe(tmp_path)
    assert (recipe.whiten, recipe.whiten_source) == (whiten, f"architecture {arch}")
    assert ("PCA-whitened" in describe(recipe)) == whiten
    flagged = resolve_recipe(tmp_path, whiten=not whiten)
    assert (flagged.whiten, flagged.whiten_source) == (not whiten, "flag")


def test_a_model_that_is_not_our_export_is_not_whitened_unless_asked(tmp_path):
    from megatron_crossbert.evaluation.recipe import resolve_recipe

    assert (resolve_recipe(tmp_path).whiten, resolve_recipe(tmp_path).whiten_source) == (False, "default")
    assert resolve_recipe(None, whiten=True).whiten
