"""The attention-adjusted FLOP count against hand counts for a document mask (and a window)."""

from __future__ import annotations

import numpy as np
import pytest

from megatron_crossbert.config import load_run_config
from megatron_crossbert.models.attention_flops import (
    allowed_pairs,
    attention_adjusted_flops_per_sample,
    document_lengths,
    window_pairs,
)
from megatron_crossbert.models.flops import model_flops_per_sample


def _bert(*extra: str):
    return load_run_config(None, ["model.arch=bert", "model.hidden_size=32", "model.num_layers=2",
                                  "model.num_attention_heads=4", "model.vocab_size=200", "data.seq_length=8",
                                  "model.max_position_embeddings=16", "training.micro_batch_size=1",
                                  "training.global_batch_size=1", *extra])


def test_pairs_by_hand():
    assert window_pairs(5, 0) == 25 and window_pairs(5, 1) == 13  # 5 on the diagonal + 2 x 4 neighbours
    assert window_pairs(5, 4) == 25 and allowed_pairs([3, 5]) == 9 + 25
    assert document_lengths(np.array([0, 0, 0, 1, 1, 1, 1, 1])) == [3, 5]


def test_document_mask_adjusts_the_mlm_count_by_the_skipped_pairs():
    run = _bert()
    # L = 8 in documents of 3 and 5: 64 dense pairs per layer, 34 allowed, 30 skipped; each pair costs
    # 4 x h FLOPs forward (Q K^T and P V), x3 with the backward, on 2 layers: 3 x 2 x 4 x 32 x 30 = 23040
    dense = model_flops_per_sample(run)
    assert dense - attention_adjusted_flops_per_sample(run, [3, 5]) == pytest.approx(23040)
    assert attention_adjusted_flops_per_sample(run, [8]) == pytest.approx(dense)  # one document: nothing skipped


def test_crossbert_scales_the_allowed_pairs_to_its_views():
    run = load_run_config(None, ["model.arch=crossbert", "model.hidden_size=32", "model.num_layers=2",
                                 "model.num_attention_heads=4", "model.vocab_size=200", "data.seq_length=8",
                                 "model.max_position_embeddings=16", "model.decoder_num_layers=1",
                                 "masking.mask_ratio=0.5", "training.micro_batch_size=1",
                                 "training.global_batch_size=1"])
    dense, adjusted = model_flops_per_sample(run), attention_adjusted_flops_per_sample(run, [4, 4])
    # every stack sees 4 of 8 positions: 16 dense pairs, 32/64 x 16 = 8 allowed, 8 skipped per layer and view;
    # encoder 2 layers + decoder self 1 + cross 1 = 4 layers, 2 views: 3 x 2 x 4 x 4 x 32 x 8
    assert dense - adjusted == pytest.approx(3 * 2 * 4 * 4 * 32 * 8)
