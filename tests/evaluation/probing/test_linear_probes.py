"""Probe sanity on synthetic features: a planted signal is found, shuffled labels stay at chance; GLUE metrics
and aggregation; the in-training suite API."""

from __future__ import annotations

import numpy as np
import pytest

from megatron_crossbert.evaluation.probing.in_training import probe_in_training
from megatron_crossbert.evaluation.probing.linear_probes import ProbeConfig, pair_features, probe_features
from megatron_crossbert.evaluation.tasks.metrics import average_scores, compute_metrics, task_score
from megatron_crossbert.evaluation.tasks.data import ProbeTask, Split, TaskSpec

CLS = TaskSpec("toy", "classification", ("accuracy",))
REG = TaskSpec("toy-reg", "regression", ("spearman", "pearson"))
FAST = ProbeConfig(cs=(0.01, 1.0), folds=3)


def _planted(n: int, dim: int = 24, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, dim))
    return x, (x[:, 0] + 0.3 * x[:, 1] > 0).astype(np.int64)


def test_planted_signal_is_found():
    x, y = _planted(600)
    result = probe_features(CLS, x[:400], y[:400], x[400:], y[400:], FAST)
    assert result.metrics["accuracy"] > 90.0
    assert result.chosen["C"] in FAST.cs and result.n_train == 400 and result.n_test == 200


def test_shuffled_labels_give_chance():
    x, y = _planted(1000)
    y_shuffled = np.random.default_rng(1).permutation(y)
    result = probe_features(CLS, x[:600], y_shuffled[:600], x[600:], y_shuffled[600:], FAST)
    assert 38.0 < result.metrics["accuracy"] < 62.0


def test_ridge_probe_recovers_linear_score():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(500, 16))
    y = x @ rng.normal(size=16) + 0.1 * rng.normal(size=500)
    result = probe_features(REG, x[:300], y[:300], x[300:], y[300:], FAST)
    assert result.metrics["spearman"] > 95.0 and "alpha" in result.chosen


def test_pair_features_layout():
    a, b = np.array([[1.0, -2.0]]), np.array([[3.0, 1.0]])
    np.testing.assert_allclose(pair_features(a, b), [[1, -2, 3, 1, 2, 3, 3, -2]])
    assert pair_features(np.zeros((3, 5, 4)), np.zeros((3, 5, 4))).shape == (3, 5, 16)


def test_glue_metrics_and_average():
    y_true, y_pred = np.array([1, 1, 0, 0, 1]), np.array([1, 0, 0, 0, 1])
    m = compute_metrics(("f1", "accuracy", "matthews"), y_true, y_pred)
    assert m["accuracy"] == pytest.approx(80.0) and m["f1"] == pytest.approx(80.0)
    assert m["matthews"] == pytest.approx(100 * 4 / 6, rel=1e-6)
    corr = compute_metrics(("spearman", "pearson"), np.arange(5.0), np.arange(5.0) ** 2)
    assert corr["spearman"] == pytest.approx(100.0) and corr["pearson"] < 100.0
    assert compute_metrics(("pearson",), np.arange(3.0), np.ones(3))["pearson"] == 0.0
    assert task_score({"f1": 80.0, "accuracy": 70.0}, ("f1", "accuracy")) == 75.0
    assert average_scores({}) is None and average_scores({"a": 1.0, "b": 3.0}) == 2.0


def _embed(texts: list[str]) -> np.ndarray:
    """A fake embedder: the planted word count and noise (2 layers, so the per-layer path runs)."""
    rng = np.random.default_rng(len(texts))
    signal = np.array([[t.count("good") - t.count("bad")] for t in texts], float)
    noise = rng.normal(size=(len(texts), 7))
    return np.stack([np.hstack([noise[:, :1], noise]), np.hstack([signal, noise])])


def test_probe_in_training_flat_dict():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, size=120)
    texts = ["good film" if y else "bad film" for y in labels]
    split = Split(texts=texts[:80], labels=labels[:80])
    test = Split(texts=texts[80:], labels=labels[80:])
    pair_task = ProbeTask(TaskSpec("pairs", "classification", ("accuracy",), is_pair=True),
                          Split(texts[:80], labels[:80], pairs=texts[:80]), Split(texts[80:], labels[80:], texts[80:]))
    out = probe_in_training(_embed, [ProbeTask(CLS, split, test), pair_task], probe_config=FAST)
    assert out["probe/toy/accuracy"] == 100.0
    assert out["probe/toy/accuracy/layer0"] < 80.0
    assert {"probe/toy/score/layer1", "probe/pairs/accuracy", "probe/avg"} <= set(out)
    assert all(isinstance(v, float) for v in out.values())


