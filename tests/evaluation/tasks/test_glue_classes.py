"""Each GLUE task's label set has one home (``glue.GLUE_FORMATS``): a label outside it, and a split with no rows,
are refused naming the file and line before anything is encoded, so a classifier never grows an output for it."""

from __future__ import annotations

import pytest

from megatron_crossbert.evaluation.finetune.loop import num_labels_of
from megatron_crossbert.evaluation.tasks.glue import GLUE_FORMATS, load_glue_task
from megatron_crossbert.evaluation.tasks.data import Split
from tests.support.synthetic_eval import write_glue_fixture


@pytest.fixture
def glue(tmp_path):
    return write_glue_fixture(tmp_path / "glue", n=12)


def _set_label(path, line: int, column: int, value: str) -> None:
    """Replace the label cell of file line ``line`` (1-based)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    cells = lines[line - 1].split("\t")
    cells[column] = value
    lines[line - 1] = "\t".join(cells)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.mark.parametrize("task,split,line,column,label", [
    ("SST-2", "train", 5, 1, "2"),      # a binary task's train row labelled 2
    ("SST-2", "dev", 3, 1, "3"),        # ... or a dev row labelled 3
    ("CoLA", "train", 1, 1, "-1"),      # header-less: the first line is a row
    ("MRPC", "dev", 4, 0, "7"),
    ("WNLI", "train", 2, 3, "2"),
    ("RTE", "dev", 2, 3, "contradiction"),
])
def test_a_label_outside_the_tasks_classes_names_file_and_line(glue, task, split, line, column, label):
    path = glue / GLUE_FORMATS[task].directory / f"{split}.tsv"
    _set_label(path, line, column, label)
    with pytest.raises(ValueError) as err:
        load_glue_task(glue, task)
    assert f"{path}:{line}" in str(err.value) and repr(label) in str(err.value), err.value
    assert "\n" not in str(err.value)


def test_the_class_count_is_the_tasks_not_the_labels_seen(glue):
    """Splits that happen to hold only class 0 of a binary task still give a 2-way head."""
    task = load_glue_task(glue, "SST-2")

    def zeros(split: Split) -> Split:
        keep = split.labels == 0
        return Split([t for t, k in zip(split.texts, keep) if k], split.labels[keep])

    assert num_labels_of(task) == 2
    assert num_labels_of(type(task)(task.spec, zeros(task.train), zeros(task.test), task.source)) == 2
    assert num_labels_of(load_glue_task(glue, "MNLI")) == 3 and num_labels_of(load_glue_task(glue, "STS-B")) == 1


@pytest.mark.parametrize("task", ["RTE", "CoLA"])
def test_a_split_without_rows_is_refused_naming_the_file(glue, task):
    path = glue / GLUE_FORMATS[task].directory / "dev.tsv"
    header = path.read_text(encoding="utf-8").splitlines()[0] if GLUE_FORMATS[task].header else ""
    path.write_text(header + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match="no data rows") as err:
        load_glue_task(glue, task)
    assert str(path) in str(err.value)
