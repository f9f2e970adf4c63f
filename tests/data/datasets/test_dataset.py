"""Packed CrossBERT/BERT datasets: round trip from text, megatron compatibility, determinism, errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from megatron_crossbert.config import DataConfig, MaskingConfig, ModelConfig, RunConfig, parse_blend
from megatron_crossbert.data.datasets.build import build_datasets
from megatron_crossbert.data.indexed.reader import CorruptDatasetError, document_lengths
from megatron_crossbert.data.preprocessing.preprocess import PreprocessOptions, preprocess
from megatron_crossbert.data.tokenizers.tokenizer import load_tokenizer
from megatron_crossbert.masking import complementary_views

L = 64


def _cfg(data_path, arch="crossbert", split="1,0,0", vocab=512, **data_kw) -> RunConfig:
    return RunConfig(model=ModelConfig(arch=arch, vocab_size=vocab, max_position_embeddings=128),
                     masking=MaskingConfig(seed=7), data=DataConfig(data_path=list(data_path), seq_length=L,
                                                                    split=split, **data_kw))


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory, text_corpus, bpe_tokenizer):
    """The session corpus and tokenizer -> this module's preprocessed prefix ``root / "c"``."""
    root = tmp_path_factory.mktemp("ds")
    preprocess(PreprocessOptions(inputs=[str(text_corpus.path)], output_prefix=str(root / "c"),
                                 tokenizer=str(bpe_tokenizer), progress=False))
    return root, text_corpus.texts, load_tokenizer(bpe_tokenizer)


def _megatron_written(path: Path, num_docs: int = 60, vocab: int = 300, seed: int = 0) -> list[np.ndarray]:
    """Documents of 1-3 sequences written directly with megatron-core's builder."""
    from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

    rng = np.random.default_rng(seed)
    builder = IndexedDatasetBuilder(str(path) + ".bin", dtype=np.int32)
    docs = []
    for _ in range(num_docs):
        lengths = rng.integers(1, 40, size=int(rng.integers(1, 4))).tolist()
        tokens = rng.integers(6, vocab, size=sum(lengths))
        builder.add_document(tokens, lengths)
        docs.append(tokens)
    builder.finalize(str(path) + ".idx")
    return docs


def _norm(text: str) -> str:
    return " ".join(text.split())


def test_round_trip_text_to_samples(pipeline):
    root, texts, tok = pipeline
    train, valid, test = build_datasets(_cfg([str(root / "c")]), (50, 0, 0), tokenizer=tok)
    assert valid is None and test is None and len(train) == 50
    docs = [_norm(t) for t in texts]
    segments_checked = 0
    for i in range(len(train)):
        sample = train[i]
        tokens = sample["tokens"]
        assert tokens.shape == (L,) and tokens.dtype == np.int64 and tokens[0] == tok.cls_id
        assert int(sample["index"]) == i
        pieces = np.split(tokens[1:], np.flatnonzero(tokens[1:] == tok.sep_id))
        for piece in pieces:
            text = _norm(tok.decode(piece[piece != tok.sep_id]))
            parts = [p.strip() for p in text.split("[UNK]") if len(p.strip()) > 3]  # rare chars may be [UNK]
            for part in parts:  # each is a decoded span of an original document
                assert any(part in d for d in docs), part
                segments_checked += 1
    assert segments_checked > 50


def test_stream_is_documents_joined_by_sep(tmp_path):
    prefix = tmp_path / "m_text_document"
    docs = _megatron_written(prefix)
    (train, _, _) = build_datasets(_cfg([str(prefix)], vocab=300), (None, None, None))
    packing = train.packing
    stream = np.concatenate([np.append(docs[d], 3) for d in packing.doc_order])
    inverse = np.argsort(packing.shuffle)
    content = np.concatenate([train[int(inverse[k])]["tokens"][1:] for k in range(packing.num_samples)])
    assert np.array_equal(content, stream[: content.size])
    assert stream.size - content.size < L - 1, "only the trailing partial sample is dropped"
    assert sorted(packing.doc_order.tolist()) == list(range(len(docs)))


def test_megatron_written_files_and_sample_contract(tmp_path):
    prefix = tmp_path / "m_text_document"
    _megatron_written(prefix)
    train, valid, test = build_datasets(_cfg([str(prefix)], split="8,1,1", vocab=300), (300, 20, 5))
    assert (len(train), len(valid), len(test)) == (300, 20, 5)
    sample = train[123]
    lv = 32
    assert sample["visible"].shape == (2, lv) and sample["targets"].shape == (2, L - lv)
    views = complementary_views(7, 123, L, 0.5)
    assert np.array_equal(sample["visible"], views.visible) and np.array_equal(sample["targets"], views.targets)
    again, _, _ = build_datasets(_cfg([str(prefix)], split="8,1,1", vocab=300), (300, 20, 5))
    for i in (0, 1, 150, 299):  # resumed/rebuilt runs see identical samples (cache or not)
        assert all(np.array_equal(train[i][k], again[i][k]) for k in ("tokens", "visible", "targets"))
    assert list((tmp_path / "cache" / "crossbert_indices").glob("*-packing.npz"))


