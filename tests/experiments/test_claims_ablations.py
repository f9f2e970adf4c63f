"""The collapse ablations (``python -m experiments.claims.ablations``) at smoke size: probe-time rows on the
study's seed-1 checkpoints and decoder rows trained through the study's stage, each with GLUE raw and whitened,
MTEB-lite raw, effective rank and mean cosine; a run killed mid-way resumes from its records on a fresh work dir
without measuring or training a sealed row again; a rerun measures and trains nothing; the page keeps every other
byte. Several processes split the rows by lock files, and a stop signal ends the ablations after its row."""

from __future__ import annotations

import dataclasses
import json
import shutil
import signal
import subprocess

import pytest
import yaml

from experiments.claims.__main__ import main as claims_main
from experiments.claims.ablations import run as ablations
from experiments.claims.ablations.page import ablations_section
from experiments.claims.ablations.rows import plan_rows, row_path
from experiments.claims.ablations.run import main
from experiments.claims.ablations.sealed_rows import restore_rows, seal_row
from experiments.claims.study import records as rec
from experiments.claims.study.commands import read_command_log
from experiments.claims.study.plan import resolve_plan
from experiments.claims.study.stopping import StudyStopped
from megatron_crossbert.results_page.render import render_section
from tests.experiments.test_claims import _write_fixtures
from tests.experiments.test_claims_resume import _kill_when
from tests.support import REPO_ROOT


