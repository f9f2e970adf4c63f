"""mteb task objects whose data comes from local files, so that mteb itself does the scoring offline.

mteb's built-in tasks download their data from the hub. Offline, two kinds of task objects are fed
with local rows (``task_folders`` reads them into MTEB's columns):

- **mteb's own registered task** (``mteb.get_task``), when a benchmark folder holds the same data: same
  name (or ``<name>Classification``, mteb's naming), same kind, and the row counts and score / label
  statistics of mteb's shipped ``descriptive_stats``. Everything that decides the score is then
  mteb's: evaluator, seed, ``samples_per_label``, ``n_experiments``, LogisticRegression, STS score
  range, main score; the result JSON carries mteb's task name, so it compares line by line with
  MTEB's public results. (Text lengths are not compared: mteb's hub copies differ in whitespace.)
- **a local task** of mteb's base class for the kind, with mteb's defaults, for anything else (STS12
  without its MSRvid part, a user's own task, ``--local-task`` specs). A folder whose name would shadow
  a registered task with other data gets a ``-local`` suffix, and the reason goes into the report.

``--local-task`` specs are ``KIND:NAME:PATH``: ``classification:NAME:DIR`` (split files ``train`` and
``test`` in DIR) or ``sts:NAME:FILE`` (one file used as the test split); columns as in ``task_folders``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from megatron_crossbert.evaluation.mteb.task_folders import TaskFolder, read_columns, read_task, split_file

logger = logging.getLogger(__name__)
_COMMON_METADATA = {
    "description": "Local task built from files by megatron-crossbert (offline evaluation).",
    "reference": None,
    "category": "t2t",
    "eval_splits": ["test"],
    "eval_langs": ["eng-Latn"],
    "date": None,
    "dialect": [],
    "domains": [],
    "task_subtypes": [],
    "license": "not specified",
    "annotations_creators": "derived",
    "modalities": ["text"],
    "sample_creation": "found",
    "bibtex_citation": "",
}
LOCAL_KINDS = ("classification", "sts")
LOCAL_SUFFIX = "-local"
Data = dict[str, dict[str, list]]  # split -> MTEB columns


@dataclass(frozen=True)
class LocalTaskSpec:
    """A parsed ``KIND:NAME:PATH`` spec."""

    kind: str
    name: str
    path: Path

    @classmethod
    def parse(cls, text: str) -> "LocalTaskSpec":
        parts = text.split(":", 2)
        if len(parts) != 3 or parts[0] not in LOCAL_KINDS or not parts[1]:
            raise ValueError(f"local task spec {text!r} must be KIND:NAME:PATH with KIND in {LOCAL_KINDS}")
        return cls(kind=parts[0], name=parts[1], path=Path(parts[2]))


@dataclass(frozen=True)
class BuiltTask:
    """An mteb task ready to run, and how it relates to mteb's registry (for the report)."""

    task: object
    """The mteb task object, its data already loaded."""
    folder: str | None
    """The benchmark folder it came from (None for online or ``--local-task`` tasks)."""
    mteb_name: str | None
    """The registered mteb task it reproduces, or None for a local task."""
    note: str = ""
    """Why a folder is not mteb's task of the same name, or which data version it is."""

    @property
    def name(self) -> str:
        return self.task.metadata.name


def _metadata(name: str, task_type: str, main_score: str, path: Path):
    from mteb.abstasks.task_metadata import TaskMetadata

    return TaskMetadata(name=name, type=task_type, main_score=main_score,
                        dataset={"path": str(path), "revision": "local"}, **_COMMON_METADATA)


def inject_data(task, data: Data):
    """Give an mteb task its rows; ``data_loaded`` keeps mteb from downloading (and from unloading ours)."""
    from datasets import Dataset, DatasetDict

    task.dataset = DatasetDict({split: Dataset.from_dict(columns) for split, columns in data.items()})
    task.data_loaded = True
    return task


def local_task(name: str, kind: str, data: Data, path: Path, **overrides):
    """A task of mteb's base class for ``kind`` with mteb's defaults (``overrides``: class attributes such as
    ``n_experiments``), fed with ``data``; STS scores are normalised over the data's own range."""
    from mteb.abstasks.classification import AbsTaskClassification
    from mteb.abstasks.sts import AbsTaskSTS

    if kind == "sts":
        scores = data["test"]["score"]
        lo, hi = min(scores), max(scores)
        attrs = {"metadata": _metadata(name, "STS", "cosine_spearman", path), "min_score": lo,
                 "max_score": hi if hi > lo else lo + 1}
        base = AbsTaskSTS
    else:
        attrs, base = {"metadata": _metadata(name, "Classification", "accuracy", path)}, AbsTaskClassification
    cls = type(f"Local{kind.upper()}_{''.join(c if c.isalnum() else '_' for c in name)}", (base,),
               {**attrs, **overrides})
    return inject_data(cls(), data)