def test_probe_task_specs(tmp_path):
    from megatron_crossbert.evaluation.in_training import parse_task_specs
    from tests.support.synthetic_eval import write_glue_fixture

    glue = write_glue_fixture(tmp_path / "glue", n=4)
    parsed = parse_task_specs([f"glue:{glue}:SST-2,STS-B", f"jsonl:{tmp_path}/t1", str(tmp_path / "t2")])
    assert parsed == {"glue_dir": str(glue), "glue_tasks": ["SST-2", "STS-B"],
                      "jsonl": [f"{tmp_path}/t1", str(tmp_path / "t2")]}
    assert len(parse_task_specs([str(glue)])["glue_tasks"]) == 10


def _letter_counts(texts: list[str]) -> np.ndarray:
    """A deterministic stand-in for the live model: letter counts."""
    out = np.zeros((len(texts), 26), np.float32)
    for i, text in enumerate(texts):
        for ch in text.lower():
            if "a" <= ch <= "z":
                out[i, ord(ch) - 97] += 1
    return out + 1e-3


def test_mteb_probe_specs_score_cosine_spearman_with_mteb(tmp_path):
    """``mteb:DIR`` probes every STS folder (the classification one only when named), on a fixed subsample,
    and the value logged is scipy's Spearman of the cosine on the same embeddings."""
    import json

    from scipy.stats import spearmanr

    from megatron_crossbert.evaluation.mteb import in_training as mteb_lite
    from megatron_crossbert.evaluation.mteb.in_training import load_mteb_tasks, parse_mteb_spec
    from tests.support.synthetic_eval import write_mteb_lite_fixture

    bench = write_mteb_lite_fixture(tmp_path / "bench", pairs=40)
    rng = np.random.default_rng(0)  # ToySTSA without identical pairs: their cosine ties only up to rounding
    words = ["cat", "dog", "sat", "mat", "ran", "far", "sky", "blue", "red", "sun"]
    pairs = [(" ".join(rng.choice(words, 5)), " ".join(rng.choice(words, 5)), float(rng.uniform(0, 5)))
             for _ in range(40)]
    (bench / "ToySTSA" / "test.jsonl").write_text("".join(
        json.dumps({"sentence1": a, "sentence2": b, "score": y}) + "\n" for a, b, y in pairs if a != b))
    assert parse_mteb_spec(f"mteb:{bench}:ToySTSA,ToyIntents") == (bench, ["ToySTSA", "ToyIntents"])
    with pytest.raises(ValueError, match="mteb:"):
        parse_mteb_spec("jsonl:/d")
    with pytest.raises(ValueError, match="no task folder \\['STS99'\\]"):
        load_mteb_tasks([f"mteb:{bench}:STS99"])
    tasks = load_mteb_tasks([f"mteb:{bench}"], max_test=30)
    assert [t.folder for t in tasks] == ["ToySTSA", "ToySTSB"] and len(tasks[0].task.dataset["test"]) == 30
    again = load_mteb_tasks([f"mteb:{bench}"], max_test=30)
    assert tasks[0].task.dataset["test"]["sentence1"] == again[0].task.dataset["test"]["sentence1"]
    scores = mteb_lite.probe_in_training(_letter_counts, tasks, prefix="probe/")
    rows = tasks[0].task.dataset["test"]
    a, b = _letter_counts(rows["sentence1"]), _letter_counts(rows["sentence2"])
    cosine = np.sum(a * b, 1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    expected = 100 * spearmanr(rows["score"], cosine).statistic
    assert scores["probe/mteb/ToySTSA/cosine_spearman"] == pytest.approx(expected, abs=1e-6)
    assert set(scores) == {"probe/mteb/ToySTSA/cosine_spearman", "probe/mteb/ToySTSB/cosine_spearman",
                           "probe/mteb/avg"}
    assert json.dumps(scores)  # flat floats, ready for TensorBoard


def test_encode_embed_fn_sorts_by_length_and_keeps_the_order():
    import torch

    from megatron_crossbert.evaluation.probing.in_training import make_encode_embed_fn

    batches = []

    def tokenizer(texts, **kwargs):
        batches.append(list(texts))
        width = max(len(t) for t in texts)
        ids = torch.tensor([[len(t)] * width for t in texts])
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}

    embed = make_encode_embed_fn(lambda ids, mask: ids[..., None].float(), tokenizer, batch_size=2)
    texts = ["aa", "a", "aaaa", "aaa", "aaaaa"]
    assert embed(texts)[:, 0].tolist() == [2, 1, 4, 3, 5]
    assert batches == [["aaaaa", "aaaa"], ["aaa", "aa"], ["a"]]
