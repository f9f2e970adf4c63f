"""Effective rank and mean pairwise cosine on matrices whose answers are known by construction."""

from __future__ import annotations

import numpy as np
import pytest

from megatron_crossbert.evaluation.feature_stats import effective_rank, feature_stats, mean_cosine, sample_rows


def _orthogonal_rows(n: int, dim: int, rank: int, seed: int = 0) -> np.ndarray:
    """``n`` rows with ``rank`` equal singular values after centring: a balanced +-1 design on ``rank`` axes."""
    rng = np.random.default_rng(seed)
    basis = np.linalg.qr(rng.normal(size=(dim, rank)))[0].T          # rank orthonormal directions
    signs = np.tile(np.array([1.0, -1.0]), n // 2)                    # mean 0 on every axis
    design = np.stack([rng.permutation(signs) for _ in range(rank)], axis=1)
    design = np.linalg.qr(design)[0] * np.sqrt(n)                     # orthogonal columns, same norm
    return design @ basis


@pytest.mark.parametrize("rank", [1, 3, 8])
def test_equal_singular_values_give_their_count_as_effective_rank(rank):
    x = _orthogonal_rows(64, 16, rank)
    assert effective_rank(x) == pytest.approx(rank, rel=1e-6)


def test_effective_rank_ignores_a_common_offset_and_is_zero_for_identical_rows():
    x = _orthogonal_rows(64, 16, 4)
    assert effective_rank(x + 100.0) == pytest.approx(4, rel=1e-6)   # centred first
    assert effective_rank(np.ones((10, 5))) == 0.0


def test_unequal_singular_values_give_the_exp_entropy_of_their_shares():
    x = np.zeros((4, 3))
    x[0, 0], x[1, 0], x[2, 1], x[3, 1] = 3.0, -3.0, 1.0, -1.0          # centred; singular values 3*sqrt2, sqrt2
    shares = np.array([0.75, 0.25])
    assert effective_rank(x) == pytest.approx(np.exp(-(shares * np.log(shares)).sum()))


def test_mean_cosine_is_uncentred_and_off_diagonal():
    assert mean_cosine(np.tile([[2.0, 0.0, 0.0]], (5, 1))) == pytest.approx(1.0)   # one direction
    assert mean_cosine(np.eye(4)) == pytest.approx(0.0)                              # orthogonal rows
    assert mean_cosine(np.array([[1.0, 0.0], [-3.0, 0.0]])) == pytest.approx(-1.0)
    # three rows: cos(a,b)=1, cos(a,c)=cos(b,c)=0 -> mean over 3 pairs = 1/3
    assert mean_cosine(np.array([[1.0, 0.0], [5.0, 0.0], [0.0, 2.0]])) == pytest.approx(1 / 3)
    assert np.isnan(mean_cosine(np.ones((1, 3))))


def test_a_sample_is_seeded_and_bounded_and_the_stats_say_its_size():
    x = np.random.default_rng(1).normal(size=(50, 6))
    assert sample_rows(x, 100) is x
    first, again = sample_rows(x, 20, seed=3), sample_rows(x, 20, seed=3)
    assert first.shape == (20, 6) and np.array_equal(first, again)
    assert not np.array_equal(first, sample_rows(x, 20, seed=4))
    stats = feature_stats(x, size=20, seed=3)
    assert (stats.n, stats.dim) == (20, 6) and 1.0 < stats.effective_rank <= 6
    assert stats.effective_rank == pytest.approx(effective_rank(first))
    with pytest.raises(ValueError, match="feature_stats needs a"):
        feature_stats(np.ones(3))
