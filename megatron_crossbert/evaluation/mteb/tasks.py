"""mteb task objects whose data comes from local files, so that mteb itself does the scoring offline.

mteb's built-in tasks download their data from the hub. Offline, two kinds of task objects are fed
with local rows (``tasks/folders.py`` reads them into MTEB's columns):

- **mteb's own registered task** (``mteb.get_task``), when a benchmark folder holds the same data: same
  name (or ``<name>Classification``, mteb's naming), same kind, and the row counts and score / label
  statistics of mteb's shipped ``descriptive_stats``. For a multilingual task (AmazonCounterfactual) the
  folder is compared with each English-only hf subset's statistics, and the match runs as that subset
  alone (``en``), on the eval splits the folder holds. Everything that decides the score is then
  mteb's: evaluator, seed, ``samples_per_label``, ``n_experiments``, LogisticRegression, STS score
  range, main score; the result JSON carries mteb's task name, so it compares line by line with
  MTEB's public results. (Text lengths are not compared: the hub copies of STS12-16 are SentEval's
  Moses-tokenised, lowercased text, which ``text_forms.mteb_text`` gives the folder's original text once the
  task matches.)
- **a local task** of mteb's base class for the kind, with mteb's defaults, for anything else (STS12
  without its MSRvid part, a user's own task, ``--local-task`` specs). A folder whose name would shadow
  a registered task with other data gets a ``-local`` suffix, and the reason goes into the report.

``--local-task`` specs are ``KIND:NAME:PATH``: ``classification:NAME:DIR`` (split files ``train`` and
``test`` in DIR) or ``sts:NAME:FILE`` (one file used as the test split); columns as in ``tasks/folders.py``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from megatron_crossbert.evaluation.tasks.folders import Data, TaskFolder, read_columns, read_task, split_file
from megatron_crossbert.evaluation.mteb.text_forms import mteb_text

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
ENGLISH = ["eng-Latn"]


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
    subset: str | None = None
    """The hf subset of a multilingual registered task the folder holds (``en``), else None."""

    @property
    def name(self) -> str:
        return self.task.metadata.name


def _metadata(name: str, task_type: str, main_score: str, path: Path):
    from mteb.abstasks.task_metadata import TaskMetadata

    return TaskMetadata(name=name, type=task_type, main_score=main_score,
                        dataset={"path": str(path), "revision": "local"}, **_COMMON_METADATA)


def inject_data(task, data: Data, subset: str | None = None):
    """Give an mteb task its rows; ``data_loaded`` keeps mteb from downloading (and from unloading ours).
    ``subset``: the one hf subset of a multilingual task the rows are (mteb then runs only that subset), and
    only the eval splits the rows hold are run (AmazonCounterfactual's ``validation`` is not read)."""
    from datasets import Dataset, DatasetDict

    splits = DatasetDict({split: Dataset.from_dict(columns) for split, columns in data.items()})
    task.dataset = splits if subset is None else {subset: splits}
    if subset is not None:
        task.hf_subsets = [subset]
    task.filter_eval_splits([split for split in task.metadata.eval_splits if split in data])
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


def english_subsets(task) -> list[str | None]:
    """The hf subsets an English folder may be of ``task``: ``[None]`` for a monolingual task, else every
    subset whose languages are English alone (AmazonCounterfactual: ``en-ext``, ``en``; STS17: ``en-en``)."""
    if not task.metadata.is_multilingual:
        return [None]
    return [subset for subset, langs in task.metadata.hf_subsets_to_langscripts.items() if list(langs) == ENGLISH]


def split_stats(task, split: str, subset: str | None) -> dict:
    """mteb's shipped descriptive statistics of one split (of one hf subset for a multilingual task)."""
    stats = (task.metadata.descriptive_stats or {}).get(split) or {}
    return stats if subset is None else ((stats.get("hf_subset_descriptive_stats") or {}).get(subset) or {})


def data_mismatch(task, kind: str, data: Data, subset: str | None = None) -> str | None:
    """Why local data is not the registered task's (None when row counts and score/label statistics agree);
    ``subset``: compare with that hf subset's statistics."""
    name = task.metadata.name + (f" ({subset})" if subset else "")
    for split, columns in data.items():
        ref, rows = split_stats(task, split, subset), len(next(iter(columns.values())))
        if ref.get("num_samples") != rows:
            return f"{split}: {rows} rows, mteb's {name} has {ref.get('num_samples')}"
        labels = ref.get("label_statistics") or {}
        if kind == "sts" and not np.isclose(np.mean(columns["score"]), labels.get("avg_score", np.nan)):
            return f"{split}: mean score {np.mean(columns['score']):.4f}, mteb's {labels.get('avg_score')}"
        if kind == "classification":
            ours = sorted(np.unique(np.asarray(columns["label"], dtype=str), return_counts=True)[1].tolist())
            if ours != sorted(v["count"] for v in (labels.get("labels") or {}).values()):
                return f"{split}: label counts differ from mteb's {name}"
    return None


def registered_match(folder: TaskFolder, data: Data) -> tuple[BuiltTask | None, tuple[str, str] | None]:
    """mteb's registered task (and English subset) whose data ``data`` is, fed with it; else None and the
    closest name with why it differs (None when no registered task has the folder's name)."""
    shadowed = None
    for name in candidate_names(folder):
        task = _registered(name, folder.kind)
        for subset in english_subsets(task) if task is not None else []:
            why = data_mismatch(task, folder.kind, data, subset)
            if why is not None:
                shadowed = (name, why)
                continue
            data, form = mteb_text(name, data)
            notes = ([f"mteb's subset {subset!r}"] if subset else []) + ([form] if form else [])
            if task.metadata.superseded_by:
                notes.append(f"mteb marks {name} superseded by {task.metadata.superseded_by}")
            return BuiltTask(inject_data(task, data, subset), folder.name, name, "; ".join(notes), subset), None
    return None, shadowed


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
    built, shadowed = registered_match(folder, data)
    if built is not None:
        return built
    if shadowed is None:
        return BuiltTask(local_task(folder.name, folder.kind, data, folder.directory), folder.name, None)
    logger.warning("%s is not mteb's %s (%s); scored as a local task", folder.name, *shadowed)
    return BuiltTask(local_task(folder.name + LOCAL_SUFFIX, folder.kind, data, folder.directory), folder.name,
                     None, note=f"not mteb's {shadowed[0]}: {shadowed[1]}")
