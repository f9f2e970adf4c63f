"""Document (fragment) ids of packed samples: from the packing index, in step with the packed tokens,
through both datasets, the static mask files, the cache key and run_config.json."""

from __future__ import annotations

import numpy as np
import pytest

from megatron_crossbert.data.datasets.packing import (
    assemble_sample, build_packing_index, cross_document_pairs, sample_pieces, sample_segments,
)

CLS, SEP = 2, 3


def _corpus(seed: int = 0, docs: int = 40):
    """Documents of 0 to 90 tokens (0- and 1-token documents included), ids 10..99 (never [SEP])."""
    rng = np.random.default_rng(seed)
    lengths = rng.choice([0, 1, 2, 5, 17, 40, 90], size=docs).astype(np.int64)
    tokens = [rng.integers(10, 100, size=n) for n in lengths]
    return lengths, (lambda doc, offset, count: tokens[doc][offset:offset + count])


def test_segments_follow_the_separators_of_every_sample():
    lengths, read = _corpus()
    for seq in (2, 3, 16, 64):
        index = build_packing_index(np.arange(lengths.size), lengths, seq, seed=1)
        for packed in range(index.num_samples):
            tokens = assemble_sample(index, packed, seq, read, lengths, CLS, SEP)
            segments = sample_segments(index, packed, seq, lengths)
            assert segments.shape == (seq,) and segments[0] == 0 and (np.diff(segments) >= 0).all()
            ends = np.flatnonzero(np.diff(segments))              # last position of every closed fragment
            assert (tokens[ends] == SEP).all(), (seq, packed)
            closed = np.append(ends, seq - 1) if tokens[-1] == SEP else ends
            assert np.array_equal(np.flatnonzero(tokens == SEP), closed), (seq, packed)


def test_pieces_fill_exactly_the_content_positions():
    lengths, _ = _corpus(3)
    index = build_packing_index(np.arange(lengths.size), lengths, 32, seed=2)
    for packed in range(index.num_samples):
        pieces = list(sample_pieces(index, packed, 32, lengths))
        assert sum(take + closes for _, _, take, closes in pieces) == 31


def test_cross_document_pairs():
    assert cross_document_pairs(np.array([0, 0, 0, 1])) == (6, 16)
    assert cross_document_pairs(np.zeros(8, dtype=np.int32)) == (0, 64)


def test_datasets_carry_segments_and_document_mask_is_in_the_cache_key(tmp_path, indexed_corpus):
    from megatron_crossbert.config import DataConfig, MaskingConfig, ModelConfig, RunConfig
    from megatron_crossbert.data.datasets.build import build_datasets

    def run(arch: str, document_mask: bool):
        cfg = RunConfig(model=ModelConfig(arch=arch, vocab_size=512, max_position_embeddings=64),
                        masking=MaskingConfig(seed=5),
                        data=DataConfig(data_path=[indexed_corpus], seq_length=64, split="1,0,0",
                                        cache_dir=str(tmp_path / "cache"), document_mask=document_mask))
        assert cfg.to_dict()["data"]["document_mask"] is document_mask       # what run_config.json records
        return build_datasets(cfg, (8, 0, 0))[0]

    on, off, bert = run("crossbert", True), run("crossbert", False), run("bert", True)
    assert on.unique_description_hash != off.unique_description_hash
    for i in range(8):
        sample = on[i]
        packed = int(on.packing.shuffle[i])
        expected = sample_segments(on.packing, packed, 64, on.doc_lengths)
        assert sample["segments"].dtype == np.int32 and np.array_equal(sample["segments"], expected)
        assert np.array_equal(bert[i]["segments"], expected)
        assert np.array_equal(off[i]["tokens"], sample["tokens"]) and not off[i]["segments"].any()
    assert max(int(on[i]["segments"].max()) for i in range(8)) > 0


def test_static_masks_without_segments_are_refused_with_document_masks(tmp_path):
    from megatron_crossbert.data.datasets.static_masks import StaticPairs, check_static_segments

    old = StaticPairs(samples=None, visible=None, targets=None, segments=None, meta={})
    check_static_segments(old, False, "old")
    with pytest.raises(ValueError, match="hold no document ids.*document_mask=false"):
        check_static_segments(old, True, str(tmp_path / "old"))


def test_a_checkpoint_from_before_document_masks_reads_as_trained_without(tmp_path):
    """The one reader of run_config.json fills a field the checkpoint predates with what that run had."""
    import json

    from megatron_crossbert.checkpoint.directories import RUN_CONFIG_FILE, load_saved_config
    from megatron_crossbert.config import RunConfig

    raw = RunConfig().to_dict()
    (tmp_path / RUN_CONFIG_FILE).write_text(json.dumps(raw))
    assert load_saved_config(tmp_path).data.document_mask is True          # recorded: kept
    del raw["data"]["document_mask"]
    (tmp_path / RUN_CONFIG_FILE).write_text(json.dumps(raw))
    assert load_saved_config(tmp_path).data.document_mask is False         # written before document masks
