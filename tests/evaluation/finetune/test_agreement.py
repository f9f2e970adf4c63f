"""crossbert-finetune agrees to the last bit with a plain ``transformers`` script written without the project
(``reference_plain_transformers.py``: same model, seed and Cramming hyper-parameters), and with
``transformers.Trainer`` (``reference_trainer.py``), on the CPU: identical dev logits (sha256), predictions and
metrics. The data is the generated GLUE fixture, so the check runs from a clean clone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from megatron_crossbert.cli.finetune import main
from tests.support.synthetic_eval import write_glue_fixture

HERE = Path(__file__).resolve().parent
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


@pytest.fixture(scope="module")
def glue(tmp_path_factory):
    return write_glue_fixture(tmp_path_factory.mktemp("glue"), n=40)


def _reference(script: str, model: Path, glue: Path, task: str, out: Path, *extra: str) -> dict:
    threads = str(torch.get_num_threads())
    subprocess.run([sys.executable, str(HERE / script), str(model), str(glue), task, str(out), *extra,
                    "--threads", threads], check=True, env={**os.environ, **OFFLINE})
    return json.loads(out.read_text())


def _tool(model: Path, glue: Path, task: str, out: Path, *extra: str) -> dict:
    argv = ["--model", str(model), "--glue-dir", str(glue), "--tasks", task, "--out", str(out), "--no-progress",
            "--cache-dir", "none", "--threads", str(torch.get_num_threads()), "--device", "cpu", *extra]
    assert main(argv) == 0
    return json.loads(next((out / "runs" / task).rglob("seed=0.json")).read_text())["result"]


@pytest.mark.slow
@pytest.mark.parametrize("task", ["RTE", "MRPC", "STS-B", "CoLA"])
def test_agrees_bit_for_bit_with_plain_transformers(task, minilm_dir, glue, tmp_path):
    """all-MiniLM-L6-v2, 32 train rows, 1 epoch (2 steps), Cramming's preset otherwise."""
    ref = _reference("reference_plain_transformers.py", minilm_dir, glue, task, tmp_path / "ref.json",
                     "--max-train", "32", "--epochs", "1")
    run = _tool(minilm_dir, glue, task, tmp_path / "ft", "--max-train", "32", "--epochs", "1")
    assert run["threads"] == ref["threads"] and run["n_train"] == 32
    assert run["logits_sha256"] == ref["logits_sha256"]  # bit-identical dev logits
    assert run["predictions"] == ref["predictions"]
    assert run["metrics"] == ref["metrics"]  # so the scores agree to the last digit


@pytest.mark.slow
@pytest.mark.parametrize("task", ["RTE", "STS-B"])
def test_agrees_bit_for_bit_with_transformers_trainer(task, tiny_hf_encoder, glue, tmp_path):
    """The tiny BERT, 2 epochs (the Trainer's per-epoch sampler seeding matters from the second epoch on)."""
    pytest.importorskip("accelerate", reason="transformers.Trainer needs accelerate (the eval extra)")
    ref = _reference("reference_trainer.py", tiny_hf_encoder, glue, task, tmp_path / "ref.json", "--max-train", "36",
                     "--epochs", "2")
    run = _tool(tiny_hf_encoder, glue, task, tmp_path / "ft", "--max-train", "36", "--epochs", "2")
    assert run["logits_sha256"] == ref["logits_sha256"] and run["predictions"] == ref["predictions"]
