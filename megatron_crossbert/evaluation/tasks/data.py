"""The task data model every evaluation shares, and the non-GLUE loaders (JSONL files, HF ``datasets``).

A task is a train split and a test split of texts (optionally sentence pairs) with labels,
plus a :class:`TaskSpec` saying how to score it. Every loader returns the same :class:`ProbeTask`, so
frozen probes and fine-tuning never care where the data came from.

JSONL layout (what ``../shared/data/probe`` uses): ``<task>/train.jsonl`` and ``<task>/test.jsonl``,
one object per line with ``text``, optional ``text_pair`` and ``label`` (int or str for
classification; a float ``label`` or ``score`` makes it a regression task).
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal, Sequence

import numpy as np

from megatron_crossbert.evaluation.tasks.gold import (
    Where, check_classes, check_labels, check_scores, line_numbers, row_numbers,
)

Kind = Literal["classification", "regression"]
CLASSIFICATION_METRICS = ("accuracy",)
REGRESSION_METRICS = ("spearman", "pearson")


@dataclass(frozen=True)
class TaskSpec:
    """How a task is probed and scored. ``metrics[0]`` is the task's headline metric."""

    name: str
    kind: Kind
    metrics: tuple[str, ...]
    is_pair: bool = False
    glue: bool = False


@dataclass
class Split:
    """One split: ``texts`` (and ``pairs`` for two-sentence tasks) aligned with ``labels``."""

    texts: list[str]
    labels: np.ndarray
    pairs: list[str] | None = None

    def __len__(self) -> int:
        return len(self.texts)

    def subsample(self, n: int | None, seed: int) -> "Split":
        """A seeded random subset of at most ``n`` rows (order kept), so --max-train/test are reproducible."""
        if n is None or n >= len(self):
            return self
        keep = np.sort(np.random.default_rng(seed).choice(len(self), size=n, replace=False))
        return Split(texts=[self.texts[i] for i in keep], labels=self.labels[keep],
                     pairs=None if self.pairs is None else [self.pairs[i] for i in keep])


@dataclass
class ProbeTask:
    """A loaded task. ``source`` records where it came from (for reports and cache keys)."""

    spec: TaskSpec
    train: Split
    test: Split
    source: str = ""

    def subsample(self, max_train: int | None, max_test: int | None, seed: int = 0) -> "ProbeTask":
        return replace(self, train=self.train.subsample(max_train, seed),
                       test=self.test.subsample(max_test, seed + 1))


