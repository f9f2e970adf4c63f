"""Inputs a probe cannot be fitted on are refused in one line naming the task (and the model or the flag), before
scikit-learn sees them: whitening fitted on train features without variance (every train text the same), a model
whose features are NaN or infinite, and a train split with fewer rows of a class than cross-validation needs."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from megatron_crossbert.evaluation.probing.runner import ProbeRunConfig, run_probing
from megatron_crossbert.evaluation.tasks.data import load_jsonl_task


def _task(root, train: list[tuple[str, int]], name: str = "toy"):
    folder = root / name
    folder.mkdir(parents=True)
    test = [("good great film", 1), ("bad awful film", 0), ("lovely day", 1), ("dull story", 0)]
    for split, rows in (("train", train), ("test", test)):
        (folder / f"{split}.jsonl").write_text("".join(json.dumps({"text": t, "label": y}) + "\n" for t, y in rows))
    return load_jsonl_task(folder)


def _config(**changes) -> ProbeRunConfig:
    return ProbeRunConfig(max_len=16, cache_dir=None, device="cpu", **changes)


def test_whitening_train_features_without_variance_names_the_task(tiny_hf_encoder, tmp_path):
    task = _task(tmp_path, [("the same text", i % 2) for i in range(8)])
    with pytest.raises(ValueError) as err:
        run_probing(str(tiny_hf_encoder), [task], _config(whiten=True))
    message = str(err.value)
    assert "toy" in message and "--whiten" in message and "zero variance" in message and "\n" not in message


def test_nan_features_are_refused_naming_the_model_and_task(tiny_hf_encoder, tmp_path):
    from transformers import AutoModel

    broken = shutil.copytree(tiny_hf_encoder, tmp_path / "nan_model")
    model = AutoModel.from_pretrained(broken)
    with torch.no_grad():
        model.embeddings.LayerNorm.weight.fill_(float("nan"))
    model.save_pretrained(broken)
    task = _task(tmp_path, [(f"good text {i}", 1) for i in range(4)] + [(f"bad text {i}", 0) for i in range(4)])
    with pytest.raises(ValueError) as err:
        run_probing(str(broken), [task], _config(whiten=False))
    message = str(err.value)
    assert str(broken) in message and "toy" in message and "NaN or infinite" in message and "\n" not in message


def test_too_few_train_rows_of_a_class_name_the_task(tiny_hf_encoder, tmp_path):
    task = _task(tmp_path, [("good great film", 1), ("bad awful film", 0)])
    with pytest.raises(ValueError) as err:
        run_probing(str(tiny_hf_encoder), [task], _config(whiten=False))
    message = str(err.value)
    assert "toy" in message and "at least 2 train rows of every class" in message and "n_splits" not in message


def test_a_python_caller_of_run_probing_gets_the_same_checks_as_the_cli():
    from megatron_crossbert.evaluation.probing.runner import ProbeRunConfig

    with pytest.raises(ValueError, match=r"--knn -1 \(ProbeRunConfig.knn\): the k-NN probe needs K >= 1"):
        ProbeRunConfig(knn=-1)
    with pytest.raises(ValueError, match=r"--max-train \(ProbeRunConfig.max_train\): must be at least 1, got 0"):
        ProbeRunConfig(max_train=0)
