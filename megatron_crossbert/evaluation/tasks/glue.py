"""Readers for the original GLUE TSVs (the ``glue_data/<TASK>/`` layout of the GLUE download script).

GLUE test labels are hidden, so every task is probed on ``train`` and scored on ``dev`` (MNLI:
``dev_matched`` for ``MNLI``, ``dev_mismatched`` for ``MNLI-mm``).

Quirks handled here, all of which break a naive ``pandas.read_csv``:
- Files are read with ``QUOTE_NONE``: GLUE text contains unbalanced double quotes (MRPC, SST-2),
  which a quoting reader would merge across lines.
- CoLA has no header: ``source \\t label \\t original-label(blank) \\t sentence``.
- MRPC's header starts with a UTF-8 BOM and names columns ``Quality, #1 ID, #2 ID, #1 String, #2 String``.
- STS-B labels are floats (0-5); MNLI's label is the last column ``gold_label`` (dev has 5 annotator
  columns before it); RTE/QNLI/MNLI labels are strings.
- QQP train has a few rows with missing fields; short rows are skipped and counted, never mis-parsed.

Every classification task has a known label set (``GlueFormat.label_names``: the binary tasks ``0``/``1``,
RTE/QNLI ``entailment``/``not_entailment``, MNLI its three classes), the one home of its class count: a label
outside it is refused naming its file and line, so a stray ``2`` or ``-1`` never grows the classifier head
or moves the score in silence. A split without rows is refused too.
"""

from __future__ import annotations

import csv
import logging
import sys
from dataclasses import dataclass
from pathlib import Path

from megatron_crossbert.evaluation.tasks.gold import BadGoldError, check_scores, line_numbers, row_numbers
from megatron_crossbert.evaluation.tasks.data import (
    CLASSIFICATION_METRICS, REGRESSION_METRICS, Kind, ProbeTask, Split, TaskSpec, check_task_labels, encode_labels)

logger = logging.getLogger(__name__)
Column = int | str  # a position (header-less files) or a header name


@dataclass(frozen=True)
class GlueFormat:
    """Where a GLUE task's files and columns are, and how it is scored."""

    name: str
    directory: str
    text: Column
    label: Column
    pair: Column | None = None
    header: bool = True
    kind: Kind = "classification"
    label_names: tuple[str, ...] = ()
    """The task's classes as written in its files, in class-id order (empty for regression)."""
    metrics: tuple[str, ...] = CLASSIFICATION_METRICS
    train_file: str = "train.tsv"
    test_file: str = "dev.tsv"


_NLI = ("entailment", "not_entailment")
_BINARY = ("0", "1")
GLUE_FORMATS: dict[str, GlueFormat] = {f.name: f for f in (
    GlueFormat("CoLA", "CoLA", text=3, label=1, header=False, label_names=_BINARY, metrics=("matthews",)),
    GlueFormat("SST-2", "SST-2", text="sentence", label="label", label_names=_BINARY),
    GlueFormat("MRPC", "MRPC", text="#1 String", pair="#2 String", label="Quality", label_names=_BINARY,
               metrics=("f1", "accuracy")),
    GlueFormat("STS-B", "STS-B", text="sentence1", pair="sentence2", label="score", kind="regression",
               metrics=REGRESSION_METRICS),
    GlueFormat("QQP", "QQP", text="question1", pair="question2", label="is_duplicate", label_names=_BINARY,
               metrics=("f1", "accuracy")),
    GlueFormat("MNLI", "MNLI", text="sentence1", pair="sentence2", label=-1,
               label_names=("contradiction", "entailment", "neutral"), test_file="dev_matched.tsv"),
    GlueFormat("MNLI-mm", "MNLI", text="sentence1", pair="sentence2", label=-1,
               label_names=("contradiction", "entailment", "neutral"), test_file="dev_mismatched.tsv"),
    GlueFormat("QNLI", "QNLI", text="question", pair="sentence", label="label", label_names=_NLI),
    GlueFormat("RTE", "RTE", text="sentence1", pair="sentence2", label="label", label_names=_NLI),
    GlueFormat("WNLI", "WNLI", text="sentence1", pair="sentence2", label="label", label_names=_BINARY),
)}
GLUE_TASK_NAMES = tuple(GLUE_FORMATS)


def canonical_glue_name(name: str) -> str:
    """Accept 'cola', 'sst2', 'STS-B', 'stsb', 'mnli_mm', 'mnli-mismatched'... and return the table key."""
    def norm(text: str) -> str:
        return text.lower().replace("-", "").replace("_", "").replace("mismatched", "mm").replace("matched", "")
    for key in GLUE_FORMATS:
        if norm(key) == norm(name):
            return key
    raise KeyError(f"unknown GLUE task {name!r}; known: {', '.join(GLUE_TASK_NAMES)}")


def read_tsv_numbered(path: str | Path, header: bool) -> tuple[list[str] | None, list[tuple[int, list[str]]]]:
    """Tab-separated, no quoting, BOM-tolerant. Returns (header or None, (file line, row) of each non-empty row)."""
    csv.field_size_limit(sys.maxsize)
    with open(path, encoding="utf-8-sig", newline="") as handle:
        reader = csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)
        rows = [(reader.line_num, row) for row in reader if row]
    if header:
        if not rows:
            raise ValueError(f"{path} is empty (expected a header line)")
        return [name.strip() for name in rows[0][1]], rows[1:]
    return None, rows