def make_classification_task(name: str, task_dir: str | Path, *, samples_per_label: int | None = None,
                             n_experiments: int | None = None):
    """A local classification task over ``task_dir``'s train and test split files."""
    task_dir = Path(task_dir)
    data = {}
    for split in ("train", "test"):
        path = split_file(task_dir, split)
        if path is None:
            raise FileNotFoundError(f"local task {name}: {task_dir} has no {split} split (e.g. {split}.jsonl)")
        data[split] = read_columns(path, "classification", split)
    overrides = {k: v for k, v in (("samples_per_label", samples_per_label), ("n_experiments", n_experiments))
                 if v is not None}
    return local_task(name, "classification", data, task_dir, **overrides)


def make_sts_task(name: str, path: str | Path):
    """A local STS task over one file used as the test split."""
    path = Path(path)
    return local_task(name, "sts", {"test": read_columns(path, "sts")}, path)


def build_local_task(spec: LocalTaskSpec | str, **kwargs):
    """Build the mteb task object for a ``KIND:NAME:PATH`` spec."""
    spec = LocalTaskSpec.parse(spec) if isinstance(spec, str) else spec
    if not spec.path.exists():
        raise FileNotFoundError(f"local task {spec.name}: {spec.path} does not exist")
    if spec.kind == "classification":
        return make_classification_task(spec.name, spec.path, **kwargs)
    return make_sts_task(spec.name, spec.path)


def _registered(name: str, kind: str):
    """mteb's registered task ``name`` when it is of ``kind``, else None."""
    import mteb
    from mteb.abstasks.classification import AbsTaskClassification
    from mteb.abstasks.sts import AbsTaskSTS

    try:
        task = mteb.get_task(name)
    except (KeyError, ValueError):
        return None
    return task if isinstance(task, AbsTaskSTS if kind == "sts" else AbsTaskClassification) else None


def candidate_names(folder: TaskFolder) -> list[str]:
    """Registered names a folder may stand for: its own, and ``<name>Classification`` (mteb's naming)."""
    return [folder.name] + ([f"{folder.name}Classification"] if folder.kind == "classification" else [])


def data_mismatch(task, kind: str, data: Data) -> str | None:
    """Why local data is not the registered task's (None when row counts and score/label statistics agree)."""
    stats = task.metadata.descriptive_stats or {}
    for split, columns in data.items():
        ref, rows = stats.get(split) or {}, len(next(iter(columns.values())))
        if ref.get("num_samples") != rows:
            return f"{split}: {rows} rows, mteb's {task.metadata.name} has {ref.get('num_samples')}"
        labels = ref.get("label_statistics") or {}
        if kind == "sts" and not np.isclose(np.mean(columns["score"]), labels.get("avg_score", np.nan)):
            return f"{split}: mean score {np.mean(columns['score']):.4f}, mteb's {labels.get('avg_score')}"
        if kind == "classification":
            ours = sorted(np.unique(np.asarray(columns["label"], dtype=str), return_counts=True)[1].tolist())
            if ours != sorted(v["count"] for v in (labels.get("labels") or {}).values()):
                return f"{split}: label counts differ from mteb's {task.metadata.name}"
    return None


def subsample_test(data: Data, max_test: int | None, seed: int) -> tuple[Data, int]:
    """``data`` with at most ``max_test`` test rows (a fixed-seed draw, file order kept), and the test rows before."""
    test = data["test"]
    rows = len(next(iter(test.values())))
    if max_test is None or rows <= max_test:
        return data, rows
    keep = np.sort(np.random.default_rng(seed).choice(rows, size=max_test, replace=False))
    return {**data, "test": {column: [values[i] for i in keep] for column, values in test.items()}}, rows


def build_task(folder: TaskFolder, *, max_test: int | None = None, seed: int = 0) -> BuiltTask:
    """mteb's registered task fed with the folder's rows when the data matches, else a local task.

    ``max_test`` subsamples the test split once (in-training probes, studies): the result is a local
    task named ``<folder>-subset`` (its scores are not comparable with MTEB's published ones).
    """
    data, rows = subsample_test(read_task(folder), max_test, seed)
    if max_test is not None and rows > max_test:
        task = local_task(f"{folder.name}-subset", folder.kind, data, folder.directory)
        return BuiltTask(task, folder.name, None, note=f"test subsampled to {max_test} of {rows} rows (seed {seed})")
    shadowed = None
    for name in candidate_names(folder):
        task = _registered(name, folder.kind)
        if task is None:
            continue
        why = data_mismatch(task, folder.kind, data)
        if why is None:
            superseded = task.metadata.superseded_by
            note = f"mteb marks {name} superseded by {superseded}" if superseded else ""
            return BuiltTask(inject_data(task, data), folder.name, name, note)
        shadowed = (name, why)
    if shadowed is None:
        return BuiltTask(local_task(folder.name, folder.kind, data, folder.directory), folder.name, None)
    logger.warning("%s is not mteb's %s (%s); scored as a local task", folder.name, *shadowed)
    return BuiltTask(local_task(folder.name + LOCAL_SUFFIX, folder.kind, data, folder.directory), folder.name,
                     None, note=f"not mteb's {shadowed[0]}: {shadowed[1]}")
