"""The ablations' final rows: a seeded variant of CrossBERT's loss trained on past its early step to its run's
end, at every study seed, and read there beside the study's final checkpoints of that seed.

The final row resumes the early row's own run (same name, same config) without ``--exit-at-iteration``, scores
MTEB-lite like every final reading, and the page pairs it with the study's CrossBERT, BERT and untrained encoder
seed by seed; only seed 1's reading joins the main table, so the cause names a seed-1 row.
"""

from __future__ import annotations

import dataclasses

from experiments.claims.ablations import run as ablations
from experiments.claims.ablations.page import ablations_section, main_rows
from experiments.claims.ablations.page_seeds import final_seed_blocks
from experiments.claims.ablations.rows import plan_rows
from experiments.claims.study.plan import run_spec_config
from megatron_crossbert.results_page import Heading, Section
from megatron_crossbert.results_page.render import render_section
from tests.experiments.test_claims_ablations_early import fake_training
from tests.experiments.test_claims_ablations_trajectory import _checkpoint, _plan


def test_a_final_row_resumes_its_early_run_to_the_end_at_every_seed(tmp_path):
    plan = dataclasses.replace(_plan(), seeds=[1, 2, 3])
    rows = {row.key: row for row in plan_rows(plan, tmp_path / "work", tmp_path / "out")}
    final, early = rows["tokloss-final-s2"], rows["tokloss-s2"]
    assert final.run == early.run and final.run.name == "crossbert-compl-tokloss-s2"  # the same run, resumed
    assert (final.group, final.step, final.exit_at, final.trained_here, final.with_mteb, final.read_step) == (
        "final", None, None, True, True, plan.sample_steps)
    assert run_spec_config(plan, final.run).model.encoder_token_loss_weight == 1.0
    geometry = rows[f"tokloss-final-s2~geometry@{plan.sample_steps}"]
    assert (geometry.base, geometry.step, geometry.trained_here) == ("tokloss-final-s2", plan.sample_steps, False)
    references = [key for key, row in rows.items() if row.group == "final-reference"]
    assert references == ["crossbert-compl-s2--r0", "bert-s2--r0", "crossbert-compl-s3--r0", "bert-s3--r0",
                          *[f"init-reference-s{seed}--r0" for seed in (1, 2, 3)]]  # seed 1's are probe-time rows
    untrained = rows["init-reference-s3--r0"]
    assert (untrained.read_step, untrained.with_mteb, untrained.run_dir) == (1, True, tmp_path / "work")


def test_the_final_row_trains_on_from_the_early_checkpoint_without_a_stop(tmp_path, monkeypatch):
    plan, out = _plan(), tmp_path / "work" / "ablations"
    row = next(row for row in plan_rows(plan, tmp_path / "work", out) if row.key == "tokloss-final")
    _checkpoint(out, row.run, 1)  # the early row's checkpoint
    commands = fake_training(monkeypatch, tmp_path, out, row.run, plan.sample_steps)
    assert ablations.run_row(plan, row, ablations.Inputs(tmp_path / "work", "glue", None, None), out, ([], []))
    assert len(commands) == 1 and "--exit-at-iteration" not in commands[0]
    assert (out / "rows" / "tokloss-final.json").is_file()


def _final(key, group, model, seed, rank, glue, mteb):
    return {"key": key, "group": group, "model": model, "what": "w", "done": True, "base": None, "step": 4880,
            "seed": seed, "effective_rank": rank, "mean_cosine": 0.3, "glue_raw": glue, "glue_whitened": 50.0,
            "mteb_raw": mteb, "valid_loss": 5.4 - mteb / 1000}


def _rows():
    rows = []
    for seed, (cross, bert, mine) in {1: (10.0, 60.0, 90.0), 2: (11.0, 62.0, 93.0), 3: (9.0, 61.0, 90.0)}.items():
        study = "probe-time" if seed == 1 else "final-reference"
        rows += [_final(f"crossbert-compl-s{seed}--r0", study, f"crossbert-compl-s{seed}", seed, cross, 40.0, 30.0),
                 _final(f"bert-s{seed}--r0", study, f"bert-s{seed}", seed, bert, 50.0 + seed, 45.0),
                 _final(f"init-reference-s{seed}--r0", "final-reference", f"init-reference-s{seed}", seed, 80.0, 47.0,
                        40.0),
                 {**_final("tokloss-final" if seed == 1 else f"tokloss-final-s{seed}", "final",
                           f"crossbert-compl-tokloss-s{seed}", seed, mine, 52.0, 40.0 + seed), "what": "own ids"}]
    return rows


