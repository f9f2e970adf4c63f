"""The embedded default corpus: prose filtering and deterministic, budgeted output."""

import json

from crossbert_demo.corpus import package_roots, prose_paragraphs, write_corpus


def test_prose_filter_keeps_sentences_and_drops_code_and_tables():
    doc = (
        "Return the cumulative sum of the elements along a given axis, skipping any missing values.\n\n"
        ">>> np.cumsum([1, 2])\narray([1, 3])\n\n"
        "Parameters\n----------\n\n"
        "short line"
    )
    assert list(prose_paragraphs(doc)) == [
        "Return the cumulative sum of the elements along a given axis, skipping any missing values."
    ]


def test_write_corpus_is_deterministic_and_respects_budget(tmp_path):
    assert package_roots(("stdlib",)), "the standard library must always be available"
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl.gz"
    counts = write_corpus(first, max_bytes=40_000, packages=("stdlib",))
    write_corpus(second, max_bytes=40_000, packages=("stdlib",))
    import gzip

    assert first.read_bytes() == gzip.decompress(second.read_bytes())
    records = [json.loads(line) for line in first.read_text().splitlines()]
    assert counts["stdlib"]["docs"] == len(records) > 10
    assert 40_000 <= counts["stdlib"]["bytes"] < 40_000 + max(len(r["text"].encode()) for r in records) + 1
    assert all(r["source"] == "stdlib" and len(r["text"].split()) >= 12 for r in records)
    assert len({r["text"] for r in records}) == len(records)
