"""Mask generation for CrossBERT (complementary views) and the BERT baseline (80/10/10).

Both functions are pure numpy functions of ``(seed, index)`` plus shape arguments: the random
generator is ``np.random.default_rng([seed, index])``, so a resumed run, a different number of
DataLoader workers, or the static masks written by ``crossbert-preprocess --emit-mask-pairs`` all
produce bit-identical masks for the same global sample index. No torch import: this module runs in
preprocessing workers and DataLoader workers alike.

CrossBERT views
---------------
One random permutation ``perm`` of the free (non-pinned) positions is drawn per sample:

* view A shows ``pinned + perm[:Lv - len(pinned)]``;
* view B (``complementary=True``) shows ``perm[Lv:2*Lv]``: a uniformly random Lv-subset of the
  complement of A's visible set, so the two visible sets are disjoint. At ``2*Lv == L`` (r = 0.5
  with even L) B's visible set is exactly A's target set.

``Lv = round((1 - r) * L)`` with Python's ``round``; ``visible_length`` below is the only owner of
that rule (``MaskingConfig.visible_length`` delegates here) so the model, the config and the data
agree on shapes.

The sample builders that apply these rules with a ``MaskingConfig`` (``crossbert_sample``,
``mlm_sample``) are in ``arch_rules``: ``config`` imports this module, so this one imports nothing
of the project.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class MaskViews:
    """Visible and target positions of every view of one packed sequence.

    ``visible``: int64 ``[num_views, Lv]``, sorted ascending, positions in ``[0, L)``.
    ``targets``: int64 ``[num_views, L - Lv]``, sorted ascending; the complement of ``visible[v]``.
    """

    visible: np.ndarray
    targets: np.ndarray

    @property
    def num_views(self) -> int:
        return int(self.visible.shape[0])


@dataclass(frozen=True)
class TokenIds:
    """The token ids MLM masking needs from the tokenizer."""

    mask_id: int
    """Id written at the 80% of selected positions."""
    vocab_size: int
    """Random replacements are drawn from ``[0, vocab_size)`` minus the specials."""
    special_ids: tuple[int, ...]
    """Never selected for prediction and never drawn as a random replacement."""


def visible_length(seq_length: int, mask_ratio: float) -> int:
    """``Lv = round((1 - r) * L)``: the encoder's input length for every view (the one owner of the rule)."""
    return int(round((1.0 - mask_ratio) * seq_length))


def check_view_shape(seq_length: int, mask_ratio: float, complementary: bool) -> int:
    """Lv for this shape, or ValueError when the views cannot be drawn (checked at config time too)."""
    if seq_length < 2:
        raise ValueError(f"seq_length must be >= 2, got {seq_length}")
    if not 0.0 < mask_ratio < 1.0:
        raise ValueError(f"mask_ratio must be in (0, 1), got {mask_ratio}")
    lv = visible_length(seq_length, mask_ratio)
    if not 1 <= lv < seq_length:
        raise ValueError(f"mask_ratio={mask_ratio} leaves {lv} visible of {seq_length} positions; "
                         "need at least one visible and one target position")
    if complementary and 2 * lv > seq_length:
        raise ValueError(f"complementary views need disjoint visible sets, i.e. 2*Lv <= L, but "
                         f"Lv={lv}, L={seq_length} (mask_ratio={mask_ratio}); use a mask_ratio >= 0.5 "
                         "(and an even L at exactly 0.5)")
    return lv


def _check_view_args(seq_length: int, mask_ratio: float, complementary: bool,
                     pinned: np.ndarray) -> int:
    """Validate arguments and return Lv; raises ValueError with the offending values."""
    lv = check_view_shape(seq_length, mask_ratio, complementary)
    if pinned.size:
        if complementary:
            raise ValueError("pinned positions are visible in every view, which breaks the disjoint "
                             "visible sets of complementary views; pin only with complementary=False")
        if pinned.min() < 0 or pinned.max() >= seq_length or np.unique(pinned).size != pinned.size:
            raise ValueError(f"pinned positions must be unique and in [0, {seq_length}), got {pinned.tolist()}")
        if pinned.size > lv:
            raise ValueError(f"{pinned.size} pinned positions do not fit in Lv={lv} visible slots")
    return lv


