"""The ablations' trajectory rows: each run read the study's way at the plan's earlier probe steps.

A plan that probes at ``probe_at`` gets one row per earlier step after each run's first row, keyed
``<row>@<step>`` and sealed under a key that names the step (the final rows' keys stay as they were, so their
records still load). ``--probe-only`` measures the rows whose checkpoints exist, a decoder run still training
included, and trains nothing. The page shows each run's rank and cosine along its steps.
"""

from __future__ import annotations

import dataclasses
import json

from experiments.claims.ablations import run as ablations
from experiments.claims.ablations.page import ablations_section
from experiments.claims.ablations.rows import plan_rows, row_path
from experiments.claims.ablations.sealed_rows import row_key
from experiments.claims.study.plan import resolve_plan
from experiments.claims.study.train_stage import run_dir
from megatron_crossbert.checkpoint.directories import RUN_CONFIG_FILE
from megatron_crossbert.results_page.render import render_section


def _plan():
    """The smoke plan trained 4 steps and probed at steps 1 and 2 besides its last."""
    return dataclasses.replace(resolve_plan("smoke"), sample_steps=4, save_interval=1, probe_at=[1, 2, 4])


def _checkpoint(folder, run, step: int) -> None:
    path = run_dir(folder, run) / f"iter_{step:07d}"
    path.mkdir(parents=True)
    (path / RUN_CONFIG_FILE).write_text("{}")


def test_each_run_gets_a_row_per_earlier_probe_step_keyed_by_its_step(tmp_path):
    plan = _plan()
    rows = plan_rows(plan, tmp_path / "work", tmp_path / "out")
    keys = [row.key for row in rows]
    at = keys.index("crossbert-compl-s1--r0")
    study = "crossbert-compl-s1--r0"
    assert keys[at:at + 7] == [study, f"{study}@1", f"{study}@2", *[f"{study}~geometry@{s}" for s in (1, 2, 4)],
                               "crossbert-compl-s1--r1"]
    assert keys[keys.index("dec1"):keys.index("dec1") + 6] == ["dec1", "dec1@1", "dec1@2", "dec1~geometry@1",
                                                               "dec1~geometry@2", "dec1~geometry@4"]
    assert "dec2@1" not in keys  # the 2-layer decoder is the study's run: its trajectory is the r0 rows'
    point = rows[keys.index("dec1@1")]
    assert (point.group, point.step, point.with_mteb, point.trained_here) == ("trajectory", 1, False, False)
    assert row_key(plan, point)["step"] == 1 and "step" not in row_key(plan, rows[keys.index("dec1")])
    geometry = rows[keys.index("dec1~geometry@4")]
    assert (geometry.measure, geometry.base, geometry.with_mteb) == ("geometry", "dec1", False)
    assert row_key(plan, geometry)["measure"] == "geometry" and "measure" not in row_key(plan, point)
    smoke = plan_rows(resolve_plan("smoke"), tmp_path, tmp_path)  # no probe_at: geometry at the last step only
    assert not [row for row in smoke if row.group == "trajectory"]
    assert [row.key for row in smoke if row.group == "geometry"][:1] == ["crossbert-compl-s1--r0~geometry@2"]


def test_probe_only_measures_the_points_a_training_run_has_reached_and_trains_nothing(tmp_path, monkeypatch, capsys):
    plan, out = _plan(), tmp_path / "work" / "ablations"
    rows = plan_rows(plan, tmp_path / "work", out)
    dec1 = next(row for row in rows if row.key == "dec1")
    _checkpoint(out, dec1.run, 1)  # the decoder run is training: step 1 saved, step 2 not yet
    seen = []

    def fake_measure(plan, row, checkpoint, inputs, glue, mteb):
        seen.append((row.key, checkpoint.name, list(mteb)))
        return {"effective_rank": 3.0, "mean_cosine": 0.5, "dim": 32}

    monkeypatch.setattr(ablations, "measure", fake_measure)
    monkeypatch.setattr(ablations, "run_train_stage", lambda *a: (_ for _ in ()).throw(AssertionError("trained")),
                        raising=False)
    monkeypatch.setattr(ablations, "measure_geometry",
                        lambda plan, row, checkpoint, inputs, glue: seen.append((row.key, checkpoint.name)) or {})
    inputs = ablations.Inputs(tmp_path / "work", "glue", None, None, train=False)
    results = ablations.measure_rows(plan, rows, inputs, out, (["glue"], ["mteb"]))
    assert seen == [("dec1@1", "iter_0000001", []), ("dec1~geometry@1", "iter_0000001")]  # no MTEB-lite
    record = json.loads(row_path(out, rows[[r.key for r in rows].index("dec1@1")]).read_text())
    assert record["steps"] == 1 and record["group"] == "trajectory"
    assert "crossbert-compl-dec1-s1 is not trained yet (no checkpoint at step 4)" in capsys.readouterr().out
    assert {row["key"]: row["done"] for row in results["rows"]}["dec1@1"]