def _column_index(column: Column, header: list[str] | None, path: Path) -> int:
    if isinstance(column, int):
        return column
    if header is None or column not in header:
        raise ValueError(f"{path}: column {column!r} not in header {header}")
    return header.index(column)


def _parse_labels(raw: list[str], lines: list[int], path: Path, fmt: GlueFormat) -> list:
    """Label cells -> labels: finite floats for regression (``gold.py``), else one of the task's classes."""
    where = line_numbers(path, lines)
    if fmt.kind == "regression":
        return check_scores(raw, where, path, spread=False)
    for i, cell in enumerate(raw):
        if cell not in fmt.label_names:
            raise BadGoldError(f"{where(i)}: label {cell!r} is not one of {fmt.name}'s classes "
                               f"({', '.join(fmt.label_names)})")
    return raw


def read_glue_split(path: str | Path, fmt: GlueFormat) -> tuple[list[str], list[str] | None, list]:
    """Parse one GLUE split into (texts, pairs, labels); rows too short to hold every column are skipped,
    a label that is no class or no finite score is refused naming its line."""
    path = Path(path)
    header, rows = read_tsv_numbered(path, fmt.header)
    idx = {role: _column_index(col, header, path) for role, col in
           (("text", fmt.text), ("pair", fmt.pair), ("label", fmt.label)) if col is not None}
    width = max(i for i in idx.values() if i >= 0) + 1
    texts, pairs, raw, lines, skipped = [], [], [], [], 0
    for line, row in rows:
        if len(row) < width:
            skipped += 1
            continue
        texts.append(row[idx["text"]].strip())
        if "pair" in idx:
            pairs.append(row[idx["pair"]].strip())
        raw.append(row[idx["label"]].strip())
        lines.append(line)
    if skipped:
        logger.warning("%s: skipped %d malformed rows (fewer than %d fields)", path, skipped, width)
    if not texts:
        raise BadGoldError(f"{path}: no data rows (a header only, or every row malformed); {fmt.name} needs rows "
                           "to train and score on")
    return texts, (pairs if fmt.pair is not None else None), _parse_labels(raw, lines, path, fmt)


def glue_spec(fmt: GlueFormat) -> TaskSpec:
    return TaskSpec(name=fmt.name, kind=fmt.kind, metrics=fmt.metrics, is_pair=fmt.pair is not None, glue=True)


def glue_files(glue_dir: str | Path, name: str) -> tuple[Path, Path]:
    """(train file, dev file) of a task under a glue_data folder."""
    fmt = GLUE_FORMATS[canonical_glue_name(name)]
    base = Path(glue_dir) / fmt.directory
    return base / fmt.train_file, base / fmt.test_file


def glue_task_available(glue_dir: str | Path, name: str) -> bool:
    """True when both the train and the dev file of the task exist (probing needs both)."""
    return all(path.is_file() for path in glue_files(glue_dir, name))


def available_glue_tasks(glue_dir: str | Path) -> list[str]:
    """GLUE tasks with both train and dev files under ``glue_dir``, in the canonical order."""
    return [name for name in GLUE_TASK_NAMES if glue_task_available(glue_dir, name)]


def load_glue_task(glue_dir: str | Path, name: str) -> ProbeTask:
    """Load a GLUE task from a glue_data directory: train -> probe train split, dev -> test split."""
    fmt = GLUE_FORMATS[canonical_glue_name(name)]
    base = Path(glue_dir) / fmt.directory
    parts = {}
    for split, filename in (("train", fmt.train_file), ("test", fmt.test_file)):
        if not (base / filename).is_file():
            raise FileNotFoundError(f"GLUE {fmt.name}: {base / filename} is missing")
        parts[split] = read_glue_split(base / filename, fmt)
    check_task_labels(fmt.kind, *[(parts[split][2], row_numbers(base / name), base / name)
                                  for split, name in (("train", fmt.train_file), ("test", fmt.test_file))])
    y_train, y_test = encode_labels(parts["train"][2], parts["test"][2], fmt.kind, fmt.label_names)
    return ProbeTask(spec=glue_spec(fmt), source=str(base),
                     train=Split(parts["train"][0], y_train, parts["train"][1]),
                     test=Split(parts["test"][0], y_test, parts["test"][1]))


HF_GLUE_FIELDS = {  # nyu-mll/glue configs: (text, pair, our task name)
    "cola": ("sentence", None, "CoLA"), "sst2": ("sentence", None, "SST-2"),
    "mrpc": ("sentence1", "sentence2", "MRPC"), "stsb": ("sentence1", "sentence2", "STS-B"),
    "qqp": ("question1", "question2", "QQP"), "qnli": ("question", "sentence", "QNLI"),
    "rte": ("sentence1", "sentence2", "RTE"), "wnli": ("sentence1", "sentence2", "WNLI"),
}


def load_hf_glue_task(config: str, dataset: str = "nyu-mll/glue") -> ProbeTask:
    """GLUE through ``datasets`` (online): validation is the test split, scored like the TSV version."""
    from megatron_crossbert.evaluation.tasks.data import load_hf_task

    if config == "mnli":
        text, pair, name, test_split = "premise", "hypothesis", "MNLI", "validation_matched"
    else:
        (text, pair, name), test_split = HF_GLUE_FIELDS[config], "validation"
    fmt = GLUE_FORMATS[name]
    task = load_hf_task(dataset, config=config, name=name, text_field=text, pair_field=pair,
                        test_split=test_split, kind=fmt.kind)
    task.spec = glue_spec(fmt)
    return task
