"""crossbert-demo at tiny size: every stage runs and leaves usable artefacts (end-to-end smoke)."""

import json
import math

import pytest

from megatron_crossbert.cli import demo as demo_cli
from megatron_crossbert.demo import DemoOptions, build_probe_rows, run_demo


def test_probe_rows_balance_sources_or_fall_back_to_word_order():
    records = [{"text": f"text number {i} " * 3, "source": "a" if i % 3 else "b"} for i in range(30)]
    name, rows = build_probe_rows(records, seed=0)
    assert name == "docstring_source"
    assert sorted(r["label"] for r in rows).count("a") == sorted(r["label"] for r in rows).count("b") == 10
    name, rows = build_probe_rows([{"text": r["text"]} for r in records], seed=0)
    assert name == "word_order" and {r["label"] for r in rows} == {"original", "shuffled"}


def test_help_and_refusal_to_overwrite(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        demo_cli.main(["--help"])
    assert exit_info.value.code == 0 and "--corpus" in capsys.readouterr().out
    (tmp_path / "keep.txt").write_text("precious")
    assert demo_cli.main(["--out-dir", str(tmp_path)]) == 2
    assert (tmp_path / "keep.txt").read_text() == "precious"


@pytest.mark.e2e
def test_tiny_demo_end_to_end(tmp_path):
    opts = DemoOptions(out_dir=str(tmp_path / "demo"), corpus_bytes=250_000, vocab_size=2000, seq_length=64,
                       hidden_size=64, num_layers=2, num_heads=4, train_iters=6, micro_batch_size=8,
                       probe_train=120, probe_test=60)
    result = run_demo(opts)
    assert json.loads((tmp_path / "demo" / "summary.json").read_text())["paths"] == result["paths"]
    assert result["pretrain"]["steps"] == 6
    assert result["pretrain"]["final_loss"] < result["pretrain"]["first_loss"]
    for name in ("pretrained", "untrained"):
        assert 0.0 <= result["probe"][name]["accuracy"] <= 100.0
    from sentence_transformers import SentenceTransformer

    embeddings = SentenceTransformer(result["paths"]["hf"], device="cpu").encode(["a tiny test sentence"])
    assert embeddings.shape == (1, 64) and all(math.isfinite(float(x)) for x in embeddings[0])
