"""MTEB tasks built from local files, for offline benchmarking.

mteb's built-in tasks download their data from the hub; offline we build task objects whose
``load_data`` reads local files instead. Two kinds are supported:

- ``classification``: a directory with ``train.jsonl`` / ``test.jsonl`` rows ``{"text", "label"}``
  (the ``/work/shared/data/probe`` layout). Scored by mteb's own protocol (logistic regression on
  ``samples_per_label`` examples per class, averaged over ``n_experiments`` draws).
- ``sts``: a JSONL file ``{"text", "text_pair", "score"}`` or a TSV with a header naming
  ``sentence1``, ``sentence2`` and ``score`` (the GLUE STS-B dev layout works as is). Scored by
  mteb's STS protocol (cosine Spearman as the main score).

Spec strings for the CLI: ``KIND:NAME:PATH``, e.g. ``classification:bbc:/data/probe/bbc_news`` or
``sts:stsb-dev:/data/glue/STS-B/dev.tsv``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from megatron_crossbert.evaluation.glue import read_tsv
from megatron_crossbert.evaluation.tasks import read_jsonl_rows

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


def _metadata(name: str, task_type: str, main_score: str, path: Path):
    from mteb.abstasks.task_metadata import TaskMetadata

    return TaskMetadata(name=name, type=task_type, main_score=main_score,
                        dataset={"path": str(path), "revision": "local"}, **_COMMON_METADATA)


def _classification_split(path: Path) -> dict[str, list]:
    rows = read_jsonl_rows(path)
    missing = [i for i, row in enumerate(rows) if "text" not in row or "label" not in row]
    if missing:
        raise ValueError(f"{path}: rows {missing[:5]} lack 'text' or 'label'")
    return {"text": [str(r["text"]) for r in rows], "label": [r["label"] for r in rows]}


def read_sts_file(path: str | Path) -> dict[str, list]:
    """``{"sentence1", "sentence2", "score"}`` columns from a JSONL or a headed TSV file."""
    path = Path(path)
    if path.suffix in (".tsv", ".txt"):
        header, rows = read_tsv(path, header=True)
        idx = {col: header.index(col) for col in ("sentence1", "sentence2", "score") if col in header}
        if len(idx) != 3:
            raise ValueError(f"{path}: TSV header {header} needs sentence1, sentence2 and score columns")
        rows = [r for r in rows if len(r) > max(idx.values())]
        return {"sentence1": [r[idx["sentence1"]] for r in rows], "sentence2": [r[idx["sentence2"]] for r in rows],
                "score": [float(r[idx["score"]]) for r in rows]}
    rows = read_jsonl_rows(path)
    return {"sentence1": [str(r["text"]) for r in rows], "sentence2": [str(r["text_pair"]) for r in rows],
            "score": [float(r["score"] if "score" in r else r["label"]) for r in rows]}


def make_classification_task(name: str, task_dir: str | Path, *, samples_per_label: int | None = None,
                             n_experiments: int | None = None):
    """An ``AbsTaskClassification`` reading ``task_dir/{train,test}.jsonl``."""
    from datasets import Dataset, DatasetDict
    from mteb.abstasks.classification import AbsTaskClassification

    task_dir = Path(task_dir)

    def load_data(self, num_proc=None, **kwargs) -> None:
        self.dataset = DatasetDict({split: Dataset.from_dict(_classification_split(task_dir / f"{split}.jsonl"))
                                    for split in ("train", "test")})
        self.data_loaded = True

    attrs = {"metadata": _metadata(name, "Classification", "accuracy", task_dir), "load_data": load_data}
    if samples_per_label is not None:
        attrs["samples_per_label"] = samples_per_label
    if n_experiments is not None:
        attrs["n_experiments"] = n_experiments
    return type(f"Local{name}Classification", (AbsTaskClassification,), attrs)()


def make_sts_task(name: str, path: str | Path, *, min_score: float | None = None, max_score: float | None = None):
    """An ``AbsTaskSTS`` over one file used as the test split; score range from the data unless given."""
    from datasets import Dataset, DatasetDict
    from mteb.abstasks.sts import AbsTaskSTS

    path = Path(path)
    columns = read_sts_file(path)
    lo = min(columns["score"]) if min_score is None else min_score
    hi = max(columns["score"]) if max_score is None else max_score

    def load_data(self, num_proc=None, **kwargs) -> None:
        self.dataset = DatasetDict({"test": Dataset.from_dict(columns)})
        self.data_loaded = True

    attrs = {"metadata": _metadata(name, "STS", "cosine_spearman", path), "load_data": load_data,
             "min_score": lo, "max_score": hi if hi > lo else lo + 1}
    return type(f"Local{name}STS", (AbsTaskSTS,), attrs)()


def build_local_task(spec: LocalTaskSpec | str, **kwargs):
    """Build the mteb task object for a ``KIND:NAME:PATH`` spec."""
    spec = LocalTaskSpec.parse(spec) if isinstance(spec, str) else spec
    if not spec.path.exists():
        raise FileNotFoundError(f"local task {spec.name}: {spec.path} does not exist")
    if spec.kind == "classification":
        return make_classification_task(spec.name, spec.path, **kwargs)
    return make_sts_task(spec.name, spec.path)
