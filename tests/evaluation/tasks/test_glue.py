"""GLUE TSV parsing on generated fixtures in the exact glue_data layouts (CoLA header-less, MRPC BOM and
unbalanced quotes, STS-B float scores, MNLI matched/mismatched, a malformed QQP row) and JSONL tasks."""

from __future__ import annotations

import json

import numpy as np
import pytest

from megatron_crossbert.evaluation.tasks.glue import (
    GLUE_TASK_NAMES, available_glue_tasks, canonical_glue_name, load_glue_task, read_glue_split, GLUE_FORMATS)
from megatron_crossbert.evaluation.tasks.data import load_jsonl_task
from tests.support.synthetic_eval import write_glue_fixture, write_jsonl_task

N = 24


@pytest.fixture(scope="module")
def glue_dir(tmp_path_factory):
    return write_glue_fixture(tmp_path_factory.mktemp("glue_data"), n=N)


def test_every_task_loads_with_expected_shape(glue_dir):
    assert available_glue_tasks(glue_dir) == list(GLUE_TASK_NAMES)
    for name in GLUE_TASK_NAMES:
        task = load_glue_task(glue_dir, name)
        assert len(task.train) == N and len(task.test) == N, name
        assert task.spec.glue and task.spec.is_pair == (name not in ("CoLA", "SST-2"))
        assert (task.train.pairs is not None) == task.spec.is_pair


def test_cola_headerless_keeps_first_row_and_sentence_column(glue_dir):
    first_line = (glue_dir / "CoLA" / "train.tsv").read_text().splitlines()[0]
    task = load_glue_task(glue_dir, "cola")
    assert task.train.texts[0] == first_line.split("\t")[3]
    assert task.train.labels[0] == int(first_line.split("\t")[1])
    assert task.spec.metrics == ("matthews",)


def test_mrpc_bom_header_and_unbalanced_quote(glue_dir):
    raw = (glue_dir / "MRPC" / "dev.tsv").read_text(encoding="utf-8")
    assert raw.startswith("\ufeffQuality")
    task = load_glue_task(glue_dir, "MRPC")
    assert all(text.startswith('"') for text in task.test.texts)  # quote kept, rows not merged
    assert len(task.test) == N and set(task.test.labels.tolist()) == {0, 1}
    assert task.spec.metrics == ("f1", "accuracy")


def test_stsb_float_scores_are_regression(glue_dir):
    task = load_glue_task(glue_dir, "STS-B")
    assert task.spec.kind == "regression" and task.train.labels.dtype == np.float64
    assert not np.all(task.train.labels == task.train.labels.round())
    assert task.spec.metrics == ("spearman", "pearson")


def test_mnli_matched_and_mismatched_use_gold_label(glue_dir):
    matched, mismatched = load_glue_task(glue_dir, "MNLI"), load_glue_task(glue_dir, "mnli-mm")
    assert matched.spec.name == "MNLI" and mismatched.spec.name == "MNLI-mm"
    assert matched.test.labels.tolist()[:3] == [0, 1, 2]  # contradiction, entailment, neutral
    assert matched.source == mismatched.source


def test_string_nli_labels_have_fixed_ids(glue_dir):
    for name in ("RTE", "QNLI"):
        task = load_glue_task(glue_dir, name)
        # rows alternate not_entailment, entailment; ids follow the fixed (entailment, not_entailment) order
        assert task.train.labels.tolist()[:2] == [1, 0]


def test_qqp_malformed_row_is_skipped(glue_dir, caplog):
    texts, pairs, labels = read_glue_split(glue_dir / "QQP" / "train.tsv", GLUE_FORMATS["QQP"])
    assert len(texts) == len(pairs) == len(labels) == N
    assert "skipped 1 malformed" in caplog.text


def test_missing_split_is_not_available(glue_dir, tmp_path):
    (tmp_path / "QNLI").mkdir()
    (tmp_path / "QNLI" / "dev.tsv").write_text((glue_dir / "QNLI" / "dev.tsv").read_text())
    assert available_glue_tasks(tmp_path) == []
    with pytest.raises(FileNotFoundError):
        load_glue_task(tmp_path, "QNLI")


def test_task_name_aliases():
    assert canonical_glue_name("sst2") == "SST-2" and canonical_glue_name("stsb") == "STS-B"
    assert canonical_glue_name("mnli_mismatched") == "MNLI-mm"
    with pytest.raises(KeyError):
        canonical_glue_name("squad")


def test_jsonl_task_with_string_labels_and_pairs(tmp_path):
    task_dir = write_jsonl_task(tmp_path / "toy", n_train=10, n_test=6)
    assert load_jsonl_task(task_dir).spec.name == "toy"
    rows = [{"text": "a", "text_pair": "b", "label": lab} for lab in ("yes", "no", "yes")]
    (tmp_path / "pairs").mkdir()
    for split in ("train", "test"):
        (tmp_path / "pairs" / f"{split}.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    task = load_jsonl_task(tmp_path / "pairs")
    assert task.spec.is_pair and task.train.labels.tolist() == [1, 0, 1]


def test_hf_datasets_loader_with_local_files(tmp_path):
    from megatron_crossbert.evaluation.tasks.data import load_hf_task

    task_dir = write_jsonl_task(tmp_path / "toy", n_train=10, n_test=6)
    files = {s: str(task_dir / f"{s}.jsonl") for s in ("train", "test")}
    task = load_hf_task("json", name="toy-hf", data_files=files, cache_dir=str(tmp_path / "hf_cache"))
    assert task.spec.name == "toy-hf" and len(task.train) == 10 and len(task.test) == 6
    assert task.train.labels.tolist() == load_jsonl_task(task_dir).train.labels.tolist()
