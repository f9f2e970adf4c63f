"""The ablations' early rows: a variant of CrossBERT's loss trained only to the plan's first probe step, under the
whole run's schedule (``--exit-at-iteration``), and read there beside the study's runs read at that step.

The row trains once (a checkpoint at its step ends its training for good), its run's config carries the variant's
loss, the page puts it beside the study's two runs at that step with the token geometry of each, and a plan that
probes on a grid (no earlier probe step) has no early rows.
"""

from __future__ import annotations

import dataclasses

from experiments.claims.ablations import run as ablations
from experiments.claims.ablations.page import early_blocks
from experiments.claims.ablations.rows import plan_rows
from experiments.claims.study import train_stage
from experiments.claims.study.plan import resolve_plan, run_spec_config
from megatron_crossbert.results_page.render import render_section
from megatron_crossbert.results_page import Heading, Section
from tests.experiments.test_claims_ablations_trajectory import _checkpoint, _plan


def test_an_early_row_trains_its_variant_to_the_first_probe_step_under_the_whole_schedule(tmp_path):
    plan = _plan()
    rows = {row.key: row for row in plan_rows(plan, tmp_path / "work", tmp_path / "out")}
    early, geometry = rows["tokloss"], rows["tokloss~geometry@1"]
    assert (early.group, early.step, early.exit_at, early.trained_here, early.with_mteb) == ("early", 1, 1, True, False)
    assert (geometry.group, geometry.base, geometry.exit_at, geometry.trained_here) == ("geometry", "tokloss", None,
                                                                                        False)
    assert early.run.train_steps == plan.sample_steps  # the schedule is the whole run's: its step 1 is the study's
    config = run_spec_config(plan, early.run)
    assert config.model.encoder_token_loss_weight == 1.0 and config.training.train_iters == 4
    assert run_spec_config(plan, rows["dec1"].run).model.encoder_token_loss_weight == 0.0
    assert rows["dec1"].exit_at is None
    assert not [row for row in plan_rows(resolve_plan("smoke"), tmp_path, tmp_path) if row.group == "early"]


def test_an_early_variant_runs_at_every_study_seed_beside_that_seeds_study_runs(tmp_path):
    plan = dataclasses.replace(_plan(), seeds=[1, 2, 3])
    rows = {row.key: row for row in plan_rows(plan, tmp_path / "work", tmp_path / "out")}
    assert [rows[key].run.name for key in ("tokloss", "tokloss-s2", "tokloss-s3")] == [
        f"crossbert-compl-tokloss-s{seed}" for seed in (1, 2, 3)]
    assert rows["tokloss-s3"].run.seed == 3 and rows["tokloss-s3"].exit_at == 1
    assert "tokloss-s2~geometry@1" in rows
    references = [key for key, row in rows.items() if row.group == "early-reference"]
    assert references == ["crossbert-compl-s2--r0@1", "bert-s2--r0@1", "crossbert-compl-s3--r0@1", "bert-s3--r0@1",
                          *[f"init-reference-s{seed}--r0@1" for seed in (1, 2, 3)]]  # at its one step
    untrained = rows["init-reference-s2--r0@1"]
    assert (untrained.run.train_steps, untrained.read_step, untrained.with_mteb) == (1, 1, False)
    reference = rows["bert-s3--r0@1"]
    assert (reference.run.seed, reference.step, reference.trained_here, reference.run_dir) == (
        3, 1, False, tmp_path / "work")  # the study's own run, in the study's work dir


def fake_training(monkeypatch, tmp_path, out, run, step: int) -> list:
    """Training ``run`` replaced by writing its checkpoint at ``step``; returns the list its commands go to."""
    commands = []

    def fake_logged(argv, work_dir, name):
        commands.append(argv)
        _checkpoint(out, run, step)

    monkeypatch.setattr(train_stage, "run_logged", fake_logged)
    monkeypatch.setattr(ablations, "tokenizer_dir", lambda work: tmp_path / "tokenizer")
    monkeypatch.setattr(ablations, "data_prefix", lambda work: "prefix")
    monkeypatch.setattr("megatron_crossbert.data.tokenizers.tokenizer.load_tokenizer",
                        lambda path: type("T", (), {"vocab_size": 64})())
    monkeypatch.setattr(ablations, "measure", lambda *args: {"effective_rank": 3.0})
    return commands


def test_the_training_stops_at_its_step_and_is_not_run_again_once_that_checkpoint_exists(tmp_path, monkeypatch):
    plan, out = _plan(), tmp_path / "work" / "ablations"
    row = next(row for row in plan_rows(plan, tmp_path / "work", out) if row.key == "tokloss")
    commands = fake_training(monkeypatch, tmp_path, out, row.run, 1)
    inputs = ablations.Inputs(tmp_path / "work", "glue", None, None)
    assert ablations.run_row(plan, row, inputs, out, ([], []))
    assert len(commands) == 1 and commands[0][-2:] == ["--exit-at-iteration", "1"]
    (out / "rows" / "tokloss.json").unlink()
    assert ablations.run_row(plan, row, inputs, out, ([], []))  # measured again from its checkpoint: not trained
    assert len(commands) == 1