def test_the_page_shows_each_runs_rank_and_cosine_along_its_steps():
    def row(key, group, rank, done=True):
        return {"key": key, "group": group, "model": "crossbert-compl-dec1-s1", "what": "w", "done": done,
                "effective_rank": rank, "mean_cosine": 0.25, "glue_raw": 50.0, "glue_whitened": 51.0,
                "mteb_raw": None, "dim": 128, "cpu_s": 60.0}

    rows = [row("dec1", "decoder", 30.0), {**row("dec1@610", "trajectory", 12.5), "base": "dec1", "step": 610},
            {**row("dec1@1220", "trajectory", 0.0, done=False), "base": "dec1", "step": 1220}]
    text = render_section(ablations_section({"plan": "p", "seed": 1, "rows": rows, "written_utc": "now"}))
    table = text[text.index("Along training"):]
    assert "step 610" in table and "step 1220" in table and "final" in table
    assert "| crossbert-compl-dec1-s1 | 12.5 / 0.25 | — | 30.0 / 0.25 |" in table
    assert "dec1@610" not in text.split("Along training")[0]  # the main table keeps the final checkpoints


def test_a_decoder_that_reads_positions_is_compared_with_its_counterpart_where_both_were_measured():
    from experiments.claims.ablations.page import positions_text

    def geometry(base, step, position, rank):
        return {"key": f"{base}~geometry@{step}", "group": "geometry", "base": base, "step": step, "done": True,
                "position_share": position, "token_effective_rank": rank, "pc1_share": 0.5}

    rows = [{"key": "dec2", "group": "decoder", "same_as": "crossbert-compl-s1--r0", "counterpart": None},
            {"key": "ctxpos", "group": "decoder", "counterpart": "dec2"},
            geometry("crossbert-compl-s1--r0", 610, 0.07, 12.3), geometry("crossbert-compl-s1--r0", 4880, 0.78, 13.4),
            geometry("ctxpos", 610, 0.01, 20.0)]
    assert positions_text(rows) == (
        "Decoders that add each visible token's position to what they read, against the same decoder without: "
        "ctxpos against dec2 at step 610: position share 0.07 -> 0.01, token rank 12.3 -> 20.0, first direction "
        "0.50 -> 0.50.")
    assert positions_text(rows[:3]) == ""  # nothing to compare yet


def test_the_geometry_table_lists_the_measured_points_and_counts_the_rest():
    from experiments.claims.ablations.page import geometry_blocks

    measured = {"key": "dec1~geometry@610", "group": "geometry", "model": "crossbert-compl-dec1-s1", "step": 610, "base": "dec1",
                "done": True, "token_effective_rank": 11.84, "pc1_share": 0.42, "identity_share": 0.6,
                "position_share": 0.06, "pooled_length_r": 0.43}
    pending = {"key": "dec1~geometry@1220", "group": "geometry", "model": "crossbert-compl-dec1-s1", "step": 1220, "base": "dec1",
               "done": False}
    text = render_section(ablations_section({"plan": "p", "seed": 1, "rows": [measured, pending],
                                             "written_utc": "now"}))
    assert "| crossbert-compl-dec1-s1 | 610 | 11.84 | 0.42 | 0.60 | 0.06 | 0.43 |" in text
    assert "1220 |" not in text and "1 points of runs still training are not measured yet" in text
    assert geometry_blocks([pending]) == []
