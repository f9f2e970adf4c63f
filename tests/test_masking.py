"""Property tests for complementary CrossBERT views and BERT 80/10/10 masking."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from megatron_crossbert.masking import MaskViews, bert_mask, complementary_views, visible_length

SEEDS = st.integers(0, 2**31 - 1)
RATIOS = st.floats(0.5, 0.95)


def _feasible(L: int, r: float, complementary: bool) -> bool:
    lv = visible_length(L, r)
    return 1 <= lv < L and (not complementary or 2 * lv <= L)


@settings(max_examples=300, deadline=None)
@given(seed=SEEDS, index=st.integers(0, 10**9), L=st.integers(2, 1024), r=RATIOS, comp=st.booleans())
def test_views_shapes_sorted_and_complements(seed, index, L, r, comp):
    if not _feasible(L, r, comp):
        with pytest.raises(ValueError):
            complementary_views(seed, index, L, r, comp)
        return
    views = complementary_views(seed, index, L, r, comp)
    lv = visible_length(L, r)
    n_views = 2 if comp else 1
    assert isinstance(views, MaskViews) and views.num_views == n_views
    assert views.visible.shape == (n_views, lv) and views.targets.shape == (n_views, L - lv)
    assert views.visible.dtype == np.int64 and views.targets.dtype == np.int64
    for vis, tgt in zip(views.visible, views.targets):
        assert np.all(np.diff(vis) > 0) and np.all(np.diff(tgt) > 0)
        assert np.array_equal(np.sort(np.concatenate([vis, tgt])), np.arange(L))
    if comp:
        assert not set(views.visible[0]) & set(views.visible[1])
        # every position is a target in at least one view
        assert set(views.targets[0]) | set(views.targets[1]) == set(range(L))


@settings(max_examples=100, deadline=None)
@given(seed=SEEDS, index=st.integers(0, 10**6), half=st.integers(1, 512))
def test_exact_complement_at_half(seed, index, half):
    L = 2 * half
    views = complementary_views(seed, index, L, 0.5)
    assert np.array_equal(views.visible[1], views.targets[0])
    assert np.array_equal(views.visible[0], views.targets[1])


@settings(max_examples=100, deadline=None)
@given(seed=SEEDS, index=st.integers(0, 10**6), L=st.integers(4, 512), r=RATIOS)
def test_deterministic_in_seed_and_index(seed, index, L, r):
    if not _feasible(L, r, True):
        return
    a = complementary_views(seed, index, L, r)
    b = complementary_views(seed, index, L, r)
    assert np.array_equal(a.visible, b.visible) and np.array_equal(a.targets, b.targets)


def test_different_indices_differ():
    a = complementary_views(1, 0, 128, 0.5).visible
    b = complementary_views(1, 1, 128, 0.5).visible
    c = complementary_views(2, 0, 128, 0.5).visible
    assert not np.array_equal(a, b) and not np.array_equal(a, c)


@settings(max_examples=100, deadline=None)
@given(seed=SEEDS, L=st.integers(4, 512), r=RATIOS, data=st.data())
def test_pinned_positions_always_visible(seed, L, r, data):
    lv = visible_length(L, r)
    if not 1 <= lv < L:
        return
    pinned = data.draw(st.lists(st.integers(0, L - 1), unique=True, max_size=min(lv, 3)))
    views = complementary_views(seed, 3, L, r, complementary=False, pinned=pinned)
    assert set(pinned) <= set(views.visible[0].tolist())
    assert views.visible.shape == (1, lv)


def test_pinned_requires_single_view_and_valid_positions():
    with pytest.raises(ValueError, match="complementary"):
        complementary_views(0, 0, 16, 0.5, complementary=True, pinned=[0])
    with pytest.raises(ValueError):
        complementary_views(0, 0, 16, 0.5, complementary=False, pinned=[16])
    with pytest.raises(ValueError):
        complementary_views(0, 0, 16, 0.5, complementary=False, pinned=[1, 1])


def test_marginals_are_uniform():
    """Each position is visible in view A with probability Lv/L (no positional bias)."""
    L, counts = 32, np.zeros(32)
    for i in range(2000):
        counts[complementary_views(7, i, L, 0.75).visible[0]] += 1
    freq = counts / 2000
    assert np.allclose(freq, 0.25, atol=0.05)


SPECIALS = (0, 1, 2, 3, 4, 5)


@settings(max_examples=200, deadline=None)
@given(seed=SEEDS, index=st.integers(0, 10**6), L=st.integers(1, 512), vocab=st.integers(8, 5000),
       data=st.data())
def test_bert_mask_properties(seed, index, L, vocab, data):
    tokens = np.asarray(data.draw(st.lists(st.integers(0, vocab - 1), min_size=L, max_size=L)), dtype=np.int64)
    kwargs = dict(mask_prob=0.15, replace_mask=0.8, replace_random=0.1, mask_id=3, vocab_size=vocab,
                  special_ids=SPECIALS)
    masked, labels, loss_mask = bert_mask(seed, index, tokens, **kwargs)
    assert masked.shape == labels.shape == loss_mask.shape == (L,)
    assert loss_mask.dtype == np.float32 and labels.dtype == np.int64
    assert np.array_equal(labels, tokens)
    special = np.isin(tokens, SPECIALS)
    assert not np.any(loss_mask[special]), "special ids are never selected"
    n = int((~special).sum())
    assert int(loss_mask.sum()) == (min(n, max(1, round(0.15 * n))) if n else 0)
    changed = masked != tokens
    assert not np.any(changed & (loss_mask == 0)), "only selected positions change"
    replaced = masked[changed & (masked != 3)]
    assert not np.any(np.isin(replaced, SPECIALS)) and np.all(replaced < vocab)
    again = bert_mask(seed, index, tokens, **kwargs)
    assert all(np.array_equal(x, y) for x, y in zip((masked, labels, loss_mask), again))


def test_bert_mask_80_10_10_rates():
    rng = np.random.default_rng(0)
    tokens = rng.integers(10, 1000, size=512)
    n_sel = n_mask = n_rand = 0
    for i in range(300):
        masked, _, loss = bert_mask(0, i, tokens, mask_prob=0.15, replace_mask=0.8, replace_random=0.1,
                                    mask_id=3, vocab_size=1000, special_ids=SPECIALS)
        sel = loss > 0
        n_sel += sel.sum()
        n_mask += (masked[sel] == 3).sum()
        n_rand += ((masked[sel] != 3) & (masked[sel] != tokens[sel])).sum()
    assert abs(n_mask / n_sel - 0.8) < 0.02
    assert abs(n_rand / n_sel - 0.1) < 0.02
