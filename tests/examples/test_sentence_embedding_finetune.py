"""examples/sentence_embedding_finetune.py end to end on the tiny random BERT: STS-B pairs (score >= 4) from
the generated GLUE fixture, a few MultipleNegativesRankingLoss steps, crossbert-mteb on a generated
MTEB-lite folder before and after, and a saved sentence-transformers model crossbert-mteb reads back."""

from __future__ import annotations

import importlib.util
import json

import pytest

from tests.support import REPO_ROOT
from tests.support.synthetic_eval import write_glue_fixture, write_mteb_lite_fixture


def _example():
    spec = importlib.util.spec_from_file_location("sentence_embedding_finetune",
                                                  REPO_ROOT / "examples" / "sentence_embedding_finetune.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_pairs_from_stsb_and_from_files(tmp_path):
    example = _example()
    glue = write_glue_fixture(tmp_path / "glue", n=24)
    pairs = example.stsb_pairs(glue, 4.0)
    assert len(pairs) == 12 and all(isinstance(a, str) and isinstance(b, str) for a, b in pairs)
    (tmp_path / "p.jsonl").write_text('{"anchor": "a b", "positive": "a c"}\n\n{"anchor": "d", "positive": "e"}\n')
    (tmp_path / "p.tsv").write_text('a "b\ta c\nd\te\nlonely\n')
    assert example.file_pairs(tmp_path / "p.jsonl") == [("a b", "a c"), ("d", "e")]
    assert example.file_pairs(tmp_path / "p.tsv") == [('a "b', "a c"), ("d", "e")]
    (tmp_path / "bad.jsonl").write_text('{"text": "a"}\n')
    with pytest.raises(ValueError, match="bad.jsonl: every line needs 'anchor' and 'positive'"):
        example.file_pairs(tmp_path / "bad.jsonl")


@pytest.mark.slow
def test_finetunes_and_scores_before_and_after(tiny_hf_encoder, tmp_path, capsys):
    example = _example()
    glue = write_glue_fixture(tmp_path / "glue", n=24)
    mteb = write_mteb_lite_fixture(tmp_path / "mteb_lite", pairs=12)
    out = tmp_path / "st"
    argv = ["--model", str(tiny_hf_encoder), "--out", str(out), "--glue-dir", str(glue), "--mteb-dir", str(mteb),
            "--mteb-tasks", "ToySTSA", "--max-steps", "3", "--batch-size", "4", "--max-seq-length", "32",
            "--lr", "1e-3", "--device", "cpu", "--threads", "1"]
    assert example.main(argv) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["pairs"] == 12 and summary["steps"] == 3
    before, after = summary["mteb_before"], summary["mteb_after"]
    assert set(before["tasks"]) == set(after["tasks"]) == {"ToySTSA"}
    assert all(0 <= run["average"] <= 100 for run in (before, after))  # Spearman x100 over 12 pairs: ranks may tie
    from sentence_transformers import SentenceTransformer

    texts = ["a tiny test sentence", "another one"]
    moved = SentenceTransformer(str(out / "model"), device="cpu").encode(texts)
    start = SentenceTransformer(str(tiny_hf_encoder), device="cpu").encode(texts)
    assert abs(moved - start).max() > 1e-4  # the three steps trained the encoder that "after" scores
    pooling = json.loads((out / "model" / "1_Pooling" / "config.json").read_text())
    assert pooling.get("pooling_mode", "mean") == "mean" or pooling.get("pooling_mode_mean_tokens") is True
    assert "| **average** |" in capsys.readouterr().out
    assert example.main(argv) == 2  # a folder that holds a model is never overwritten
    assert "model exists: choose another --out" in capsys.readouterr().err