def _reading(key, group, model, rank, glue, base=None, step=610, seed=1):
    return {"key": key, "group": group, "model": model, "what": "w", "done": True, "base": base, "step": step,
            "effective_rank": rank, "mean_cosine": 0.4, "glue_raw": glue, "glue_whitened": 50.0, "seed": seed}


def _geometry(base, id_share):
    return {"key": f"{base}~geometry@610", "group": "geometry", "base": base, "step": 610, "done": True,
            "token_effective_rank": 20.0, "identity_share": id_share, "position_share": 0.1, "pc1_share": 0.3}


def test_the_page_puts_an_early_variant_beside_the_study_runs_at_its_step():
    rows = [_reading("crossbert-compl-s1--r0", "probe-time", "crossbert-compl-s1", 10.9, 40.0, step=4880),
            _reading("crossbert-compl-s1--r0@610", "trajectory", "crossbert-compl-s1", 8.0, 43.0,
                     base="crossbert-compl-s1--r0"),
            _reading("bert-s1--r0", "probe-time", "bert-s1", 64.7, 50.0, step=4880),
            _reading("bert-s1--r0@610", "trajectory", "bert-s1", 48.0, 48.0, base="bert-s1--r0"),
            _geometry("bert-s1--r0", 0.89), _geometry("tokloss", 0.75),
            {**_reading("tokloss", "early", "crossbert-compl-tokloss-s1", 24.0, 45.5), "what": "own ids"},
            {**_reading("tokloss-s2", "early", "crossbert-compl-tokloss-s2", 30.0, 46.0, seed=2), "what": "own ids"}]
    text = render_section(Section("s", Heading("t", 3), "", "now", early_blocks(rows)))
    assert "| crossbert-compl-s1 | the study's run | 610 | 43.0 | 50.0 | 8.0 | 0.400 |" in text
    assert "| bert-s1 | the study's run | 610 | 48.0 | 50.0 | 48.0 | 0.400 | 20.00 | 0.89 |" in text
    assert "| crossbert-compl-tokloss-s1 | own ids | 610 | 45.5 | 50.0 | 24.0 | 0.400 | 20.00 | 0.75 |" in text
    assert "| crossbert-compl-tokloss-s2 | own ids | 610 |" not in text  # other seeds: in the paired table only
    assert text.count("| crossbert-compl-s1 | the study's run |") == 1
    assert ("tokloss moves CrossBERT's pooled effective rank at step 610 from 8.0 to 24.0 (BERT's: 48.0; 50% of "
            "it: restored), raw GLUE +2.5 points.") in text
    pending = [*rows[:-2], {**rows[-2], "done": False}]
    text = render_section(Section("s", Heading("t", 3), "", "now", early_blocks(pending)))
    assert "| crossbert-compl-tokloss-s1 | own ids | 610 | not measured yet |" in text and "moves" not in text
    assert early_blocks([row for row in rows if row["group"] != "early"]) == []


def test_the_page_pairs_an_early_variant_with_the_study_runs_seed_by_seed():
    from experiments.claims.ablations.page_seeds import early_seed_blocks

    rows = []
    for seed, (cross, bert, mine) in {1: (8.0, 48.0, 70.0), 2: (9.0, 50.0, 72.0), 3: (7.0, 47.0, 69.0)}.items():
        group = "trajectory" if seed == 1 else "early-reference"
        rows += [_reading(f"crossbert-compl-s{seed}--r0@610", group, f"crossbert-compl-s{seed}", cross, 40.0 + seed,
                          seed=seed),
                 _reading(f"bert-s{seed}--r0@610", group, f"bert-s{seed}", bert, 50.0, seed=seed),
                 {**_reading("tokloss" if seed == 1 else f"tokloss-s{seed}", "early",
                             f"crossbert-compl-tokloss-s{seed}", mine, 50.0, seed=seed), "what": "own ids"}]
        rows.append(_reading(f"init-reference-s{seed}--r0@1", "early-reference", f"init-reference-s{seed}", 72.0 + seed,
                             49.0, step=1, seed=seed))
    rows.append(_reading("crossbert-compl-s1--r0", "probe-time", "crossbert-compl-s1", 10.9, 40.0, step=4880))
    text = render_section(Section("s", Heading("t", 3), "", "now", early_seed_blocks(rows)))
    assert "| tokloss | pooled effective rank − the study's CrossBERT | +62.3 ± 1.4 (n=3) | higher |" in text
    assert "| tokloss | GLUE raw − the study's CrossBERT | +8.0 ± 2.5 (n=3) | higher |" in text
    assert "| tokloss | GLUE raw − the study's BERT | +0.0 ± 0.0 (n=3) | not resolved at this scale |" in text
    assert "| tokloss | pooled effective rank − the untrained encoder | -3.7 ± 5.2 (n=3) | not resolved at this scale |" in text
    assert "| tokloss | GLUE raw − the untrained encoder | +1.0 ± 0.0 (n=3) | higher |" in text
    one = [row for row in rows if row["seed"] == 1]
    assert "+62.0 (n=1) | not resolved at this scale |" in render_section(Section("s", Heading("t", 3), "", "now",
                                                                    early_seed_blocks(one)))
