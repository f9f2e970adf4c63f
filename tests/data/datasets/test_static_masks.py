"""Static mask pairs (preprocess --emit-mask-pairs) equal the on-the-fly pairs for the same seed."""

from __future__ import annotations

import numpy as np
import pytest

from megatron_crossbert.config import DataConfig, MaskingConfig, ModelConfig, RunConfig
from megatron_crossbert.data.datasets.build import build_datasets
from megatron_crossbert.data.datasets.static_masks import open_static_pairs
from megatron_crossbert.data.preprocessing.preprocess import PreprocessOptions, mask_pairs_prefix, preprocess
from megatron_crossbert.masking import complementary_views

L, SEED = 48, 11


def _cfg(root, tok, ratio=0.5, complementary=True, static=True, seed=SEED) -> RunConfig:
    data = DataConfig(data_path=[] if static else [str(root / "c")], seq_length=L, split="1,0,0",
                      tokenizer=str(tok),
                      static_masks=mask_pairs_prefix(str(root / "c"), "text") if static else None)
    return RunConfig(model=ModelConfig(vocab_size=512, max_position_embeddings=64), data=data,
                     masking=MaskingConfig(seed=seed, mask_ratio=ratio, complementary=complementary))


@pytest.fixture(scope="module", params=[True, False], ids=["complementary", "single-view"])
def static_root(tmp_path_factory, request, text_corpus, bpe_tokenizer):
    root = tmp_path_factory.mktemp("static")
    ratio = 0.5 if request.param else 0.75
    report = preprocess(PreprocessOptions(
        inputs=[str(text_corpus.path)], output_prefix=str(root / "c"), tokenizer=str(bpe_tokenizer), progress=False,
        emit_mask_pairs=True, seq_length=L,
        masking=MaskingConfig(mask_ratio=ratio, seed=SEED, complementary=request.param)))
    return root, bpe_tokenizer, ratio, request.param, report


def test_files_hold_the_on_the_fly_views(static_root):
    root, _, ratio, complementary, report = static_root
    pairs = open_static_pairs(mask_pairs_prefix(str(root / "c"), "text"))
    rows = report["mask_pairs"]["text"]["num_samples"]
    assert len(pairs) == rows > 10
    views_per_row = 2 if complementary else 1
    for r in range(rows):
        views = complementary_views(SEED, r, L, ratio, complementary)
        assert np.array_equal(pairs.visible[r].reshape(views_per_row, -1), views.visible)
        assert np.array_equal(pairs.targets[r].reshape(views_per_row, -1), views.targets)
        assert pairs.samples[r].size == L


def test_static_dataset_equals_on_the_fly_dataset(static_root):
    root, tok, ratio, complementary, report = static_root
    rows = report["mask_pairs"]["text"]["num_samples"]
    static, _, _ = build_datasets(_cfg(root, tok, ratio, complementary), (rows, 0, 0))
    dynamic, _, _ = build_datasets(_cfg(root, tok, ratio, complementary, static=False), (rows, 0, 0))
    for i in range(rows):
        a, b = static[i], dynamic[i]
        assert set(a) == set(b) == {"tokens", "visible", "targets", "segments", "index"}
        for key in a:
            assert np.array_equal(a[key], b[key]) and a[key].dtype == b[key].dtype, (i, key)


def test_static_masks_refuse_a_different_setup(static_root):
    root, tok, ratio, complementary, _ = static_root
    with pytest.raises(ValueError, match="different setup"):
        build_datasets(_cfg(root, tok, ratio, complementary, seed=SEED + 1), (5, 0, 0))
