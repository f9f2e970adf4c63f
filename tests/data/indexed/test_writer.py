"""The numpy .bin/.idx writer: byte-identical to megatron-core's IndexedDatasetBuilder, readable by IndexedDataset."""

from __future__ import annotations

import numpy as np
import pytest

from megatron_crossbert.data.indexed.writer import AtomicIndexedWriter, IndexedWriter, optimal_dtype, read_header


def _documents(seed: int = 0, n: int = 40, vocab: int = 70000):
    rng = np.random.default_rng(seed)
    docs = []
    for i in range(n):
        lengths = rng.integers(0 if i % 7 == 3 else 1, 50, size=int(rng.integers(1, 4))).tolist()
        docs.append((rng.integers(0, vocab, size=sum(lengths)), lengths))
    return docs


@pytest.mark.parametrize("vocab", [300, 70000])
def test_writer_bytes_equal_megatron_builder_and_read_back(tmp_path, vocab):
    from megatron.core.datasets.indexed_dataset import DType, IndexedDataset, IndexedDatasetBuilder

    docs = _documents(vocab=vocab)
    dtype = optimal_dtype(vocab)
    assert dtype == DType.optimal_dtype(vocab)
    theirs = IndexedDatasetBuilder(str(tmp_path / "m.bin"), dtype=dtype)
    ours = IndexedWriter(str(tmp_path / "o.bin"), dtype=dtype)
    for tokens, lengths in docs[:25]:
        theirs.add_document(tokens, lengths)
        ours.add_document(tokens, lengths)
    rest = docs[25:]  # the batched path used by preprocessing: one call for many documents
    for tokens, lengths in rest:
        theirs.add_document(tokens, lengths)
    ours.add_documents(np.concatenate([t for t, _ in rest]), np.array([x for _, ls in rest for x in ls]),
                       np.array([len(ls) for _, ls in rest]))
    theirs.finalize(str(tmp_path / "m.idx"))
    ours.finalize(str(tmp_path / "o.idx"))
    for ext in (".bin", ".idx"):
        assert (tmp_path / f"o{ext}").read_bytes() == (tmp_path / f"m{ext}").read_bytes()
    ds = IndexedDataset(str(tmp_path / "o"))
    flat = [t for t, lengths in docs for t in np.split(t, np.cumsum(lengths)[:-1])]
    assert len(ds) == len(flat) and all(np.array_equal(ds[i], flat[i]) for i in range(len(flat)))
    assert read_header(str(tmp_path / "o.idx")) == (dtype, len(flat), len(docs) + 1)


def test_empty_dataset_matches_builder(tmp_path):
    from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

    IndexedDatasetBuilder(str(tmp_path / "m.bin"), dtype=np.uint16).finalize(str(tmp_path / "m.idx"))
    IndexedWriter(str(tmp_path / "o.bin"), dtype=np.uint16).finalize(str(tmp_path / "o.idx"))
    assert (tmp_path / "o.idx").read_bytes() == (tmp_path / "m.idx").read_bytes()


def test_atomic_writer_commit_and_abort(tmp_path):
    writer = AtomicIndexedWriter(str(tmp_path / "a"), vocab_size=100)
    writer.add_document(np.arange(5), [5])
    assert not (tmp_path / "a.bin").exists()
    writer.commit()
    assert (tmp_path / "a.bin").stat().st_size == 10 and (tmp_path / "a.idx").exists()
    other = AtomicIndexedWriter(str(tmp_path / "b"), vocab_size=100)
    other.add_document(np.arange(3), [3])
    other.abort()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.bin", "a.idx"]


def test_read_header_names_file_and_problem(tmp_path):
    bad = tmp_path / "x.idx"
    bad.write_bytes(b"MMIDIDX")
    with pytest.raises(ValueError, match=r"x\.idx: not a Megatron indexed-dataset index"):
        read_header(str(bad))
    bad.write_bytes(b"MMIDIDX\x00\x00" + (1).to_bytes(8, "little") + bytes([42]) + bytes(16))
    with pytest.raises(ValueError, match=r"x\.idx: unknown token dtype code 42"):
        read_header(str(bad))
