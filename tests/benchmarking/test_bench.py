"""Smoke tests for ``crossbert-bench``: each benchmark runs at a tiny size and writes valid JSON.

No timing assertions (2 shared CPU cores make timings meaningless here). The in-process calls compute with
``--threads 1`` where the benchmark has it: left out, torch takes one thread per core beside the other test
workers and spins on them.
"""

from __future__ import annotations

import json

import pytest
import torch

from megatron_crossbert.benchmarking.cases import SETTINGS
from megatron_crossbert.cli.bench import main


@pytest.mark.slow
def test_throughput_tiny_writes_json(tmp_path, capsys):
    out = tmp_path / "tp.json"
    assert main(["throughput", "--size", "tiny", "--threads", "1", "--steps", "1", "--warmup", "1", "--profile",
                 "--attention-backend", "megatron", "--no-document-mask", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    names = [r["name"] for r in report["results"]]
    assert names == [s.name for s in SETTINGS] and len(names) == 14
    by_name = {r["name"]: r for r in report["results"]}
    for result in report["results"]:
        assert result["samples_per_s"] > 0 and result["supervised_tokens_per_s"] > 0
        assert result["samples_per_s_vs_ref"] > 0 and result["model_flops_per_sample"] > 0
        assert result["predicted_samples_per_s_vs_ref"] > 0 and result["samples_per_s_vs_dense"] > 0
        assert result["reference"] == ("mlm-modern" if result["encoder"] == "modern" else "bert")
        assert result["dense_reference"] == ("mlm-modern dense" if result["encoder"] == "modern" else "bert dense")
    # the references are the sparse-prediction baselines; the dense rows cost more FLOPs per sample
    assert by_name["bert"]["sparse_prediction"] and not by_name["bert dense"]["sparse_prediction"]
    assert by_name["bert dense"]["predicted_samples_per_s_vs_ref"] < 1 and by_name["bert"]["is_reference"]
    narrow = by_name["crossbert r=0.5 compl dec h/2x1L"]
    assert (narrow["decoder_hidden_size"], narrow["decoder_num_layers"]) == (32, 1)
    assert narrow["model_flops_per_sample"] < by_name["crossbert r=0.5 compl"]["model_flops_per_sample"]
    assert set(report["profile"]) == set(names)
    options = report["meta"]["options"]
    assert (options["attention_backend"], options["document_mask"]) == ("megatron", False)
    table = capsys.readouterr().out
    assert "| model |" in table and "× sparse MLM" in table and "step CPU ms | step wall ms" in table
    only = tmp_path / "only.json"
    assert main(["throughput", "--size", "tiny", "--threads", "1", "--steps", "1", "--warmup", "0",
                 "--only", "crossbert r=0.5 single", "--out", str(only)]) == 0
    assert [r["name"] for r in json.loads(only.read_text())["results"]] == ["bert", "crossbert r=0.5 single",
                                                                           "mlm-modern"]
    assert main(["throughput", "--size", "tiny", "--only", "crossbert r=0.9", "--out", str(only)]) == 2


@pytest.mark.slow
def test_attention_bench_tiny_writes_json_tables_and_leakage(tmp_path, capsys, text_corpus, bpe_tokenizer):
    """Every backend at L=256 with documents and a window (flex forward-only and eager on the CPU), real
    document masks and the leakage table from the session corpus; the megatron row is the 'before'."""
    out = tmp_path / "attention.json"
    assert main(["attention", "--seq-lengths", "256", "--masks", "documents+window", "--repeats", "1", "--window",
                 "8", "--flex-eager", "--corpus", str(text_corpus.path), "--tokenizer", str(bpe_tokenizer),
                 "--leakage-lengths", "64", "256", "--leakage-samples", "20", "5", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    rows = {r["backend"]: r for r in report["results"]}
    assert set(rows) == {"megatron", "sdpa", "flex"} and all(r["wall_ms"] > 0 for r in rows.values())
    assert rows["flex"]["passes"] == "fwd" and rows["sdpa"]["passes"] == "fwd+bwd"
    assert rows["sdpa"]["documents"] > 1 and rows["sdpa"]["mask_build_ms"] > 0
    leak = {r["seq_length"]: r for r in report["leakage"]}
    assert 0 < leak[64]["cross_document_pairs"] < leak[256]["cross_document_pairs"] < 1
    assert report["meta"]["cpu_s_process_tree"] > 0 and report["meta"]["documents"] == "corpus median sample"
    text = capsys.readouterr().out
    assert "| 256 | documents+window" in text and "pairs crossing documents" in text
    assert out.with_suffix(".md").read_text().startswith("| L | mask |")


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU the check really runs (minutes)")
def test_gpu_check_degrades_without_cuda(tmp_path):
    out = tmp_path / "gpu.json"
    assert main(["gpu-check", "--out", str(out)]) == 0
    payload = json.loads(out.read_text())
    assert payload["status"] == "skipped" and "CUDA" in payload["reason"]


@pytest.mark.slow
def test_checkpoint_bench_tiny_writes_json_and_table(tmp_path, capsys):
    out = tmp_path / "ckpt.json"
    assert main(["checkpoint", "--threads", "1", "--sizes", "tiny", "--repeats", "1",
                 "--work-dir", str(tmp_path / "work"), "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    cases = {(c["state"], c["mode"], c["format"]): c for c in report["sizes"][0]["cases"]}
    assert len(cases) == 5 and report["sizes"][0]["num_parameters"] > 0
    model, full = cases[("model", "sync", "-")], cases[("full", "sync", "fully_reshardable")]
    assert full["bytes"] > 2.5 * model["bytes"] > 0  # weights plus two Adam moments
    assert cases[("model", "async", "-")]["bytes"] == pytest.approx(model["bytes"], rel=0.01)  # same shards
    assert all(c["save_s"] > 0 and c["load_s"] > 0 and c["save_MBps"] > 0 for c in cases.values())
    assert cases[("full", "async", "fully_reshardable")]["blocking_s"] <= cases[("full", "async", "fully_reshardable")]["save_s"]
    assert list((tmp_path / "work").iterdir()) == []  # every temporary checkpoint removed
    assert "| size | params M |" in capsys.readouterr().out and out.with_suffix(".md").is_file()
    assert main(["checkpoint", "--sizes", "huge", "--out", str(out)]) == 2