def test_the_page_pairs_a_final_variant_with_the_study_runs_final_checkpoints_seed_by_seed():
    rows = _rows()
    text = render_section(Section("s", Heading("t", 3), "", "now", final_seed_blocks(rows)))
    assert "| crossbert-compl-tokloss-s2 | 2 | 52.0 | 50.0 | 42.0 | 93.0 | 0.300 | 5.358 |" in text
    assert "| init-reference-s3 | 3 | 47.0 | 50.0 | 40.0 | 80.0 | 0.300 |" in text
    assert "| tokloss-final | MTEB-lite raw − the study's CrossBERT | +12.0 ± 2.5 (n=3) | higher |" in text
    assert "| tokloss-final | GLUE raw − the study's BERT | +0.0 ± 2.5 (n=3) | not resolved at this scale |" in text
    assert "| tokloss-final | pooled effective rank − the untrained encoder | +11.0 ± 4.3 (n=3) | higher |" in text
    assert "| tokloss-final | held-out loss − the study's CrossBERT | -0.012 ± 0.002 (n=3) | lower |" in text
    assert "held-out loss − the study's BERT" not in text  # an MLM loss: not the same objective
    assert "not measured yet" not in text.split("Paired")[0]
    pending = [*rows[:-1], {**rows[-1], "done": False}]
    text = render_section(Section("s", Heading("t", 3), "", "now", final_seed_blocks(pending)))
    assert "Not measured yet: 1 of these readings." in text and "(n=2)" in text
    assert final_seed_blocks([row for row in rows if row["group"] != "final"]) == []


def test_only_seed_ones_final_reading_joins_the_main_table_and_names_the_cause():
    rows = _rows()
    assert [row["key"] for row in main_rows(rows)] == ["crossbert-compl-s1--r0", "bert-s1--r0", "tokloss-final"]
    text = render_section(ablations_section({"plan": "p", "seed": 1, "rows": rows, "written_utc": "now"}))
    assert "Largest rise in CrossBERT's effective rank: **crossbert-compl-tokloss-s1, own ids**, 10.0 -> 90.0" in text
    assert "It restores the rank to 150% of BERT's 60.0." in text


def test_a_run_sealed_at_its_early_step_is_not_complete_so_its_final_row_trains_it_on(tmp_path):
    from experiments.claims.study.records import SEAL_FILE
    from experiments.claims.study.train_stage import is_complete, run_dir

    plan, out = _plan(), tmp_path / "out"
    rows = {row.key: row for row in plan_rows(plan, tmp_path / "work", out)}
    folder = run_dir(out, rows["tokloss-final"].run)
    folder.mkdir(parents=True)
    (folder / SEAL_FILE).write_text('{"key": {"step": 1}, "losses": {"1": 6.0}}')  # the early row's record
    assert not is_complete(out, rows["tokloss-final"].run)
    (folder / SEAL_FILE).write_text('{"key": {}, "losses": {}}')  # the final row's record: its whole schedule
    assert is_complete(out, rows["tokloss-final"].run)


def test_a_run_sealed_early_and_at_its_end_is_restored_as_trained_to_its_end_in_either_order(tmp_path):
    from experiments.claims.study import records as rec

    records, run = tmp_path / "records", tmp_path / "work" / "runs" / "crossbert-compl-tokloss-s1"
    early = rec.seal(records, "tokloss", {"step": 1}, {1: 6.0}, [], [])
    final = rec.seal(records, "tokloss-final", {}, {1: 6.0, 4: 5.5}, [], [])
    assert early.is_file() and final.is_file()
    for order in (["tokloss", "tokloss-final"], ["tokloss-final", "tokloss"]):
        for name in order:
            rec.restore(records, name, {"step": 1} if name == "tokloss" else {}, run, tmp_path / "rows")
        assert sorted(rec.sealed_record(run)["losses"]) == ["1", "4"], order
        (run / rec.SEAL_FILE).unlink()


def test_a_final_row_of_a_run_sealed_part_way_waits_for_its_training_not_for_another_work_dir(tmp_path):
    from experiments.claims.study.records import SEAL_FILE
    from experiments.claims.study.train_stage import run_dir

    plan, out = _plan(), tmp_path / "out"
    rows = {row.key: row for row in plan_rows(plan, tmp_path / "work", out)}
    folder = run_dir(out, rows["tokloss-final"].run)
    folder.mkdir(parents=True)
    (folder / SEAL_FILE).write_text('{"key": {"step": 1}, "losses": {}}')  # the early row's record, no checkpoint
    assert "is not trained yet (no checkpoint at step 4)" in ablations.waiting(rows["tokloss-final"], train=False)
    assert "restored from the records" in ablations.waiting(rows["tokloss"], train=False)
    assert ablations.waiting(rows["tokloss-final"], train=True) is None  # this process trains it
