"""PCA whitening of pooled sentence features: the frozen-feature recipe of encoders whose output is anisotropic.

Why: a CrossBERT encoder is read during pretraining only through the decoder's learned
cross-attention key/value maps, so nothing keeps its output isotropic. At the demo's scale its mean-pooled
features have an effective rank of ~5-7 of 256 and one direction holds about half the variance, and the
semantic signal sits in the low-variance directions. A per-coordinate ``StandardScaler`` does not reach them,
and neither does a raw cosine or the probe's basis-dependent pair features ``|a-b|, a*b``: both are dominated
by the few huge directions. Rotating onto the principal axes and scaling each to unit variance
(``x -> (x - mu) V diag(lambda)^-1/2``, BERT-whitening, Su et al. 2021) gives every direction the same
weight; on the demo's setting (docs/results.md) it lifts CrossBERT's STS-B probe from 39.9 to 67.8. BERT's features collapse
less (effective rank ~36) and gain too (53.4 to 63.3), so every architecture of ours is read this way.

The map is fitted on unlabelled features only (a probe's train split, or the first texts an MTEB task
encodes), never on test labels. It equals scikit-learn's ``PCA(whiten=True)`` up to the sign of each
component, with eigenvalues floored at ``EIGEN_FLOOR`` times the largest so fewer texts than dimensions
do not divide by zero. Features without variance (every text the same) have no direction to scale: the
floor would be ~0 and the map would send any other text to infinity, so the fit is refused instead, naming
what it was fitted for. Features may carry leading axes (``[layers, n, h]``): one map per leading index.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

READOUTS = ("raw", "whitened")
"""How pooled features are read: as they are (the paper's probes and MTEB) or PCA-whitened (this module).
``crossbert-probe``, ``crossbert-mteb`` and the claims study report both side by side."""
EIGEN_FLOOR = 1e-6
"""Smallest eigenvalue kept, relative to the largest (rank-deficient fits stay finite)."""
ZERO_SPREAD = 1e-5
"""A largest standard deviation below this fraction of the features' magnitude is no variance (float32
features of equal texts differ by rounding only, ~1e-7 of their size)."""


@dataclass(frozen=True)
class Whitening:
    """A fitted whitening map ``x -> (x - mean) @ matrix`` per leading index of the features it was fitted on."""

    mean: np.ndarray
    """``[..., 1, h]``: the feature mean removed first."""
    matrix: np.ndarray
    """``[..., h, h]``: principal axes (columns, by decreasing variance) divided by their standard deviation."""

    def __call__(self, features: np.ndarray) -> np.ndarray:
        """Whitened ``features`` (same shape; float32 like the encoders' output)."""
        return ((features.astype(np.float64) - self.mean) @ self.matrix).astype(np.float32)


class PerTaskWhitening:
    """One map per task for encoders that see a task's texts in several calls (mteb): fitted on the first
    features a task encodes, then reused for every later call of that task, so both sides of a pair share it."""

    def __init__(self) -> None:
        self.maps: dict[str, Whitening] = {}

    def __call__(self, task: str, features: np.ndarray) -> np.ndarray:
        if task not in self.maps:
            self.maps[task] = fit_whitening(features, f"task {task}: whitening")
        return self.maps[task](features)


def readout_of(whiten: bool) -> str:
    """The readout name of a whitening setting."""
    return READOUTS[1] if whiten else READOUTS[0]


def fit_whitening(features: np.ndarray, what: str = "whitening") -> Whitening:
    """Fit the map on ``features`` ``[..., n, h]`` (rows are texts); see the module docstring for the rule.
    ``what`` names the fit in a refusal (``task X: --whiten``)."""
    x = np.asarray(features, dtype=np.float64)
    if x.ndim < 2 or x.shape[-2] < 2:
        raise ValueError(f"{what}: needs at least two feature rows to fit on, got shape {x.shape}")
    mean = x.mean(axis=-2, keepdims=True)
    centred = x - mean
    cov = np.swapaxes(centred, -1, -2) @ centred / (x.shape[-2] - 1)
    eigvals, eigvecs = np.linalg.eigh(cov)
    eigvals, eigvecs = eigvals[..., ::-1], eigvecs[..., ::-1]
    magnitude = np.abs(x).max(axis=(-2, -1))
    if np.any(np.sqrt(np.maximum(eigvals[..., 0], 0.0)) <= ZERO_SPREAD * np.maximum(magnitude, 1e-30)):
        raise ValueError(f"{what}: the {x.shape[-2]} feature rows it is fitted on have zero variance (every text "
                         "the same?), so no direction can be scaled to unit variance; fit it on varied texts")
    floor = EIGEN_FLOOR * np.maximum(eigvals[..., :1], np.finfo(np.float64).tiny)
    scale = 1.0 / np.sqrt(np.maximum(eigvals, floor))
    return Whitening(mean=mean, matrix=eigvecs * scale[..., None, :])

