"""The mask algebra (``models.attention_masks``): key ranges equal the pair-by-pair rule, widened empty rows,
token coordinates of padded batches and of CrossBERT views."""

from __future__ import annotations

import pytest
import torch

from megatron_crossbert.models.attention_masks import (
    check_coords, cross_coords, dense_keep, key_ranges, padding_coords, ranges_for, reference_keep,
    token_coords,
)
from tests.support.models import random_view


@pytest.mark.parametrize("half", [0, 1, 3, 8])
def test_self_attention_ranges_equal_the_rule(half):
    segments, visible, _ = random_view(3, 40, 20, seed=half)
    coords = token_coords(torch.gather(segments, 1, visible), visible)
    check_coords(coords, 20, 20)
    ranges = ranges_for(coords, 20, 20, half)
    assert not ranges.empty.any()                      # a token always sees itself
    assert torch.equal(dense_keep(ranges, 20)[:, 0], reference_keep(coords, coords, half))


@pytest.mark.parametrize("half", [0, 2, 5])
def test_cross_attention_ranges_equal_the_rule_and_widen_empty_rows(half):
    segments, visible, targets = random_view(4, 48, 16, seed=10 + half)
    queries = token_coords(torch.gather(segments, 1, targets), targets)
    keys = token_coords(torch.gather(segments, 1, visible), visible)
    ranges = key_ranges(queries, keys, half)
    rule = reference_keep(queries, keys, half)
    assert torch.equal(ranges.empty, ~rule.any(-1))
    keep = dense_keep(ranges, keys.shape[-1])[:, 0]
    assert torch.equal(keep[~ranges.empty], rule[~ranges.empty])
    assert keep[ranges.empty].all() and keep.any(-1).all()
    assert torch.equal(ranges_for(cross_coords(queries, keys), 32, 16, half).lo, ranges.lo)


def test_one_token_fragments_with_nothing_visible_are_empty_rows():
    segments = torch.tensor([[0, 0, 1, 2, 2, 3]])          # fragments 1 and 3 hold one token each
    visible, targets = torch.tensor([[0, 3]]), torch.tensor([[1, 2, 4, 5]])
    ranges = key_ranges(token_coords(torch.gather(segments, 1, targets), targets),
                        token_coords(torch.gather(segments, 1, visible), visible), 0)
    assert ranges.empty.tolist() == [[False, True, False, True]]


@pytest.mark.parametrize("side", ["right", "left"])
def test_padding_coords_keep_tokens_off_the_padding(side):
    keep = torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]])
    if side == "left":
        keep = keep.flip(1)
    coords = padding_coords(keep)
    mask = dense_keep(ranges_for(coords, 6, 6, 0), 6)[:, 0]
    real = keep.bool()
    assert torch.equal(mask, real[:, :, None] == real[:, None, :])
    windowed = dense_keep(ranges_for(coords, 6, 6, 1), 6)[:, 0]
    near = (torch.arange(6)[:, None] - torch.arange(6)[None]).abs() <= 1
    assert torch.equal(windowed, mask & near)


def test_coords_length_must_fit_the_attention():
    coords = token_coords(torch.zeros(1, 5, dtype=torch.int64), torch.arange(5)[None])
    with pytest.raises(ValueError, match="fits neither"):
        ranges_for(coords, 3, 4, 0)
    with pytest.raises(ValueError, match="not strictly sorted"):
        check_coords(coords.flip(-1), 5, 5)


def test_view_coords_gather_documents_like_tokens():
    from megatron_crossbert.models.attention_masks import view_coords

    segments, visible, targets = random_view(2, 30, 15, seed=4)
    encoder, decoder, cross = view_coords(segments, visible, targets)
    assert torch.equal(encoder[:, 0], torch.gather(segments, 1, visible)) and torch.equal(encoder[:, 1], visible)
    assert torch.equal(decoder[:, 1], targets) and torch.equal(cross, torch.cat([decoder, encoder], -1))
    check_coords(cross, 15, 15)