def test_bert_variant_and_dataloader(tmp_path):
    import torch

    prefix = tmp_path / "m_text_document"
    _megatron_written(prefix)
    cross, _, _ = build_datasets(_cfg([str(prefix)], vocab=300), (40, 0, 0))
    bert, _, _ = build_datasets(_cfg([str(prefix)], arch="bert", vocab=300), (40, 0, 0))
    sample = bert[5]
    assert set(sample) == {"tokens", "labels", "loss_mask", "padding_mask", "segments", "index"}
    assert np.array_equal(sample["labels"], cross[5]["tokens"]), "same packed samples as CrossBERT"
    assert sample["loss_mask"].dtype == np.float32 and sample["padding_mask"].tolist() == [1] * L
    special = np.isin(sample["labels"], [0, 1, 2, 3, 4, 5])
    assert sample["loss_mask"].sum() > 0 and not sample["loss_mask"][special].any()
    import pickle

    clone = pickle.loads(pickle.dumps(cross))  # spawned DataLoader workers receive a pickled dataset
    assert np.array_equal(clone[5]["tokens"], cross[5]["tokens"])
    batch = next(iter(torch.utils.data.DataLoader(cross, batch_size=4)))
    assert batch["tokens"].shape == (4, L) and batch["visible"].shape == (4, 2, 32) and batch["index"].tolist() == [0, 1, 2, 3]


def test_weighted_blend(tmp_path):
    _megatron_written(tmp_path / "a_text_document", seed=1)
    _megatron_written(tmp_path / "b_text_document", seed=2)
    blend = ["0.75", str(tmp_path / "a"), "0.25", str(tmp_path / "b")]
    assert parse_blend(blend) == ([str(tmp_path / "a"), str(tmp_path / "b")], [0.75, 0.25])
    train, _, _ = build_datasets(_cfg(blend, vocab=300, cache_dir=str(tmp_path / "cache")), (400, 0, 0))
    ids = np.array([int(train[i]["dataset_id"]) for i in range(len(train))])
    assert len(train) == 400 and abs((ids == 0).mean() - 0.75) < 0.02
    assert [int(train[i]["index"]) for i in range(3)] == [0, 1, 2]


def test_masks_follow_the_global_index_through_a_blend_and_a_rate_schedule(tmp_path):
    """A blend masks each sample at its global index (not the constituent's), so a masking-rate schedule
    follows training progress; validation keeps bert_mask_prob."""
    from megatron_crossbert.arch_rules import mlm_sample

    for name, seed in (("a", 1), ("b", 2)):
        _megatron_written(tmp_path / f"{name}_text_document", seed=seed)
    cfg = _cfg(["0.5", str(tmp_path / "a"), "0.5", str(tmp_path / "b")], arch="bert", split="9,1,0", vocab=300,
               cache_dir=str(tmp_path / "cache"))
    cfg.masking = MaskingConfig(seed=7, bert_mask_prob_schedule=f"0:0.3 {40 * L}:0.05")
    train, valid, _ = build_datasets(cfg, (80, 8, 0))
    for split, rate_at in ((train, lambda i: 0.3 if i < 40 else 0.05), (valid, lambda i: 0.15)):
        for i in range(0, len(split), 3):
            sample = split[i]
            part = split.dataset.datasets[int(sample["dataset_id"])]
            tokens = part.packed_tokens(int(sample["constituent_index"]))
            expected = mlm_sample(part.masking, i, tokens, part.config.token_ids)
            assert int(sample["index"]) == i and np.array_equal(sample["loss_mask"], expected["loss_mask"])
            candidates = int((~np.isin(tokens, [0, 1, 2, 3, 4, 5])).sum())
            assert sample["loss_mask"].sum() == max(1, round(rate_at(i) * candidates)), i


def test_clear_errors_for_missing_corrupt_and_mismatched_data(tmp_path):
    prefix = tmp_path / "m_text_document"
    _megatron_written(prefix, vocab=300)
    with pytest.raises(FileNotFoundError, match="missing"):
        build_datasets(_cfg([str(tmp_path / "nothing")]), (10, 0, 0))
    with pytest.raises(ValueError, match="vocab"):
        build_datasets(_cfg([str(prefix)], vocab=200), (10, 0, 0))
    with pytest.raises(ValueError, match="0 of 60 documents"):
        build_datasets(_cfg([str(prefix)], split="98,1,1", vocab=300), (10, 5, 0))
    with pytest.raises(ValueError, match="complementary views need disjoint visible sets"):
        RunConfig(model=ModelConfig(vocab_size=300), data=DataConfig(data_path=[str(prefix)], seq_length=63))
    bin_bytes = Path(str(prefix) + ".bin").read_bytes()
    Path(str(prefix) + ".bin").write_bytes(bin_bytes[:-10])
    with pytest.raises(CorruptDatasetError, match="size"):
        build_datasets(_cfg([str(prefix)], vocab=300), (10, 0, 0))
    Path(str(prefix) + ".bin").write_bytes(bin_bytes)
    Path(str(prefix) + ".idx").write_bytes(b"NOTANIDX" + Path(str(prefix) + ".idx").read_bytes()[8:])
    with pytest.raises(CorruptDatasetError, match="header"):
        build_datasets(_cfg([str(prefix)], vocab=300), (10, 0, 0))


def test_our_files_load_in_megatron_and_document_lengths(pipeline):
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    root, texts, tok = pipeline
    ds = IndexedDataset(str(root / "c_text_document"))
    assert document_lengths(ds).tolist() == [len(tok.encode(t)) for t in texts]


def test_single_view_with_pinned_cls(tmp_path):
    prefix = tmp_path / "m_text_document"
    _megatron_written(prefix)
    cfg = _cfg([str(prefix)], vocab=300)
    cfg.masking = MaskingConfig(seed=7, mask_ratio=0.75, complementary=False, pin_cls=True)
    train, _, _ = build_datasets(cfg, (20, 0, 0))
    for i in range(20):
        sample = train[i]
        assert sample["visible"].shape == (1, 16) and sample["targets"].shape == (1, 48)
        assert sample["visible"][0, 0] == 0 and sample["tokens"][0] == 2