def encode_labels(train_raw: Sequence, test_raw: Sequence, kind: Kind,
                  label_names: Sequence[str] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Turn raw labels into arrays; string classes get ids from one shared vocabulary.

    A fixed ``label_names`` order (GLUE) keeps ids stable; otherwise the sorted union of both
    splits is used, so a class missing from one split cannot shift the ids of the others.
    """
    if kind == "regression":
        return np.asarray(train_raw, np.float64), np.asarray(test_raw, np.float64)
    if all(isinstance(x, (int, np.integer)) for x in (*train_raw, *test_raw)) and label_names is None:
        return np.asarray(train_raw, np.int64), np.asarray(test_raw, np.int64)
    vocab = list(label_names) if label_names else sorted({str(x) for x in (*train_raw, *test_raw)})
    index = {name: i for i, name in enumerate(vocab)}
    try:
        return (np.asarray([index[str(x)] for x in train_raw], np.int64),
                np.asarray([index[str(x)] for x in test_raw], np.int64))
    except KeyError as err:
        raise ValueError(f"label {err} is not one of {vocab}") from err


def infer_kind(labels: Sequence) -> Kind:
    """Floats that are not whole numbers mean regression; ints and strings mean classification."""
    if any(isinstance(x, float) and not float(x).is_integer() for x in labels):
        return "regression"
    return "classification"


def default_spec(name: str, kind: Kind, is_pair: bool) -> TaskSpec:
    metrics = REGRESSION_METRICS if kind == "regression" else CLASSIFICATION_METRICS
    return TaskSpec(name=name, kind=kind, metrics=metrics, is_pair=is_pair)


def read_jsonl_numbered(path: str | Path) -> list[tuple[int, dict]]:
    """(file line, parsed object) of every non-blank line of a JSONL (or JSONL.gz) file; a bad line raises
    with its file and line number. A UTF-8 byte-order mark at the start is not part of the first row."""
    rows = []
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8-sig") as handle:
        for lineno, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                rows.append((lineno, json.loads(line)))
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{lineno}: not valid JSON: {err}") from err
    return rows


def read_jsonl_rows(path: str | Path) -> list[dict]:
    """The parsed objects of a JSONL (or JSONL.gz) file (``read_jsonl_numbered`` without line numbers)."""
    return [row for _, row in read_jsonl_numbered(path)]


def _label_of(row: dict, path: Path) -> object:
    for key in ("label", "score"):
        if key in row:
            return row[key]
    raise ValueError(f"{path}: row {row!r} has no 'label' or 'score' field")


def _rows_to_columns(rows: list[dict], path: Path) -> tuple[list[str], list[str] | None, list]:
    texts = [str(row["text"]) for row in rows]
    has_pair = ["text_pair" in row for row in rows]
    if any(has_pair) and not all(has_pair):
        raise ValueError(f"{path}: some rows have 'text_pair' and some do not")
    pairs = [str(row["text_pair"]) for row in rows] if rows and all(has_pair) else None
    return texts, pairs, [_label_of(row, path) for row in rows]


def check_task_labels(kind: Kind, train: tuple[Sequence, Where, str | Path],
                      test: tuple[Sequence, Where, str | Path]) -> None:
    """The gold rules (``evaluation/tasks/gold.py``) for a probe task's two label columns: regression scores
    finite and the test scores not constant; classification labels classes and at least two of them in train."""
    if kind == "regression":
        check_scores(train[0], train[1], train[2], spread=False)
        check_scores(test[0], test[1], test[2])
    else:
        check_classes(train[0], train[2])


def load_jsonl_task(task_dir: str | Path, name: str | None = None, *, kind: Kind | None = None,
                    train_file: str = "train.jsonl", test_file: str = "test.jsonl") -> ProbeTask:
    """Load ``<task_dir>/{train,test}.jsonl`` as one task (named after the directory by default); a bad
    label is refused naming its file and line (``gold.py``)."""
    task_dir = Path(task_dir)
    columns, gold = {}, {}
    for split, filename in (("train", train_file), ("test", test_file)):
        path = task_dir / filename
        if not path.is_file():
            raise FileNotFoundError(f"JSONL task {task_dir} has no {filename}")
        numbered = read_jsonl_numbered(path)
        columns[split] = _rows_to_columns([row for _, row in numbered], path)
        where = line_numbers(path, [line for line, _ in numbered])
        check_labels(columns[split][2], where)
        gold[split] = (columns[split][2], where, path)
    kind = kind or infer_kind([*columns["train"][2], *columns["test"][2]])
    check_task_labels(kind, gold["train"], gold["test"])
    y_train, y_test = encode_labels(columns["train"][2], columns["test"][2], kind)
    is_pair = columns["train"][1] is not None
    spec = default_spec(name or task_dir.name, kind, is_pair)
    return ProbeTask(spec=spec, source=str(task_dir),
                     train=Split(columns["train"][0], y_train, columns["train"][1]),
                     test=Split(columns["test"][0], y_test, columns["test"][1]))


def find_jsonl_tasks(root: str | Path) -> list[Path]:
    """A directory holding train.jsonl is one task; otherwise each such subdirectory is one (sorted)."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: no such directory (a JSONL task directory, or a directory of them)")
    if (root / "train.jsonl").is_file():
        return [root]
    found = sorted(p for p in root.iterdir() if (p / "train.jsonl").is_file())
    if not found:
        raise FileNotFoundError(f"{root} holds no train.jsonl, directly or one level down")
    return found


def load_hf_task(dataset: str, *, config: str | None = None, name: str | None = None,
                 text_field: str = "text", pair_field: str | None = None, label_field: str = "label",
                 train_split: str = "train", test_split: str = "test", kind: Kind | None = None,
                 **load_kwargs) -> ProbeTask:
    """Load a task with ``datasets.load_dataset`` (hub: needs network or a warm HF cache).

    ``load_kwargs`` go to ``load_dataset`` (e.g. ``data_files`` for a local ``"json"``/``"csv"`` build).
    """
    from datasets import load_dataset

    data = load_dataset(dataset, config, **load_kwargs)
    cols = {}
    for split in (train_split, test_split):
        part = data[split]
        cols[split] = (list(map(str, part[text_field])),
                       list(map(str, part[pair_field])) if pair_field else None, list(part[label_field]))
    gold = {split: (cols[split][2], row_numbers(f"{dataset}[{split}]"), f"{dataset}[{split}]")
            for split in (train_split, test_split)}
    for labels, where, _ in gold.values():
        check_labels(labels, where)
    kind = kind or infer_kind([*cols[train_split][2], *cols[test_split][2]])
    check_task_labels(kind, gold[train_split], gold[test_split])
    y_train, y_test = encode_labels(cols[train_split][2], cols[test_split][2], kind)
    task_name = name or (f"{dataset}:{config}" if config else dataset)
    return ProbeTask(spec=default_spec(task_name, kind, pair_field is not None), source=f"hf:{dataset}",
                     train=Split(cols[train_split][0], y_train, cols[train_split][1]),
                     test=Split(cols[test_split][0], y_test, cols[test_split][1]))
