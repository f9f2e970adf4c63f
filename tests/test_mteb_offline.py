"""crossbert-mteb offline: local classification (JSONL) and STS (JSONL and TSV) tasks through the real mteb
package, with a tiny random HF BERT built in the test (no network)."""

from __future__ import annotations

import json

import pytest

from megatron_crossbert.evaluation.mteb_tasks import LocalTaskSpec, read_sts_file
from synthetic_eval import write_glue_fixture, write_jsonl_task, write_sts_jsonl


def test_local_spec_parsing(tmp_path):
    spec = LocalTaskSpec.parse(f"sts:my-sts:{tmp_path}/a:b.jsonl")
    assert spec.kind == "sts" and spec.name == "my-sts" and str(spec.path).endswith("a:b.jsonl")
    with pytest.raises(ValueError):
        LocalTaskSpec.parse("retrieval:x:/tmp")


def test_sts_file_formats(tmp_path):
    jsonl = read_sts_file(write_sts_jsonl(tmp_path / "sts.jsonl", n=6))
    assert len(jsonl["sentence1"]) == 6 and jsonl["score"][0] == 5.0
    tsv = read_sts_file(write_glue_fixture(tmp_path / "glue", n=5) / "STS-B" / "dev.tsv")
    assert len(tsv["sentence2"]) == 5 and isinstance(tsv["score"][1], float)


def test_crossbert_mteb_offline_local_tasks(tmp_path, tiny_hf_encoder):
    from megatron_crossbert.cli.mteb import main

    model = tiny_hf_encoder
    write_jsonl_task(tmp_path / "cls", n_train=40, n_test=30)
    sts = write_sts_jsonl(tmp_path / "sts.jsonl", n=30)
    out = tmp_path / "out"
    rc = main(["--model", str(model), "--local-task", f"classification:toycls:{tmp_path / 'cls'}",
               "--local-task", f"sts:toysts:{sts}", "--n-experiments", "2", "--max-len", "16",
               "--raise-error", "--out", str(out)])
    assert rc == 0
    summary = json.loads((out / "mteb_summary.json").read_text())
    scores = {row["task"]: row for row in summary["tasks"]}
    assert set(scores) == {"toycls", "toysts"} and not summary["errors"]
    assert scores["toycls"]["type"] == "Classification" and scores["toycls"]["main_score"] > 60.0
    assert scores["toysts"]["type"] == "STS" and -100.0 <= scores["toysts"]["main_score"] <= 100.0
    per_task = json.loads((out / "toysts.json").read_text())
    assert "cosine_spearman" in per_task["scores"]["test"][0]
    assert "| toycls |" in (out / "mteb_summary.md").read_text()
