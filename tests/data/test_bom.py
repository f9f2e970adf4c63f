"""A UTF-8 byte-order mark does not cost the first document.

Unguarded, ``crossbert-preprocess`` on a JSONL file that starts with a BOM (Windows editors write one) wrote
49 of 50 documents and counted the first as ``invalid_json``; ``crossbert-train-tokenizer`` dropped it
without a word (a word only in it was missing from the vocabulary).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from megatron_crossbert.data.jsonl import iter_texts
from megatron_crossbert.data.preprocessing import preprocess as pp

BOM = "\ufeff"


def _docs(n: int = 50) -> list[str]:
    return [f"document {i} says zyx{i} twice zyx{i}" for i in range(n)]


def _write(path: Path, docs: list[str], bom_at: tuple[int, ...] = (0,)) -> Path:
    """One ``{"text"}`` line per doc, with a BOM before each line index in ``bom_at`` (0: the file's start;
    others: where ``cat`` joined a second BOM-started file)."""
    text = "".join((BOM if i in bom_at else "") + json.dumps({"text": d}) + "\n" for i, d in enumerate(docs))
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(text.encode("utf-8")))
    else:
        path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("name, bom_at", [("bom.jsonl", (0,)), ("bom.jsonl.gz", (0,)), ("cat.jsonl", (0, 25))])
def test_the_first_document_is_read(tmp_path, name, bom_at):
    docs = _docs()
    assert list(iter_texts([str(_write(tmp_path / name, docs, bom_at))])) == docs


def test_preprocess_writes_every_document(tmp_path, bpe_tokenizer):
    inputs = [_write(tmp_path / "bom.jsonl", _docs()), _write(tmp_path / "bom.jsonl.gz", _docs(), (0, 10))]
    report = pp.preprocess(pp.PreprocessOptions(inputs=[str(p) for p in inputs], output_prefix=str(tmp_path / "out"),
                                                tokenizer=str(bpe_tokenizer), progress=False, strict=True))
    assert (report["documents_written"], report["documents_skipped"]) == (100, 0)


def test_train_tokenizer_sees_the_first_document(tmp_path):
    from megatron_crossbert.data.tokenizers.training import train_tokenizer

    docs = [" ".join(["uniqueword"] * 50)] + ["alpha beta gamma delta"] * 30
    tokenizer = train_tokenizer([str(_write(tmp_path / "bom.jsonl", docs))], tmp_path / "tok",
                                model_type="wordpiece", vocab_size=120)
    assert "uniqueword" in tokenizer.backend.get_vocab()
