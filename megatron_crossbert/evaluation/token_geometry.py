"""Where the variance of an encoder's token states lies: on the word, on the position, on one direction.

A mean-pooled sentence feature can only be as spread out as the token states it averages. When the pooled features
of an encoder have a low effective rank (``feature_stats``), these numbers say why:

- **token effective rank** and **first principal share**: whether the token states themselves sit on a few
  directions (the collapse is in the encoder), or only their mean does (it is in the pooling);
- **identity share**: the share of the token states' variance explained by which token it is (between-token-id
  variance over the total): high for an encoder whose states carry the words;
- **position share**: the share explained by the absolute position in the text: an encoder that spends its
  width on position gives mean-pooled features that mostly encode the text's length;
- **pooled length correlation**: |Pearson r| between the pooled features' first principal score and the text's
  token count, which names that case directly.

Shares are ``1 - within-group sum of squares / total sum of squares`` (an ANOVA R²), so they lie in [0, 1] and
a group of one token explains its own variance: read the identity share on texts with repeated tokens (a few
hundred sentences).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .feature_stats import effective_rank, sample_rows

MAX_TOKENS = 5000
"""Token states the rank and the principal direction are computed on (a seeded sample of rows)."""
TEXTS = 600
"""Texts a measurement reads by default: enough for token ids to repeat, a few seconds of encoding."""


@dataclass(frozen=True)
class TokenGeometry:
    """Where the variance of a set of texts' token states lies (``token_geometry``); JSON-able with ``asdict``."""

    token_effective_rank: float
    """``feature_stats.effective_rank`` of the token states (a sample of ``MAX_TOKENS`` rows)."""
    pc1_share: float
    """Share of the token states' variance on their first principal direction."""
    identity_share: float
    """Share of the variance explained by the token id."""
    position_share: float
    """Share of the variance explained by the absolute position in the text."""
    pooled_length_r: float
    """|Pearson r| between the mean-pooled features' first principal score and each text's token count."""
    n_texts: int
    n_tokens: int
    dim: int


def explained_share(x: np.ndarray, labels: np.ndarray) -> float:
    """The share of the total sum of squares of ``x [n, dim]`` explained by the group means of ``labels [n]``
    (0.0 when ``x`` has no variance)."""
    x = np.asarray(x, dtype=np.float64)
    total = float(np.square(x - x.mean(axis=0)).sum())
    if total <= 0.0:
        return 0.0
    _, inverse, counts = np.unique(labels, return_inverse=True, return_counts=True)
    sums = np.zeros((counts.size, x.shape[1]))
    np.add.at(sums, inverse, x)
    means = sums / counts[:, None]
    return float(1.0 - np.square(x - means[inverse]).sum() / total)


def _first_component(x: np.ndarray) -> tuple[np.ndarray, float]:
    """Scores of the rows of ``x`` on its first principal direction, and that direction's share of variance."""
    centred = np.asarray(x, dtype=np.float64) - x.mean(axis=0)
    _, singular, vt = np.linalg.svd(centred, full_matrices=False)
    power = np.square(singular)
    return centred @ vt[0], float(power[0] / power.sum()) if power.sum() > 0 else 0.0


def _abs_corr(a: np.ndarray, b: np.ndarray) -> float:
    if np.std(a) == 0 or np.std(b) == 0:
        return 0.0
    return float(abs(np.corrcoef(a, b)[0, 1]))


def token_geometry(states: Sequence[np.ndarray], ids: Sequence[np.ndarray], seed: int = 0) -> TokenGeometry:
    """``TokenGeometry`` of each text's token states ``[len_i, dim]`` and its token ids ``[len_i]``."""
    if len(states) != len(ids) or any(len(s) != len(i) for s, i in zip(states, ids)):
        raise ValueError("token_geometry needs one id per token state, text by text")
    tokens = np.concatenate(states)
    token_ids = np.concatenate(ids)
    positions = np.concatenate([np.arange(len(s)) for s in states])
    sample = sample_rows(tokens, MAX_TOKENS, seed)
    _, pc1_share = _first_component(sample)
    pooled = np.stack([s.mean(axis=0) for s in states])
    pooled_scores, _ = _first_component(pooled)
    return TokenGeometry(token_effective_rank=effective_rank(sample), pc1_share=pc1_share,
                         identity_share=explained_share(tokens, token_ids),
                         position_share=explained_share(tokens, positions),
                         pooled_length_r=_abs_corr(pooled_scores, np.array([len(s) for s in states], dtype=float)),
                         n_texts=len(states), n_tokens=int(tokens.shape[0]), dim=int(tokens.shape[1]))


def sample_texts(tasks: Sequence, size: int = TEXTS, seed: int = 0) -> list[str]:
    """A seeded sample of ``size`` distinct test texts (first sentences) across probe ``tasks``, in sorted order,
    so two models measured with the same tasks and seed read the same texts."""
    texts = sorted({text for task in tasks for text in task.test.texts})
    return sorted(random.Random(seed).sample(texts, min(size, len(texts))))


def encoder_geometry(encoder, texts: Sequence[str]) -> TokenGeometry:
    """``token_geometry`` of ``texts`` as ``encoder`` (an ``HFEncoder``) reads them: its last-layer token states and
    the ids of the tokens they belong to."""
    return token_geometry(encoder.token_states(texts, desc="token geometry"), encoder.token_ids(texts))
