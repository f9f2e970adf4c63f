"""examples/multi_node.sh as users launch it on a cluster, here as two nodes on one machine.

Two torchrun agents (``--nnodes 2``, one process each, NODE_RANK 0 and 1) meet through a c10d
rendezvous on 127.0.0.1 at a free port and train examples/tiny_cpu.yaml on gloo for a few steps
with checkpoints; a second launch of both agents resumes from the shared save directory and
finishes the longer run. The tokenizer and dataset are made here with the project's own
library (tokenizer training and preprocessing), so the launch path is the one users run.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import REPO_ROOT

SCRIPT = REPO_ROOT / "examples" / "multi_node.sh"
_RENDEZVOUS_VARS = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK")
WORDS = "nodes meet at the store then every rank trains the tiny encoder and saves its shard".split()


def _data(root: Path) -> tuple[str, str]:
    """A 1024-token WordPiece tokenizer and the indexed dataset of a small generated corpus."""
    from megatron_crossbert.data.preprocessing.preprocess import PreprocessOptions, preprocess
    from megatron_crossbert.data.tokenizers.training import train_tokenizer

    rng = random.Random(0)
    corpus = root / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"text": " ".join(rng.choice(WORDS) for _ in range(120))}) + "\n"
                              for _ in range(150)))
    train_tokenizer([str(corpus)], root / "tokenizer", model_type="wordpiece", vocab_size=1024)
    preprocess(PreprocessOptions(inputs=[str(corpus)], output_prefix=str(root / "corpus"),
                                 tokenizer=str(root / "tokenizer"), append_eod=True, progress=False))
    return str(root / "corpus_text_document"), str(root / "tokenizer")


def _launch_two_nodes(data: str, tokenizer: str, save: Path, port: int, *extra: str) -> list[str]:
    """Both agents of a 2-node job at once; returns each node's output (fails the test on a bad exit)."""
    base = {k: v for k, v in os.environ.items() if k not in _RENDEZVOUS_VARS}
    base.update(NNODES="2", GPUS_PER_NODE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                RDZV_ID=f"test-{port}", CONFIG=str(REPO_ROOT / "examples" / "tiny_cpu.yaml"), OMP_NUM_THREADS="1",
                TORCHRUN=str(Path(sys.executable).parent / "torchrun"),
                PYTHONPATH=str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    args = [data, tokenizer, str(save), "--train-iters", "6", "--set", "checkpoint.save_interval=2",
            "--set", "training.eval_interval=0", "--set", "training.log_interval=1", *extra]
    procs = [subprocess.Popen(["bash", str(SCRIPT), *args], env={**base, "NODE_RANK": str(rank)}, cwd=REPO_ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for rank in (0, 1)]
    outputs = [proc.communicate(timeout=600)[0] for proc in procs]
    for rank, (proc, out) in enumerate(zip(procs, outputs)):
        assert proc.returncode == 0, f"node {rank} exited {proc.returncode}:\n{out[-4000:]}"
    return outputs


def test_multi_node_script_prints_usage_without_its_environment():
    done = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True,
                          env={k: v for k, v in os.environ.items() if k not in ("NNODES", "NODE_RANK", "MASTER_ADDR")})
    assert done.returncode == 2 and "Usage" in done.stdout


@pytest.mark.e2e
def test_two_torchrun_agents_train_checkpoint_and_resume(tmp_path, free_port):
    from megatron_crossbert.checkpoint.directories import latest_iteration
    from tests.support.training import read_run_config

    data, tokenizer = _data(tmp_path)
    save = tmp_path / "ckpt"
    first = "\n".join(_launch_two_nodes(data, tokenizer, save, free_port, "--exit-at-iteration", "4"))
    assert "step 4/6" in first and latest_iteration(save) == 4
    saved = read_run_config(save)
    assert saved.data.tokenizer == tokenizer and saved.training.train_iters == 6
    second = "\n".join(_launch_two_nodes(data, tokenizer, save, free_port))
    assert "resumed from" in second and "at step 4" in second and "step 6/6" in second
    assert latest_iteration(save) == 6
