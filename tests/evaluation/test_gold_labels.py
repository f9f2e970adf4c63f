"""Bad gold labels are refused by every task reader in one line naming the file and the row, and no NaN is
ever reported as a result (readers only, no model: the CLIs are in ``test_eval_inputs.py``).

Unguarded, an STS row scored NaN or Infinity, or every score equal, gave ``nan`` per task and a NaN average
with exit 0; a null probe label became the class "None"; a constant STS-B dev set scored Spearman 0.0;
a string score said ``could not convert string to float`` naming no file."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from megatron_crossbert.evaluation.tasks.folders import read_columns
from megatron_crossbert.evaluation.tasks.glue import load_glue_task
from megatron_crossbert.evaluation.tasks.data import load_jsonl_task


def _sts(path: Path, scores: list, bom: bool = False) -> Path:
    rows = [{"sentence1": f"a {i}", "sentence2": f"b {i}", "score": s} for i, s in enumerate(scores)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(("\ufeff" if bom else "") + "".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


GOOD = [0.5, 1.0, 2.0, 3.5, 4.0, 2.5, 1.5, 3.0, 4.5, 0.0]


@pytest.mark.parametrize("bad, message", [
    (float("nan"), ":8: score nan is not a finite number"),
    (float("inf"), ":8: score inf is not a finite number"),
    ("n/a", ":8: score 'n/a' is not a number"),
    (True, ":8: score True is not a number"),
    (None, ":8: lacks one of ['sentence1', 'sentence2', 'score']"),
])
def test_an_sts_score_that_is_no_number_names_file_and_line(tmp_path, bad, message):
    path = _sts(tmp_path / "STSx" / "test.jsonl", GOOD[:7] + [bad] + GOOD[8:])
    with pytest.raises(ValueError, match="^" + re.escape(f"{path}{message}")):
        read_columns(path, "sts")


def test_constant_sts_gold_is_refused(tmp_path):
    path = _sts(tmp_path / "eq.jsonl", [3.0] * 10)
    with pytest.raises(ValueError, match=f"^{path}: every score is 3; a correlation with constant gold scores is "
                                         "undefined"):
        read_columns(path, "sts")


def test_a_bom_is_not_part_of_the_first_row(tmp_path):
    assert read_columns(_sts(tmp_path / "bom.jsonl", GOOD, bom=True), "sts")["score"] == GOOD


def _probe_task(root: Path, train: list, test: list) -> Path:
    root.mkdir(parents=True)
    for split, labels in (("train", train), ("test", test)):
        (root / f"{split}.jsonl").write_text("".join(json.dumps({"text": f"t {i}", "label": y}) + "\n"
                                                     for i, y in enumerate(labels)))
    return root


@pytest.mark.parametrize("test_labels, message", [
    ([0, 1, 0, 1, None, 1], "test.jsonl:5: label is null (missing)"),
    ([0, 1, 0, 1, float("nan"), 1], "test.jsonl:5: label nan is neither a class nor a finite number"),
    ([0, 1, 0, 1, [1], 1], "test.jsonl:5: label [1] is not a class"),
])
def test_a_probe_label_that_is_no_class_names_file_and_line(tmp_path, test_labels, message):
    task = _probe_task(tmp_path / "task", [0, 1] * 3, test_labels)
    with pytest.raises(ValueError, match="^" + re.escape(f"{task}/{message}")):
        load_jsonl_task(task)


def test_one_class_and_constant_regression_gold(tmp_path):
    single = _probe_task(tmp_path / "single", [1] * 6, [0, 1] * 3)
    with pytest.raises(ValueError, match=f"^{single}/train.jsonl: every label is 1; a probe needs at least two"):
        load_jsonl_task(single)
    flat = _probe_task(tmp_path / "flat", [0.5, 1.5, 2.5, 3.5], [2.5] * 4)
    with pytest.raises(ValueError, match=f"^{flat}/test.jsonl: every score is 2.5; a correlation"):
        load_jsonl_task(flat)


def _stsb(glue: Path, dev_scores: list[str]) -> Path:
    header = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
    (glue / "STS-B").mkdir(parents=True)
    for split, scores in (("train", [f"{i % 5}.0" for i in range(8)]), ("dev", dev_scores)):
        (glue / "STS-B" / f"{split}.tsv").write_text(header + "".join(
            f"{i}\tg\tf\t2012\t{i}\ts\ts\ta {i}\tb {i}\t{s}\n" for i, s in enumerate(scores)))
    return glue


def test_glue_stsb_gold(tmp_path):
    flat = _stsb(tmp_path / "flat", ["3.0"] * 8)
    with pytest.raises(ValueError, match=f"^{flat}/STS-B/dev.tsv: every score is 3; a correlation"):
        load_glue_task(flat, "STS-B")
    nan = _stsb(tmp_path / "nan", ["1.0", "2.0", "nan", "3.0"])
    with pytest.raises(ValueError, match=f"^{nan}/STS-B/dev.tsv:4: score 'nan' is not a finite number"):
        load_glue_task(nan, "STS-B")


def test_no_nan_reaches_a_probe_report():
    """Constant gold in a subsample (the readers refuse it in a whole file) makes the task failed: no NaN in
    the metrics, the average over the other tasks only, and strict JSON."""
    from megatron_crossbert.evaluation.probing.linear_probes import ProbeResult
    from megatron_crossbert.evaluation.tasks.metrics import compute_metrics
    from megatron_crossbert.evaluation.probing.report import markdown_table
    from megatron_crossbert.evaluation.probing.runner import summarize, task_entry
    from megatron_crossbert.evaluation.tasks.data import ProbeTask, Split, default_spec

    metrics = compute_metrics(("spearman", "pearson"), np.full(4, 2.0), np.arange(4.0))
    assert all(math.isnan(v) for v in metrics.values())
    assert compute_metrics(("spearman",), np.arange(4.0), np.full(4, 2.0)) == {"spearman": 0.0}  # constant prediction
    split = Split(["a"] * 4, np.arange(4.0))
    bad = task_entry(ProbeTask(default_spec("flat", "regression", False), split, split),
                     [ProbeResult(metrics, float("nan"), n_test=4)], with_layers=False)
    good = task_entry(ProbeTask(default_spec("ok", "regression", False), split, split),
                      [ProbeResult({"spearman": 80.0, "pearson": 60.0}, 70.0, n_test=4)], with_layers=False)
    summary = summarize({"flat": bad, "ok": good})
    assert bad["score"] is None and bad["metrics"] == {"spearman": None, "pearson": None} and "undefined" in bad["failed"]
    assert (summary["average"], summary["failed"]) == (70.0, ["flat"])
    report = {"tasks": {"flat": bad, "ok": good}, "summary": summary}
    json.dumps(report, allow_nan=False)
    table = markdown_table(report)
    assert "average (1 of 2 tasks; flat failed)" in table and "nan" not in table.lower()


def test_no_nan_reaches_an_mteb_summary():
    """mteb's own NaN (constant similarities from a model that gives every text one embedding) is a failed
    task with its reason, never a row or part of the average."""
    from types import SimpleNamespace

    from megatron_crossbert.evaluation.mteb.report import summarize, summary_markdown

    def built(name):
        metadata = SimpleNamespace(type="STS", main_score="cosine_spearman")
        return SimpleNamespace(name=name, folder=name, mteb_name=None, note="", subset=None,
                               task=SimpleNamespace(metadata=metadata))

    def result(name, score):
        return SimpleNamespace(task_name=name, get_score=lambda: score)

    outcome = SimpleNamespace(task_results=[result("STSlong", float("nan")), result("STSok", 0.5)], exceptions=[])
    summary = summarize([built("STSlong"), built("STSok")], outcome, {})
    assert [row["task"] for row in summary["tasks"]] == ["STSok"] and summary["average"] == 50.0
    assert summary["errors"] == {"STSlong": "mteb returned cosine_spearman nan: the model's similarities are constant "
                                            "(it gives every text the same embedding)"}
    json.dumps(summary, allow_nan=False)
    assert "average (1 of 2 tasks; STSlong failed)" in summary_markdown(summary)
