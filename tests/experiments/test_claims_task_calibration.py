"""The calibration per task: which tasks carry BERT's difference from the untrained encoder.

Points are built from probe-JSON-shaped reports (GLUE and probe tasks in ``tasks``, MTEB-lite's raw readout per
task under ``mteb_lite.readouts``), so the test covers the read from the files' layout to the page's sentence.
"""

from __future__ import annotations

from experiments.claims import analysis as an
from experiments.claims.claims_section import _task_calibration_blocks
from experiments.claims.study.plan import resolve_plan
from megatron_crossbert.results_page import Paragraph


def _report(sst2: float, cola: float, sts12_raw: float) -> dict:
    tasks = {"SST-2": {"score": sst2, "spec": {"glue": True}}, "CoLA": {"score": cola, "spec": {"glue": True}}}
    mteb = {"average": 50.0, "names": {"STS12": "STS12-subset"},
            "readouts": {"tasks": {"STS12-subset": {"raw": sts12_raw, "whitened": 40.0}}}}
    return {"summary": {}, "tasks": tasks, "mteb_lite": mteb}


def _curves(plan) -> an.StudyCurves:
    step = plan.sample_steps
    untrained = {s: an._point(plan, 1.0, 1, _report(50.0 + 0.1 * s, 0.0 + s, 40.0 + 0.1 * s), None)
                 for s in (1, 2, 3)}
    bert = {s: [an._point(plan, 1.0, step, _report(60.0 + 0.2 * s, 0.0 + 2 * s, 30.0 - 0.1 * s), None)]
            for s in (1, 2, 3)}
    compl = {1: [an._point(plan, 1.0, step, _report(55.0, 1.0, 20.0), None)]}
    return an.StudyCurves({"bert": bert, "crossbert-compl": compl}, {}, untrained)


def test_each_task_gets_its_paired_difference_and_the_sentence_names_where_bert_is_ahead_or_behind():
    plan = resolve_plan("smoke")
    rows = {r["task"]: r for r in an.task_calibration(plan, _curves(plan))}
    assert set(rows) == {"SST-2", "CoLA", "STS12 (MTEB-lite, raw)"}
    sst2 = rows["SST-2"]
    assert round(sst2["gap"].mean, 6) == 10.2 and sst2["gap"].low > 0 and sst2["untrained"].n == 3
    assert round(rows["STS12 (MTEB-lite, raw)"]["gap"].mean, 6) == -10.4  # the raw readout, not the whitened 40
    assert rows["CoLA"]["gap"].low < 0 < rows["CoLA"]["gap"].high  # 1, 2, 3 points: not resolved
    assert round(sst2["compl_gap"].mean, 6) == -5.2 and sst2["compl_gap"].n == 1  # paired with BERT's seed 1
    found = [b for b in _task_calibration_blocks(plan, _curves(plan)) if isinstance(b, Paragraph)][-1]
    assert "ahead of the untrained encoder on SST-2 and behind on STS12 (MTEB-lite, raw)" in found.text
    assert "the other 1 tasks are not resolved" in found.text
    assert "CrossBERT complementary is ahead of BERT on no task and behind on no task." in found.text  # one seed
    table = next(b for b in _task_calibration_blocks(plan, _curves(plan)) if not isinstance(b, Paragraph))
    sst2_row = next(row for row in table.rows if row[0] == "SST-2")
    assert sst2_row[-1] == "-5.2 (n=1) (n.r.)" and sst2_row[3].endswith("(ahead)")


def test_without_bert_at_the_budget_there_is_no_per_task_table():
    plan = resolve_plan("smoke")
    curves = _curves(plan)
    assert _task_calibration_blocks(plan, an.StudyCurves({}, {}, curves.reference)) == []
