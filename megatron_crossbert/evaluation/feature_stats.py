"""How spread out pooled sentence features are: effective rank and mean pairwise cosine.

A frozen encoder whose features lie on a few directions (a low effective rank) or all point the same way (a
mean pairwise cosine near 1) gives a raw linear probe or a cosine similarity little to read, whatever the
encoder learned; whitening undoes both. Every probe report carries these two numbers, so a raw score can be
read against the geometry of the features it came from, and two architectures compared like for like.

- **Effective rank** (Roy & Vetterli, 2007): ``exp`` of the Shannon entropy of the singular values of the
  centred feature matrix, normalised to sum to 1. It is ``k`` for ``k`` equal singular values and 1 for a
  rank-one matrix; it never exceeds ``min(n - 1, dim)``.
- **Mean pairwise cosine**: the mean cosine similarity of distinct rows (off-diagonal), uncentred: what a
  cosine-similarity benchmark (STS) sees before any whitening.

Both are computed on a fixed, seeded sample of rows (``FEATURE_STATS_SAMPLE``), so the numbers of two
checkpoints probed on the same texts come from the same sentences.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FEATURE_STATS_SAMPLE = 2000
"""Rows the statistics are computed on (all of them when fewer): the SVD of a 2000 x h matrix costs well
under a second at the widths probed here."""
_TINY = 1e-12


def effective_rank(features: np.ndarray) -> float:
    """Roy & Vetterli's effective rank of ``features [n, dim]`` after centring (0.0 when every row is equal)."""
    x = np.asarray(features, dtype=np.float64)
    x = x - x.mean(axis=0, keepdims=True)
    singular = np.linalg.svd(x, compute_uv=False)
    total = singular.sum()
    if total <= _TINY:
        return 0.0
    p = singular[singular > 0] / total
    return float(np.exp(-(p * np.log(p)).sum()))


def mean_cosine(features: np.ndarray) -> float:
    """The mean cosine similarity over distinct pairs of rows of ``features [n, dim]`` (uncentred; a zero row
    counts as orthogonal to every other). NaN with fewer than two rows."""
    x = np.asarray(features, dtype=np.float64)
    n = x.shape[0]
    if n < 2:
        return float("nan")
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    unit = x / np.maximum(norms, _TINY)
    total = float(np.square(unit.sum(axis=0)).sum())    # sum over all ordered pairs, the diagonal included
    diagonal = float(np.square(unit).sum())
    return (total - diagonal) / (n * (n - 1))


@dataclass(frozen=True)
class FeatureStats:
    """The geometry of one set of pooled features (``feature_stats``); JSON-able with ``dataclasses.asdict``."""

    effective_rank: float
    """``effective_rank`` of the sample (at most ``min(n - 1, dim)``)."""
    mean_cosine: float
    """``mean_cosine`` of the sample (uncentred, off-diagonal)."""
    n: int
    """Rows the statistics were computed on."""
    dim: int
    """Feature width."""


def sample_rows(features: np.ndarray, size: int = FEATURE_STATS_SAMPLE, seed: int = 0) -> np.ndarray:
    """At most ``size`` rows of ``features``, drawn without replacement by ``seed`` (all of them, in order,
    when there are no more): the same texts give the same sample whatever the model."""
    n = features.shape[0]
    if n <= size:
        return features
    rows = np.sort(np.random.default_rng(seed).choice(n, size=size, replace=False))
    return features[rows]


def feature_stats(features: np.ndarray, size: int = FEATURE_STATS_SAMPLE, seed: int = 0) -> FeatureStats:
    """``FeatureStats`` of a seeded sample of at most ``size`` rows of ``features [n, dim]``."""
    if features.ndim != 2:
        raise ValueError(f"feature_stats needs a [n, dim] matrix, got shape {features.shape}")
    sample = sample_rows(features, size, seed)
    return FeatureStats(effective_rank=effective_rank(sample), mean_cosine=mean_cosine(sample),
                        n=int(sample.shape[0]), dim=int(sample.shape[1]))
