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


RUN_EACH = """import json, runpy, sys
for argv in json.loads(sys.argv[1]):
    sys.argv = argv
    runpy.run_path(argv[0], run_name="__main__")
"""
"""Runs a reference script once per argv in one interpreter: each run is the script's own ``__main__`` (it seeds
everything it draws from), and the interpreter's imports are paid once per script, not once per task."""


def _references(script: str, model: Path, glue: Path, tasks: list[str], out: Path, *extra: str) -> dict[str, dict]:
    """The reference script's result for each task, from one process."""
    threads = str(torch.get_num_threads())
    runs = [[str(HERE / script), str(model), str(glue), task, str(out / f"{task}.json"), *extra, "--threads", threads]
            for task in tasks]
    subprocess.run([sys.executable, "-c", RUN_EACH, json.dumps(runs)], check=True, env={**os.environ, **OFFLINE})
    return {task: json.loads((out / f"{task}.json").read_text()) for task in tasks}


PLAIN_TASKS = ["RTE", "MRPC", "STS-B", "CoLA"]
TRAINER_TASKS = ["RTE", "STS-B"]


@pytest.fixture(scope="module")
def plain_references(minilm_dir, glue, tmp_path_factory) -> dict[str, dict]:
    """The plain ``transformers`` script on all-MiniLM-L6-v2, 32 train rows, 1 epoch (2 steps)."""
    return _references("reference_plain_transformers.py", minilm_dir, glue, PLAIN_TASKS,
                       tmp_path_factory.mktemp("plain_ref"), "--max-train", "32", "--epochs", "1")


@pytest.fixture(scope="module")
def trainer_references(tiny_hf_encoder, glue, tmp_path_factory) -> dict[str, dict]:
    """``transformers.Trainer`` on the tiny BERT, 36 train rows, 2 epochs."""
    pytest.importorskip("accelerate", reason="transformers.Trainer needs accelerate (the eval extra)")
    return _references("reference_trainer.py", tiny_hf_encoder, glue, TRAINER_TASKS,
                       tmp_path_factory.mktemp("trainer_ref"), "--max-train", "36", "--epochs", "2")


def _tool(model: Path, glue: Path, task: str, out: Path, *extra: str) -> dict:
    argv = ["--model", str(model), "--glue-dir", str(glue), "--tasks", task, "--out", str(out), "--no-progress",
            "--cache-dir", "none", "--threads", str(torch.get_num_threads()), "--device", "cpu", *extra]
    assert main(argv) == 0
    return json.loads(next((out / "runs" / task).rglob("seed=0.json")).read_text())["result"]


@pytest.mark.slow
@pytest.mark.parametrize("task", PLAIN_TASKS)
def test_agrees_bit_for_bit_with_plain_transformers(task, minilm_dir, glue, plain_references, tmp_path):
    """all-MiniLM-L6-v2, 32 train rows, 1 epoch (2 steps), Cramming's preset otherwise."""
    ref = plain_references[task]
    run = _tool(minilm_dir, glue, task, tmp_path / "ft", "--max-train", "32", "--epochs", "1")
    assert run["threads"] == ref["threads"] and run["n_train"] == 32
    assert run["logits_sha256"] == ref["logits_sha256"]  # bit-identical dev logits
    assert run["predictions"] == ref["predictions"]
    assert run["metrics"] == ref["metrics"]  # so the scores agree to the last digit


@pytest.mark.slow
@pytest.mark.parametrize("task", TRAINER_TASKS)
def test_agrees_bit_for_bit_with_transformers_trainer(task, tiny_hf_encoder, glue, trainer_references, tmp_path):
    """The tiny BERT, 2 epochs (the Trainer's per-epoch sampler seeding matters from the second epoch on)."""
    ref = trainer_references[task]
    run = _tool(tiny_hf_encoder, glue, task, tmp_path / "ft", "--max-train", "36", "--epochs", "2")
    assert run["logits_sha256"] == ref["logits_sha256"] and run["predictions"] == ref["predictions"]