def test_help_says_what_it_reads_and_writes(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    assert "--work-dir" in text and "collapse-ablations" in text


def test_the_page_shows_unmeasured_rows_and_names_no_cause_yet():
    rows = [{"key": "crossbert-compl-s1--r0", "group": "probe-time", "model": "crossbert-compl-s1",
             "what": "all tokens", "done": False}]
    text = render_section(ablations_section({"plan": "p", "seed": 1, "rows": rows, "written_utc": "now"}))
    assert "not measured yet" in text and "once the study's CrossBERT reading" in text


def test_the_cause_says_whether_a_row_brings_crossberts_rank_near_berts():
    def row(key, model, group, rank):
        return {"key": key, "model": model, "group": group, "what": key, "done": True, "effective_rank": rank,
                "mean_cosine": 0.5, "glue_raw": 40.0, "glue_whitened": 45.0, "mteb_raw": 30.0}

    rows = [row("crossbert-compl-s1--r0", "crossbert-compl-s1", "probe-time", 10.0),
            row("crossbert-compl-s1--r1", "crossbert-compl-s1", "probe-time", 13.2),
            row("bert-s1--r0", "bert-s1", "probe-time", 60.0)]
    assert "**No final-checkpoint row restores the rank**: the highest is 22% of BERT's 60.0" in ablations_section_text(rows)
    rows.append(row("xattn", "crossbert-compl-xattn-s1", "decoder", 40.0))
    text = ablations_section_text(rows)
    assert "crossbert-compl-xattn-s1, xattn**, 10.0 -> 40.0" in text and "restores the rank to 67% of BERT's" in text


def ablations_section_text(rows: list[dict]) -> str:
    return render_section(ablations_section({"plan": "p", "seed": 1, "rows": rows, "written_utc": "now"}))


def test_a_row_sharing_an_unmeasured_rows_numbers_is_not_done_and_the_page_renders(tmp_path):
    """The 2-layer decoder row shares the study's CrossBERT reading: with only BERT's rows measured (CrossBERT's
    run still training), it is 'not measured yet', not a row without numbers that breaks the page."""
    plan, work = resolve_plan("smoke"), tmp_path / "work"
    out = work / "ablations"
    rows = plan_rows(plan, work, out)
    bert = next(row for row in rows if row.model.startswith("bert"))
    row_path(out, bert).parent.mkdir(parents=True)
    row_path(out, bert).write_text(json.dumps({"glue_raw": 50.0, "glue_whitened": 51.0, "mteb_raw": 40.0,
                                               "effective_rank": 60.0, "dim": 128, "mean_cosine": 0.8,
                                               "cpu_s": 60.0}))
    results = ablations.collect(plan, rows, out)
    shared = [row for row in results["rows"] if row.get("same_as")]
    assert shared and not any(row["done"] for row in shared)
    assert [row["key"] for row in results["rows"] if row["done"]] == [bert.key]
    text = render_section(ablations_section(results))
    assert "50.0" in text and "not measured yet" in text


def _fake_rows(tmp_path, monkeypatch, stop_after: str | None = None, checkpoints: bool = True):
    """The smoke plan's rows, measuring replaced by writing the row's JSON, and with ``checkpoints`` every study
    checkpoint taken as there: (plan, rows, inputs, out, the keys measured in order)."""
    plan, work = resolve_plan("smoke"), tmp_path / "work"
    out = work / "ablations"
    out.mkdir(parents=True)
    measured = []

    def fake_run_row(plan, row, inputs, out, tasks):
        measured.append(row.key)
        row_path(out, row).parent.mkdir(parents=True, exist_ok=True)
        row_path(out, row).write_text(json.dumps({"key": row.key, "cpu_s": 1.0, "wall_s": 2.0}))
        return True

    monkeypatch.setattr(ablations, "run_row", fake_run_row)
    if checkpoints:
        monkeypatch.setattr(ablations, "waiting", lambda row, train=True: None)
    monkeypatch.setattr(ablations, "stop_requested",
                        lambda: StudyStopped(signal.SIGTERM) if stop_after in measured else None)
    return plan, plan_rows(plan, work, out), ablations.Inputs(work, "glue", None, None), out, measured


def test_two_processes_split_the_rows_by_lock_files(tmp_path, monkeypatch):
    plan, rows, inputs, out, measured = _fake_rows(tmp_path, monkeypatch)
    held = rows[1]
    other = subprocess.Popen(["sleep", "30"])  # another live ablations process holds one row
    try:
        (out / "rows").mkdir()
        row_path(out, held).with_suffix(".lock").write_text(str(other.pid))
        ablations.measure_rows(plan, rows, inputs, out, ([], []))
    finally:
        other.kill()
        other.wait()
    assert held.key not in measured and rows[0].key in measured
    assert measured == [row.key for row in rows if row.same_as is None and row is not held]
    assert [lock.name for lock in (out / "rows").glob("*.lock")] == [f"{held.key}.lock"]  # each took its own


def test_a_stop_signal_ends_the_ablations_after_its_row(tmp_path, monkeypatch):
    plan, rows, inputs, out, measured = _fake_rows(tmp_path, monkeypatch, stop_after="dec1")
    with pytest.raises(StudyStopped):
        ablations.measure_rows(plan, rows, inputs, out, ([], []))
    assert measured[-1] == "dec1" and "dec1-half" not in measured


def test_a_probe_time_row_without_its_checkpoint_waits_in_one_line_per_run(tmp_path, monkeypatch, capsys):
    plan, rows, inputs, out, measured = _fake_rows(tmp_path, monkeypatch, checkpoints=False)
    ablations.measure_rows(plan, rows, inputs, out, ([], []))
    lines = [line for line in capsys.readouterr().out.splitlines() if "not trained yet" in line]
    study = [line.split(":")[0] for line in lines if str(tmp_path / "work" / "runs") in line]
    assert study == ["[ablations] crossbert-compl-s1", "[ablations] bert-s1", "[ablations] crossbert-compl-s2",
                     "[ablations] bert-s2", "[ablations] init-reference-s1", "[ablations] init-reference-s2"]
    assert measured == ["dec1", "dec1-half", "xattn", "ctxpos", "xattn-ctxpos", "tokloss-final",
                        "tokloss-final-s2"]  # each trains its own run; one line per study run, not per row
    assert len(lines) == 13  # and their geometry rows wait for the checkpoints this fake training did not write


def test_a_row_measured_here_is_sealed_without_its_checkpoint(tmp_path, monkeypatch):
    """A row measured before its process was stopped is sealed by the next one, even where the checkpoint it read
    is gone: its numbers are on disk."""
    plan, rows, inputs, out, measured = _fake_rows(tmp_path, monkeypatch, checkpoints=False)
    row = rows[0]
    row_path(out, row).parent.mkdir(parents=True)
    row_path(out, row).write_text(json.dumps({"key": row.key, "cpu_s": 1.0, "wall_s": 2.0}))
    inputs.records = tmp_path / "records"
    ablations.measure_rows(plan, rows, inputs, out, ([], []))
    assert rec.is_sealed(inputs.records, row.key) and row.key not in measured


def test_a_sealed_row_comes_back_into_a_fresh_work_dir_as_it_was(tmp_path, monkeypatch):
    monkeypatch.setattr(rec, "data_identity", lambda tokenizer, prefix: {"tokenizer": "t", "dataset": "d"})
    plan, rows, inputs, out, _ = _fake_rows(tmp_path, monkeypatch)
    row, records = rows[1], tmp_path / "records"
    ablations.run_row(plan, row, inputs, out, ([], []))
    record = json.loads(seal_row(records, plan, row, out).read_text())
    assert record["cost"] == {"cpu_s": 1.0, "wall_s": 2.0} and record["probes"] == [f"{row.key}.json"]
    fresh = tmp_path / "fresh"
    assert restore_rows(records, plan, rows, fresh, {"probe": {}}) == [row.key]
    assert row_path(fresh, row).read_bytes() == row_path(out, row).read_bytes()
    other = dataclasses.replace(plan, lr=plan.lr * 2)  # a record of another plan's run: one line naming the file
    with pytest.raises(ValueError, match=f"{row.key}.json: run {row.key} was made with another configuration"):
        restore_rows(records, other, plan_rows(other, tmp_path / "w", tmp_path / "o"), tmp_path / "o", {"probe": {}})


@pytest.mark.e2e
def test_the_ablations_measure_every_row_and_resume_from_their_records(tmp_path):
    """Killed while it trains its second decoder run (every probe-time row and the first decoder row sealed by
    then), its work dir deleted (a new session's machine) and rebuilt by the study's data stage: the same command
    trains and measures only the rows that were not sealed, and the sealed ones come back as they were."""
    from tests.support.synthetic_eval import write_mteb_lite_fixture

    corpus, glue = _write_fixtures(tmp_path)
    mteb_lite = write_mteb_lite_fixture(tmp_path / "mteb_lite", pairs=12, per_label=8)
    raw = yaml.safe_load((REPO_ROOT / "experiments" / "claims" / "plans" / "smoke.yaml").read_text())
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump({**raw, "seeds": [1], "reference": False, "pooler_pairs": 0}))
    work, page, records = tmp_path / "work", tmp_path / "results.md", tmp_path / "records"
    study = ["--plan", str(plan), "--work-dir", str(work), "--corpus", str(corpus), "--glue-dir", str(glue),
             "--probe-dir", str(tmp_path), "--mteb-lite-dir", "none", "--stages", "data"]
    assert claims_main([*study, "train"]) == 0
    kept = "# page\n\n<!-- recipe-sweep:start -->\nkept\n<!-- recipe-sweep:end -->\n"
    page.write_text(kept)
    argv = ["--plan", str(plan), "--work-dir", str(work), "--glue-dir", str(glue), "--mteb-lite-dir", str(mteb_lite),
            "--results-md", str(page), "--records", str(records), "--threads", "1"]
    out = work / "ablations"
    _kill_when(argv, lambda: (out / "runs" / "crossbert-compl-dec1-half-s1").is_dir(), timeout=900,
               module="experiments.claims.ablations")
    sealed = {path.name: path.read_bytes() for path in (out / "rows").glob("*.json")}
    assert len(sealed) == 12 and all(rec.is_sealed(records, name[:-len(".json")]) for name in sealed)
    shutil.rmtree(work)  # the session's machine is gone; only the records are left
    assert claims_main(study) == 0  # the next session rebuilds the study's data
    assert main(argv) == 0
    assert {name: (out / "rows" / name).read_bytes() for name in sealed} == sealed  # restored, not measured again
    trained = [entry["argv"][-1].rsplit("/", 1)[-1] for entry in read_command_log(out)]
    assert trained == ["crossbert-compl-dec1-half-s1.yaml", "crossbert-compl-xattn-s1.yaml",
                       "crossbert-compl-ctxpos-s1.yaml", "crossbert-compl-xattn-ctxpos-s1.yaml",
                       "crossbert-compl-tokloss-s1.yaml"]  # the unsealed only; the final row's to its end
    assert "--exit-at-iteration" not in read_command_log(out)[-1]["argv"]
    assert rec.sealed_record(out / "runs" / "crossbert-compl-dec1-s1") is not None  # the sealed one: complete
    results = json.loads((out / "results.json").read_text())
    rows = {row["key"]: row for row in results["rows"]}
    assert [key for key in rows if key.startswith("bert-s1")] == ["bert-s1--r0", "bert-s1--r0~geometry@2",
                                                                   *[f"bert-s1--r{i}" for i in range(1, 4)]]
    assert [key for key in rows if rows[key]["group"] == "decoder"] == ["dec2", "dec1", "dec1-half", "xattn",
                                                                        "ctxpos", "xattn-ctxpos"]
    geometry = {key: rows.pop(key) for key in list(rows) if rows[key]["group"] == "geometry"}
    assert sorted(geometry) == sorted(f"{key}~geometry@2" for key in ("crossbert-compl-s1--r0", "bert-s1--r0",
                                                                      "dec1", "dec1-half", "xattn", "ctxpos",
                                                                      "xattn-ctxpos", "tokloss-final"))
    for key, row in geometry.items():
        assert row["done"] and 0 < row["token_effective_rank"] <= 32 and 0 <= row["position_share"] <= 1, key
        assert 0 <= row["identity_share"] <= 1 and row["n_texts"] > 0 and rec.is_sealed(records, key)
    for row in rows.values():
        assert row["done"] and row["glue_raw"] is not None and row["glue_whitened"] is not None, row
        assert row["mteb_raw"] is not None and 0 < row["effective_rank"] <= row["dim"] == 32
        assert -1 <= row["mean_cosine"] <= 1
        assert row.get("same_as") or rec.is_sealed(records, row["key"]), row["key"]
    assert rows["tokloss-final"]["group"] == "final" and rows["tokloss-final"]["steps"] == 2
    assert all(rows[key]["valid_loss"] > 0 for key in ("dec1", "tokloss-final"))  # their held-out loss, restored too
    assert rows["dec2"]["same_as"] == "crossbert-compl-s1--r0"
    assert rows["dec2"]["effective_rank"] == rows["crossbert-compl-s1--r0"]["effective_rank"]
    assert rows["crossbert-compl-s1--r1"]["encoding"]["visible_fraction"] == 0.5
    assert rows["crossbert-compl-s1--r1"]["effective_rank"] != rows["crossbert-compl-s1--r0"]["effective_rank"]
    assert all(rows[key]["train_cpu_s"] > 0 for key in ("dec1", "dec1-half", "xattn", "ctxpos", "xattn-ctxpos"))
    assert sorted(json.loads((records / "runs" / "dec1.json").read_text())["losses"]) == ["2"]  # its held-out loss
    config = yaml.safe_load((out / "runs" / "crossbert-compl-xattn-s1.yaml").read_text())
    assert config["model"]["decoder_cross_attention_only"] and config["model"]["decoder_num_layers"] == 1
    half = yaml.safe_load((out / "runs" / "crossbert-compl-dec1-half-s1.yaml").read_text())["model"]
    assert half["decoder_hidden_size"] == 16 and half["decoder_num_layers"] == 1
    positions = yaml.safe_load((out / "runs" / "crossbert-compl-ctxpos-s1.yaml").read_text())["model"]
    assert positions["decoder_context_position_embedding"] and positions["decoder_num_layers"] == 2
    text = page.read_text()
    assert text.startswith(kept) and "<!-- collapse-ablations:start" in text and "Largest rise" in text
    commands, stamps = (out / "commands.jsonl").read_text(), {p: p.stat().st_mtime_ns for p in out.glob("rows/*")}
    assert main(argv) == 0  # resumes: every row on disk, nothing trained or measured again
    assert (out / "commands.jsonl").read_text() == commands
    assert {p: p.stat().st_mtime_ns for p in out.glob("rows/*")} == stamps
