"""Offline benchmark folders: find every task in a directory and read it into MTEB's column layout.

A task folder holds its splits as files named after the split: ``test.jsonl`` (``.jsonl.gz``,
``.parquet`` and headed ``.tsv`` work too; so does a hub snapshot's ``data/test-00000-of-00001.parquet``).
- STS: a ``test`` split with two sentence columns and a score;
- classification: ``train`` and ``test`` splits with a text column and a label column.

Column names: MTEB's own (``sentence1``/``sentence2``/``score``; ``text``/``label``) and the project's
older layout (``text``/``text_pair``/``score``) are accepted; whatever file a split came from, it
leaves here with MTEB's names, so mteb's evaluators read it as they read the hub data. The kind is
decided by the columns, never by the folder's name. Anything else is an error naming the file and
what it lacks: a benchmark that silently skipped a task or rows would print a wrong average.
``label`` is deliberately not an STS score: ``{text, text_pair, label}`` is pair classification
(NLI-like), which is refused by name rather than scored as STS. Row order is kept: mteb's
classification resampling walks the train rows in file order.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from megatron_crossbert.evaluation.tasks.gold import Where, check_classes, check_labels, check_scores, line_numbers, row_numbers

TaskKind = Literal["sts", "classification"]
SPLIT_SUFFIXES = (".jsonl", ".jsonl.gz", ".parquet", ".tsv")
STS_COLUMNS = {"sentence1": ("sentence1", "text", "text1", "sentence_a"),
               "sentence2": ("sentence2", "text_pair", "text2", "sentence_b"),
               "score": ("score", "similarity_score", "relatedness_score")}
"""MTEB's STS column -> the names accepted for it, MTEB's first."""
CLASSIFICATION_COLUMNS = {"text": ("text", "sentence", "sentence1"), "label": ("label", "label_text", "intent")}
"""MTEB's classification column -> the names accepted for it, MTEB's first."""
KIND_COLUMNS: dict[str, dict[str, tuple[str, ...]]] = {"sts": STS_COLUMNS, "classification": CLASSIFICATION_COLUMNS}
KIND_SPLITS: dict[str, tuple[str, ...]] = {"sts": ("test",), "classification": ("train", "test")}
Data = dict[str, dict[str, list]]
"""A task's rows: split -> MTEB column -> values (what ``read_task`` returns and mteb tasks are fed)."""
MTEB_SPEC = "mteb:"
"""Prefix of a probe spec naming a benchmark directory (``mteb:DIR[:TASK,...]``; ``in_training.py``)."""


def is_mteb_spec(spec: str) -> bool:
    """Whether a ``training.probe_tasks`` / study probe spec names MTEB task folders."""
    return spec.startswith(MTEB_SPEC)


@dataclass(frozen=True)
class TaskFolder:
    """One discovered task: its name (the folder's), its kind and the file of each split it uses."""

    name: str
    """The folder's name (``STS13``, ``Banking77``)."""
    kind: TaskKind
    """``sts`` or ``classification``, from the test split's columns."""
    splits: dict[str, Path]
    """Split name -> file; STS uses ``test``, classification ``train`` and ``test``."""

    def __post_init__(self) -> None:
        if self.kind not in KIND_SPLITS:
            raise ValueError(f"task {self.name}: kind must be one of {sorted(KIND_SPLITS)}, not {self.kind!r}")
        missing = [split for split in KIND_SPLITS[self.kind] if split not in self.splits]
        if missing:
            raise ValueError(f"task {self.name}: {self.kind} needs split file(s) {missing}")

    @property
    def directory(self) -> Path:
        return self.splits["test"].parent


def split_file(folder: Path, split: str) -> Path | None:
    """The file holding ``split`` in ``folder`` (flat layout first, then a hub snapshot's ``data/``)."""
    for suffix in SPLIT_SUFFIXES:
        if (folder / f"{split}{suffix}").is_file():
            return folder / f"{split}{suffix}"
    shards = sorted((folder / "data").glob(f"{split}-*.parquet")) if (folder / "data").is_dir() else []
    if len(shards) > 1:
        raise ValueError(f"{folder}: split {split} has {len(shards)} parquet shards; merge them into one file")
    return shards[0] if shards else None