def _complement(visible: np.ndarray, seq_length: int) -> np.ndarray:
    keep = np.ones(seq_length, dtype=bool)
    keep[visible] = False
    return np.flatnonzero(keep).astype(np.int64)


def complementary_views(seed: int, index: int, seq_length: int, mask_ratio: float,
                        complementary: bool = True, pinned: Sequence[int] = ()) -> MaskViews:
    """Draw the visible/target positions of the 1 or 2 views of sample ``index``.

    Deterministic in ``(seed, index)``; see the module docstring for the construction. ``pinned``
    positions (e.g. ``[0]`` for [CLS]) are always visible and are only allowed for a single view.
    """
    pinned_arr = np.asarray(sorted(int(p) for p in pinned), dtype=np.int64)
    lv = _check_view_args(seq_length, mask_ratio, complementary, pinned_arr)
    rng = np.random.default_rng([int(seed), int(index)])
    free = _complement(pinned_arr, seq_length) if pinned_arr.size else np.arange(seq_length, dtype=np.int64)
    perm = rng.permutation(free)
    n_free = lv - pinned_arr.size
    views = [np.concatenate([pinned_arr, perm[:n_free]])]
    if complementary:
        views.append(perm[lv:2 * lv])
    visible = np.sort(np.stack(views), axis=1).astype(np.int64)
    targets = np.stack([_complement(v, seq_length) for v in visible])
    return MaskViews(visible=visible, targets=targets)


def _random_non_special(rng: np.random.Generator, count: int, vocab_size: int,
                        specials: np.ndarray) -> np.ndarray:
    """Uniform ids in ``[0, vocab_size)`` that are not special: draw from the shrunken range and
    shift each draw past every special id at or below it (specials sorted ascending)."""
    draws = rng.integers(0, vocab_size - specials.size, size=count, dtype=np.int64)
    for special in specials:
        draws += draws >= special
    return draws


def bert_mask(seed: int, index: int, tokens: np.ndarray, *, mask_prob: float, replace_mask: float,
              replace_random: float, mask_id: int, vocab_size: int,
              special_ids: Sequence[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """BERT masking of one sequence: returns ``(masked_tokens, labels, loss_mask)``, each ``[L]``.

    Exactly ``max(1, round(mask_prob * n))`` of the ``n`` non-special positions are selected (none
    if every position is special). Of those, a ``replace_mask`` fraction (in expectation) becomes
    ``mask_id``, ``replace_random`` a random non-special id, the rest stay unchanged. ``labels``
    holds the original ids everywhere; ``loss_mask`` (float32) is 1 on selected positions only.
    """
    if not (0.0 < mask_prob < 1.0 and replace_mask >= 0 and replace_random >= 0
            and replace_mask + replace_random <= 1.0):
        raise ValueError("need 0 < mask_prob < 1 and replace_mask + replace_random <= 1")
    tokens = np.asarray(tokens, dtype=np.int64)
    specials = np.unique(np.asarray([s for s in special_ids if 0 <= s < vocab_size], dtype=np.int64))
    rng = np.random.default_rng([int(seed), int(index)])
    candidates = np.flatnonzero(~np.isin(tokens, specials))
    count = min(candidates.size, max(1, int(round(mask_prob * candidates.size)))) if candidates.size else 0
    selected = np.sort(rng.choice(candidates, size=count, replace=False)) if count else candidates[:0]
    action = rng.random(count)
    masked = tokens.copy()
    masked[selected[action < replace_mask]] = mask_id
    rand_pos = selected[(action >= replace_mask) & (action < replace_mask + replace_random)]
    masked[rand_pos] = _random_non_special(rng, rand_pos.size, vocab_size, specials)
    loss_mask = np.zeros(tokens.shape, dtype=np.float32)
    loss_mask[selected] = 1.0
    return masked, tokens.copy(), loss_mask
