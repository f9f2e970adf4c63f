"""Smoke tests for the benchmarks: each runs at a tiny size and writes valid JSON.

No timing assertions (2 shared CPU cores make timings meaningless here). The sample-efficiency
smoke plan trains one tiny model for 2 steps and probes it on 40 SST-2 rows, through the real
CLIs; the data it needs is generated in the test (third-party text is never committed).
"""

from __future__ import annotations

import json
import random

import pytest
import torch

from megatron_crossbert.cli.bench import main

WORDS = ("the a model token encoder reads visible text while decoder rebuilds masked words from "
         "context and probes measure frozen features on small tasks every step").split()


def _sentence(rng: random.Random, n: int = 12) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def _write_fixtures(root) -> tuple:
    """A JSONL corpus and a GLUE-layout SST-2 task made of random sentences."""
    rng = random.Random(0)
    corpus = root / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"text": " ".join(_sentence(rng) for _ in range(8))}) + "\n"
                              for _ in range(300)))
    sst = root / "glue" / "SST-2"
    sst.mkdir(parents=True)
    for split, rows in (("train", 60), ("dev", 30)):
        lines = ["sentence\tlabel"] + [f"{_sentence(rng)}\t{i % 2}" for i in range(rows)]
        (sst / f"{split}.tsv").write_text("\n".join(lines) + "\n")
    return corpus, root / "glue"


def test_throughput_tiny_writes_json(tmp_path, capsys):
    out = tmp_path / "tp.json"
    assert main(["throughput", "--size", "tiny", "--steps", "1", "--warmup", "1", "--profile",
                 "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    names = [r["name"] for r in report["results"]]
    assert names[0] == "bert" and len(names) == 6
    assert {"mlm-modern", "crossbert-modern r=0.5 compl"} <= set(names)
    for result in report["results"]:
        assert result["samples_per_s"] > 0 and result["supervised_tokens_per_s"] > 0
        assert result["samples_per_s_vs_ref"] > 0 and result["model_flops_per_sample"] > 0
        assert result["reference"] == ("mlm-modern" if result["encoder"] == "modern" else "bert")
    assert set(report["profile"]) == set(names)
    assert "| model |" in capsys.readouterr().out


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU the check really runs (minutes)")
def test_gpu_check_degrades_without_cuda(tmp_path):
    out = tmp_path / "gpu.json"
    assert main(["gpu-check", "--out", str(out)]) == 0
    payload = json.loads(out.read_text())
    assert payload["status"] == "skipped" and "CUDA" in payload["reason"]


@pytest.mark.e2e
def test_sample_efficiency_smoke_plan(tmp_path):
    corpus, glue = _write_fixtures(tmp_path)
    work, results = tmp_path / "work", tmp_path / "docs" / "results.md"
    argv = ["sample-efficiency", "--plan", "smoke", "--work-dir", str(work), "--corpus", str(corpus),
            "--glue-dir", str(glue), "--probe-dir", str(tmp_path / "none"), "--results-md", str(results),
            "--figures-dir", str(tmp_path / "docs" / "figures"), "--throughput-json", str(tmp_path / "absent.json")]
    assert main(argv) == 0
    status = json.loads((work / "status.json").read_text())
    assert all(not str(v).startswith("FAILED") for v in status.values()), status
    probe = json.loads((work / "probes" / "crossbert-compl" / "iter_0000002.json").read_text())
    assert "SST-2" in probe["tasks"]
    assert "Sample efficiency" in results.read_text()
    assert main(argv) == 0  # a second run finds everything done and only rewrites the report


def test_checkpoint_bench_tiny_writes_json_and_table(tmp_path, capsys):
    out = tmp_path / "ckpt.json"
    assert main(["checkpoint", "--sizes", "tiny", "--repeats", "1", "--work-dir", str(tmp_path / "work"),
                 "--out", str(out)]) == 0
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
