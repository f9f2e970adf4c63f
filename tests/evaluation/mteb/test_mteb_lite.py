"""CI slice of the offline MTEB benchmark on the real MTEB-lite data: the same code path as
``crossbert-mteb --benchmark-dir`` (model resolution, the model's recipe, task folders, mteb's evaluators,
the result files) on a few hundred rows, checked against references computed here independently:
sentence-transformers embeddings with scipy's Spearman for STS, and for classification mteb's
protocol re-enacted with scikit-learn on those embeddings.

Skips, naming the path, without ``../shared/data/mteb_lite`` (a clean clone), and without the MiniLM dev
extra. The full reproduction of MTEB's published scores is the benchmark command in docs/results.md.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

N_PAIRS, N_LABELS, TRAIN_PER_LABEL, TEST_PER_LABEL = 100, 8, 16, 8


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _write(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _per_label(rows: list[dict], labels: list[str], k: int) -> list[dict]:
    taken, out = defaultdict(int), []
    for row in rows:
        if row["label"] in labels and taken[row["label"]] < k:
            out.append(row)
            taken[row["label"]] += 1
    return out


def write_slice(src: Path, dst: Path) -> Path:
    """STS13/STS16: their first N_PAIRS pairs; Banking77: N_LABELS intents, a few rows each (file order kept)."""
    for task in ("STS13", "STS16"):
        _write(dst / task / "test.jsonl", _rows(src / task / "test.jsonl")[:N_PAIRS])
    train = _rows(src / "Banking77" / "train.jsonl")
    labels = sorted({r["label"] for r in train})[:N_LABELS]
    _write(dst / "Banking77" / "train.jsonl", _per_label(train, labels, TRAIN_PER_LABEL))
    _write(dst / "Banking77" / "test.jsonl", _per_label(_rows(src / "Banking77" / "test.jsonl"), labels, TEST_PER_LABEL))
    return dst


@pytest.fixture(scope="module")
def slice_run(mteb_lite_dir, minilm_dir, tmp_path_factory):
    from megatron_crossbert.evaluation.mteb.adapter import benchmark_tasks, build_mteb_encoder, run_mteb

    root = tmp_path_factory.mktemp("mteb_slice")
    bench = write_slice(mteb_lite_dir, root / "bench")
    wrapper = build_mteb_encoder(str(minilm_dir), cache_dir=None, device="cpu")
    summary = run_mteb(wrapper, benchmark_tasks(bench), root / "out", benchmark_dir=str(bench))
    return bench, root / "out", summary


@pytest.fixture(scope="module")
def st_model(minilm_dir):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(minilm_dir), device="cpu")


@pytest.mark.slow
def test_sts_slice_matches_sentence_transformers_and_scipy(slice_run, st_model):
    from scipy.stats import spearmanr

    bench, out, summary = slice_run
    assert summary["model"]["recipe"]["normalize"] is True  # MiniLM's Normalize module, read from modules.json
    rows = {r["folder"]: r for r in summary["tasks"]}
    for task in ("STS13", "STS16"):
        pairs = _rows(bench / task / "test.jsonl")
        a = st_model.encode([r["sentence1"] for r in pairs], normalize_embeddings=True)
        b = st_model.encode([r["sentence2"] for r in pairs], normalize_embeddings=True)
        reference = 100 * spearmanr([r["score"] for r in pairs], np.sum(a * b, axis=1)).statistic
        assert rows[task]["main_score"] == pytest.approx(reference, abs=0.05)
        result = json.loads((out / f"{rows[task]['task']}.json").read_text())  # mteb's result format
        assert result["scores"]["test"][0]["main_score"] == pytest.approx(reference / 100, abs=5e-4)


@pytest.mark.slow
def test_classification_slice_follows_mteb_protocol(slice_run, st_model):
    """mteb's protocol re-enacted: a seed-42 RandomState shuffle of the carried index list per experiment,
    the first 8 rows of each label, LogisticRegression(max_iter=100) on the unit-norm embeddings, mean
    accuracy of 10 experiments."""
    from sklearn.linear_model import LogisticRegression

    bench, out, summary = slice_run
    train, test = _rows(bench / "Banking77" / "train.jsonl"), _rows(bench / "Banking77" / "test.jsonl")
    x_train = st_model.encode([r["text"] for r in train], normalize_embeddings=True)
    x_test = st_model.encode([r["text"] for r in test], normalize_embeddings=True)
    idxs, accuracies = list(range(len(train))), []
    for _ in range(10):
        np.random.RandomState(42).shuffle(idxs)
        count, chosen = defaultdict(int), []
        for i in idxs:
            if count[train[i]["label"]] < 8:
                chosen.append(i)
                count[train[i]["label"]] += 1
        clf = LogisticRegression(max_iter=100, random_state=42).fit(x_train[chosen], [train[i]["label"] for i in chosen])
        accuracies.append(np.mean(clf.predict(x_test) == np.array([r["label"] for r in test])))
    row = next(r for r in summary["tasks"] if r["folder"] == "Banking77")
    assert row["mteb_task"] is None and row["main_score"] == pytest.approx(100 * np.mean(accuracies), abs=0.5)
    per_experiment = json.loads((out / f"{row['task']}.json").read_text())["scores"]["test"][0]["scores_per_experiment"]
    assert len(per_experiment) == 10
