"""The collapse ablations (``python -m experiments.claims.ablations``) at smoke size: probe-time rows on the
study's seed-1 checkpoints and decoder rows trained through the study's stage, each with GLUE raw and whitened,
MTEB-lite raw, effective rank and mean cosine; a rerun measures and trains nothing; the page keeps every other
byte."""

from __future__ import annotations

import json

import pytest
import yaml

from experiments.claims.__main__ import main as claims_main
from experiments.claims.ablations.run import main
from experiments.claims.ablations.page import ablations_text
from tests.experiments.test_claims import _write_fixtures
from tests.support import REPO_ROOT


def test_help_says_what_it_reads_and_writes(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    assert "--work-dir" in text and "collapse-ablations" in text


def test_the_page_shows_unmeasured_rows_and_names_no_cause_yet():
    rows = [{"key": "crossbert-compl-s1--r0", "group": "probe-time", "model": "crossbert-compl-s1",
             "what": "all tokens", "done": False}]
    text = ablations_text({"plan": "p", "seed": 1, "rows": rows, "written_utc": "now"})
    assert "not measured yet" in text and "once the study's CrossBERT reading" in text


@pytest.mark.e2e
def test_the_ablations_measure_every_row_and_resume(tmp_path):
    from tests.support.synthetic_eval import write_mteb_lite_fixture

    corpus, glue = _write_fixtures(tmp_path)
    mteb_lite = write_mteb_lite_fixture(tmp_path / "mteb_lite", pairs=12, per_label=8)
    raw = yaml.safe_load((REPO_ROOT / "experiments" / "claims" / "plans" / "smoke.yaml").read_text())
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump({**raw, "seeds": [1], "reference": False, "pooler_pairs": 0}))
    work, page = tmp_path / "work", tmp_path / "results.md"
    assert claims_main(["--plan", str(plan), "--work-dir", str(work), "--corpus", str(corpus), "--glue-dir",
                        str(glue), "--probe-dir", str(tmp_path), "--stages", "data", "train",
                        "--mteb-lite-dir", "none"]) == 0
    kept = "# page\n\n<!-- recipe-sweep:start -->\nkept\n<!-- recipe-sweep:end -->\n"
    page.write_text(kept)
    argv = ["--plan", str(plan), "--work-dir", str(work), "--glue-dir", str(glue), "--mteb-lite-dir", str(mteb_lite),
            "--results-md", str(page)]
    assert main(argv) == 0
    out = work / "ablations"
    results = json.loads((out / "results.json").read_text())
    rows = {row["key"]: row for row in results["rows"]}
    assert [key for key in rows if key.startswith("bert-s1")] == [f"bert-s1--r{i}" for i in range(4)]
    assert list(rows)[-4:] == ["dec2", "dec1", "dec1-half", "xattn"]
    for row in rows.values():
        assert row["done"] and row["glue_raw"] is not None and row["glue_whitened"] is not None, row
        assert row["mteb_raw"] is not None and 0 < row["effective_rank"] <= row["dim"] == 32
        assert -1 <= row["mean_cosine"] <= 1
    assert rows["dec2"]["same_as"] == "crossbert-compl-s1--r0"
    assert rows["dec2"]["effective_rank"] == rows["crossbert-compl-s1--r0"]["effective_rank"]
    assert rows["crossbert-compl-s1--r1"]["encoding"]["visible_fraction"] == 0.5
    assert rows["crossbert-compl-s1--r1"]["effective_rank"] != rows["crossbert-compl-s1--r0"]["effective_rank"]
    assert all(rows[key]["train_cpu_s"] > 0 for key in ("dec1", "dec1-half", "xattn"))
    config = yaml.safe_load((out / "runs" / "crossbert-compl-xattn-s1.yaml").read_text())
    assert config["model"]["decoder_cross_attention_only"] and config["model"]["decoder_num_layers"] == 1
    half = yaml.safe_load((out / "runs" / "crossbert-compl-dec1-half-s1.yaml").read_text())["model"]
    assert half["decoder_hidden_size"] == 16 and half["decoder_num_layers"] == 1
    text = page.read_text()
    assert text.startswith(kept) and "<!-- collapse-ablations:start" in text and "Largest rise" in text
    commands, stamps = (out / "commands.jsonl").read_text(), {p: p.stat().st_mtime_ns for p in out.glob("rows/*")}
    assert main(argv) == 0  # resumes: every row on disk, nothing trained or measured again
    assert (out / "commands.jsonl").read_text() == commands
    assert {p: p.stat().st_mtime_ns for p in out.glob("rows/*")} == stamps