def read_numbered_rows(path: Path) -> tuple[list[dict], Where]:
    """Rows of a JSONL(.gz), parquet or headed TSV file, as dicts, and how to name row ``i`` in a message
    (its file line; parquet: its row). A TSV line with the wrong column count is an error, never a skipped row."""
    from megatron_crossbert.evaluation.tasks.data import read_jsonl_numbered

    if path.name.endswith((".jsonl", ".jsonl.gz")):
        numbered = read_jsonl_numbered(path)
        return [row for _, row in numbered], line_numbers(path, [line for line, _ in numbered])
    if path.name.endswith(".parquet"):
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist(), row_numbers(path)
    from megatron_crossbert.evaluation.tasks.glue import read_tsv_numbered

    header, numbered = read_tsv_numbered(path, header=True)
    bad = [line for line, row in numbered if len(row) != len(header)]
    if bad:
        raise ValueError(f"{path}: lines {bad[:5]} do not have the header's {len(header)} columns")
    return [dict(zip(header, row)) for _, row in numbered], line_numbers(path, [line for line, _ in numbered])


def read_rows(path: Path) -> list[dict]:
    """``read_numbered_rows`` without the row names."""
    return read_numbered_rows(path)[0]


def pick_columns(available: set[str], wanted: dict[str, tuple[str, ...]]) -> dict[str, str] | None:
    """MTEB column -> the file's column (the first accepted name present), or None when one is missing."""
    chosen: dict[str, str] = {}
    for column, aliases in wanted.items():
        hit = next((alias for alias in aliases if alias in available and alias not in chosen.values()), None)
        if hit is None:
            return None
        chosen[column] = hit
    return chosen


def kind_of_columns(name: str, test_columns: set[str], has_train: bool) -> TaskKind:
    """STS: the test split has a sentence pair and a score. Classification: text and label, plus a train split."""
    if pick_columns(test_columns, STS_COLUMNS) is not None:
        return "sts"
    if test_columns & set(STS_COLUMNS["sentence2"]):
        raise ValueError(f"task {name}: columns {sorted(test_columns)} look like pair classification, "
                         "which this benchmark does not run (STS needs a 'score' column)")
    if has_train and pick_columns(test_columns, CLASSIFICATION_COLUMNS) is not None:
        return "classification"
    raise ValueError(f"task {name}: columns {sorted(test_columns)} are neither STS (sentence1, sentence2, score) "
                     "nor classification (text, label, with a train split)")


def describe_folder(folder: Path) -> TaskFolder | None:
    """The task in ``folder``, or None when the folder holds no test split (not a task folder)."""
    splits = {split: path for split in ("train", "test") if (path := split_file(folder, split)) is not None}
    if "test" not in splits:
        return None
    first = read_rows(splits["test"])[:1]
    if not first:
        raise ValueError(f"{splits['test']}: no rows")
    kind = kind_of_columns(folder.name, set(first[0]), "train" in splits)
    return TaskFolder(folder.name, kind, {split: splits[split] for split in KIND_SPLITS[kind]})


def discover_task_folders(root: str | Path) -> list[TaskFolder]:
    """Every task folder directly under ``root`` (or ``root`` itself when it is one), sorted by name."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"benchmark directory {root} does not exist")
    own = describe_folder(root)
    if own is not None:
        return [own]
    found = [task for sub in sorted(root.iterdir()) if sub.is_dir() and (task := describe_folder(sub))]
    if not found:
        raise FileNotFoundError(f"{root} holds no task folder (a folder with test.jsonl, test.parquet or test.tsv)")
    return found


def read_columns(path: Path, kind: TaskKind, split: str = "test") -> dict[str, list]:
    """One split file as MTEB columns: ``{sentence1, sentence2, score}`` or ``{text, label}``. Gold values
    follow ``evaluation/tasks/gold.py``: scores finite and (STS test) not all equal, labels classes, and a train
    split with at least two of them; a bad one is refused naming its file and row."""
    rows, where = read_numbered_rows(path)
    if not all(isinstance(row, dict) for row in rows):
        raise ValueError(f"{path}: every row must be an object with named columns")
    wanted = KIND_COLUMNS[kind]
    columns = pick_columns(set(rows[0]) if rows else set(), wanted)
    if columns is None:
        raise ValueError(f"{path}: needs columns {list(wanted)} (or {dict(wanted)}), has "
                         f"{sorted(rows[0]) if rows else 'no rows'}")
    bad = [i for i, row in enumerate(rows) if any(row.get(src) is None for src in columns.values())]
    if bad:
        raise ValueError(f"{where(bad[0])}: lacks one of {list(columns.values())} ({len(bad)} such rows)")
    out = {dst: [row[src] for row in rows] for dst, src in columns.items()}
    if kind == "sts":
        return {"sentence1": [str(x) for x in out["sentence1"]], "sentence2": [str(x) for x in out["sentence2"]],
                "score": check_scores(out["score"], where, path)}
    check_labels(out["label"], where)
    if split == "train":
        check_classes(out["label"], path)
    return {"text": [str(x) for x in out["text"]], "label": out["label"]}


def read_task(task: TaskFolder) -> Data:
    """Every split the task uses, as MTEB columns."""
    return {split: read_columns(path, task.kind, split) for split, path in task.splits.items()}
