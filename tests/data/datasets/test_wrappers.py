"""Megatron-LM-written data ([CLS] doc [SEP] + eod per document) packs into our layout."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from megatron_crossbert.config import DataConfig, MaskingConfig, ModelConfig, RunConfig
from megatron_crossbert.data.datasets.build import build_datasets
from megatron_crossbert.data.datasets.wrappers import WrapperStrip, detect_wrappers

CLS, SEP, EOD, L = 2, 3, 5, 48


def _write_megatron_layout(prefix: Path, num_docs: int = 80, wrapped: bool = True, seed: int = 0) -> None:
    """What Megatron-LM's preprocess_data.py writes with a BERT-style HF tokenizer and --append-eod."""
    from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

    rng = np.random.default_rng(seed)
    builder = IndexedDatasetBuilder(str(prefix) + ".bin", dtype=np.uint16)
    for _ in range(num_docs):
        body = rng.integers(6, 300, size=int(rng.integers(3, 70))).tolist()
        tokens = [CLS, *body, SEP, EOD] if wrapped else body
        builder.add_document(np.array(tokens), [len(tokens)])
    builder.finalize(str(prefix) + ".idx")


def _cfg(prefix: Path, mode: str, cache: Path) -> RunConfig:
    return RunConfig(model=ModelConfig(vocab_size=512, max_position_embeddings=128), masking=MaskingConfig(seed=3),
                     data=DataConfig(data_path=[str(prefix)], seq_length=L, split="1,0,0", cache_dir=str(cache),
                                     strip_wrapper_tokens=mode))


def _pairs(tokens: np.ndarray, a: int, b: int) -> int:
    return int(np.sum((tokens[:-1] == a) & (tokens[1:] == b)))


def test_megatron_layout_packs_without_doubled_wrappers(tmp_path, caplog):
    _write_megatron_layout(tmp_path / "mlm")
    with caplog.at_level(logging.INFO, logger="megatron_crossbert.data.datasets.dataset"):
        train, _, _ = build_datasets(_cfg(tmp_path / "mlm", "auto", tmp_path / "cache"), (60, 0, 0))
    assert "stripping 1 leading, 2 trailing per document" in caplog.text
    samples = np.stack([train[i]["tokens"] for i in range(len(train))])
    assert (samples[:, 0] == CLS).all() and not (samples[:, 1:] == CLS).any()
    assert sum(_pairs(s, CLS, CLS) + _pairs(s, SEP, SEP) for s in samples) == 0
    assert not (samples == EOD).any()
    kept, _, _ = build_datasets(_cfg(tmp_path / "mlm", "never", tmp_path / "cache"), (60, 0, 0))
    raw = np.stack([kept[i]["tokens"] for i in range(len(kept))])
    assert (raw[:, 1:] == CLS).any() and sum(_pairs(s, SEP, EOD) for s in raw) > 0  # what was wrong before
    assert train.unique_description_hash != kept.unique_description_hash
    assert '"wrapper_strip": "auto:lead=1,trail=2"' in train.unique_description


def test_plain_data_is_not_touched_by_auto(tmp_path):
    _write_megatron_layout(tmp_path / "plain", wrapped=False)
    auto, _, _ = build_datasets(_cfg(tmp_path / "plain", "auto", tmp_path / "cache"), (30, 0, 0))
    never, _, _ = build_datasets(_cfg(tmp_path / "plain", "never", tmp_path / "cache"), (30, 0, 0))
    assert auto.wrapper_strip.describe() == "auto:lead=0,trail=0"
    assert all(np.array_equal(auto[i]["tokens"], never[i]["tokens"]) for i in range(30))


def _reader(docs: list[list[int]]):
    return (lambda d, o, c: np.array(docs[d][o:o + c])), np.array([len(d) for d in docs])


def test_detection_modes():
    docs = [[CLS, 9, 9, SEP, EOD]] * 8 + [[9, 9, 9]] * 2  # most, not all, wrapped
    read, lengths = _reader(docs)
    ids = dict(cls_id=CLS, sep_id=SEP, eod_id=EOD)
    assert (detect_wrappers(read, lengths, mode="auto", **ids).lead, detect_wrappers(read, lengths, **ids).trail) == (0, 0)
    always = detect_wrappers(read, lengths, mode="always", **ids)
    assert (always.lead, always.trail) == (1, 2) and "80% start with [CLS]" in always.evidence
    assert not detect_wrappers(read, lengths, mode="never", **ids).active
    assert WrapperStrip(lead=1, trail=2).lengths(np.array([5, 2])).tolist() == [2, 0]
    with pytest.raises(ValueError, match="strip_wrapper_tokens must be one of auto, always, never"):
        WrapperStrip(mode="sometimes")


def test_config_rejects_unknown_mode():
    with pytest.raises(ValueError, match="data.strip_wrapper_tokens='yes' must be one of auto, always, never"):
        DataConfig(strip_wrapper_tokens="yes")
