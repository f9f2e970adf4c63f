"""Checkpointing: resharded resume (TP1 -> TP2), crash safety, SIGTERM, compatibility, pruning, init_from.

The SIGTERM/SIGKILL tests run the real CLI (``python -m megatron_crossbert.cli.pretrain``) in a subprocess
so the signals hit a real training process; the resharding test spawns 2 gloo ranks.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import REPO_ROOT
from tests.support.training import tiny_config, tiny_overrides

NO_DROPOUT = dict(model__hidden_dropout=0.0, model__attention_dropout=0.0)


def _tp2_worker(rank: int, world_size: int, indexed_corpus: str, load_dir: str, save_dir: str) -> list[float]:
    from megatron_crossbert.training import train

    cfg = tiny_config("crossbert", indexed_corpus, Path(save_dir), parallel__tensor_model_parallel_size=2,
                      checkpoint__load_dir=load_dir, training__train_iters=3, **NO_DROPOUT)
    return train(cfg)["losses"]


@pytest.mark.multirank
def test_tp1_checkpoint_resumes_at_tp2(indexed_corpus, tmp_path):
    """Saved at TP=1 after 2 steps; step 3 at TP=2 (2 ranks) matches step 3 at TP=1 within 1e-5."""
    from tests.support.multirank import run_ranks

    from megatron_crossbert.training import train

    tp1 = tmp_path / "tp1"
    train(tiny_config("crossbert", indexed_corpus, tp1, training__train_iters=3, **NO_DROPOUT), exit_at_iteration=2)
    shutil.copytree(tp1, tmp_path / "tp1_at_2")
    reference = train(tiny_config("crossbert", indexed_corpus, tp1, training__train_iters=3, **NO_DROPOUT))["losses"]
    assert len(reference) == 1
    results = run_ranks(_tp2_worker, 2, indexed_corpus, str(tmp_path / "tp1_at_2"), str(tmp_path / "tp2"))
    assert results[0] == results[1] and len(results[0]) == 1
    assert abs(results[0][0] - reference[0]) < 1e-5, (results[0][0], reference[0])


def _dp2_worker(rank: int, world_size: int, indexed_corpus: str, root: str) -> tuple[list[float], list[float]]:
    from megatron_crossbert.training import train

    def cfg(name):
        return tiny_config("bert", indexed_corpus, Path(root) / name, parallel__use_distributed_optimizer=True,
                           parallel__overlap_grad_reduce=True, training__train_iters=4)

    straight = train(cfg("a"))["losses"]
    first = train(cfg("b"), exit_at_iteration=2)["losses"]
    return straight, first + train(cfg("b"))["losses"]


@pytest.mark.multirank
def test_distributed_optimizer_resume_is_exact_at_dp2(indexed_corpus, tmp_path):
    """ZeRO-1 (fully_reshardable) optimizer state, overlapped grad reduce, dropout on: resume is exact."""
    from tests.support.multirank import run_ranks

    results = run_ranks(_dp2_worker, 2, indexed_corpus, str(tmp_path))
    straight, resumed = results[0]
    assert results[0] == results[1]
    assert straight == resumed


def _cli(args: list[str], **popen) -> subprocess.Popen:
    # Drop the rendezvous variables that in-process runs of this pytest process left behind.
    env = {key: value for key, value in os.environ.items()
           if key not in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(PYTHONUNBUFFERED="1", **popen.pop("env", {}))
    return subprocess.Popen([sys.executable, "-m", "megatron_crossbert.cli.pretrain", *args], cwd=REPO_ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, **popen)


def _set_args(overrides: list[str]) -> list[str]:
    return [arg for item in overrides for arg in ("--set", item)]


def _wait_for(predicate, timeout: float, proc: subprocess.Popen, seen: list[str] = ()) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if proc.poll() is not None:
            raise AssertionError(f"process exited early ({proc.returncode}):\n{''.join(seen)}{proc.stdout.read()}")
        if time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            raise AssertionError("timed out waiting for the training process")
        time.sleep(0.2)


@pytest.mark.slow
@pytest.mark.parametrize("async_save", [False, True], ids=["sync", "async"])
def test_sigterm_saves_and_exits_zero(indexed_corpus, tmp_path, async_save):
    from megatron_crossbert.checkpoint.directories import latest_iteration
    from tests.support.training import read_run_config

    save = tmp_path / "ckpt"
    args = _set_args(tiny_overrides("crossbert", indexed_corpus, save, training__train_iters=5000,
                                    training__log_interval=1, training__lr_warmup_iters=10,
                                    checkpoint__async_save=async_save))
    proc = _cli(args)
    lines: list[str] = []

    def reached_step_3() -> bool:
        line = proc.stdout.readline()
        lines.append(line)
        return line.startswith("step 3/")

    _wait_for(reached_step_3, 240, proc, lines)
    os.kill(proc.pid, signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, "".join(lines) + out
    stopped = latest_iteration(save)
    assert stopped is not None and 3 <= stopped < 5000
    summary = json.loads(out.split("summary ", 1)[1].splitlines()[0])
    assert summary["stopped_by_signal"] is True and summary["iteration"] == stopped
    assert read_run_config(save).training.train_iters == 5000


@pytest.mark.slow
@pytest.mark.parametrize("async_save", [False, True], ids=["sync", "async"])
def test_sigkill_during_save_keeps_previous_checkpoint(indexed_corpus, tmp_path, async_save):
    """With async_save the kill lands after the writers finished, before the commit."""
    from megatron_crossbert.checkpoint.directories import latest_iteration, resolve_checkpoint_dir
    from megatron_crossbert.training import train

    save = tmp_path / "ckpt"
    mode = dict(checkpoint__save_interval=2, checkpoint__async_save=async_save)
    overrides = tiny_overrides("crossbert", indexed_corpus, save, training__train_iters=4, **mode)
    proc = _cli(_set_args(overrides), env={"CROSSBERT_TEST_SLEEP_IN_SAVE": "4:120"})
    partial = save / "iter_0000004"
    _wait_for(lambda: (partial / "metadata.json").is_file() and latest_iteration(save) == 2, 240, proc)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    assert latest_iteration(save) == 2 and resolve_checkpoint_dir(save).name == "iter_0000002"
    assert not (partial / "run_config.json").exists()
    resumed = train(tiny_config("crossbert", indexed_corpus, save, training__train_iters=4, **mode))
    assert resumed["start_iteration"] == 2 and resumed["iteration"] == 4
    assert latest_iteration(save) == 4 and (partial / "run_config.json").is_file()


@pytest.mark.slow
def test_incompatible_checkpoint_is_rejected_and_old_ones_pruned(indexed_corpus, tmp_path):
    from megatron_crossbert.checkpoint.errors import CheckpointError
    from megatron_crossbert.training import train

    save = tmp_path / "ckpt"
    train(tiny_config("bert", indexed_corpus, save, training__train_iters=4, checkpoint__save_interval=1))
    assert sorted(p.name for p in save.glob("iter_*")) == ["iter_0000003", "iter_0000004"]  # keep_last=2
    with pytest.raises(CheckpointError, match=r"model\.hidden_size: checkpoint 32 vs run 64"):
        train(tiny_config("bert", indexed_corpus, save, training__train_iters=8, model__hidden_size=64))
    with pytest.raises(CheckpointError, match=r"model\.ffn_hidden_size: checkpoint 128 vs run 96"):  # the key, not .ffn
        train(tiny_config("bert", indexed_corpus, save, training__train_iters=8, model__ffn_hidden_size=96))
    with pytest.raises(CheckpointError, match=r"model\.arch: checkpoint 'bert' vs run 'crossbert'"):
        train(tiny_config("crossbert", indexed_corpus, save, training__train_iters=8))
    with pytest.raises(CheckpointError, match=r"data\.seq_length: checkpoint 32 vs run 16"):
        train(tiny_config("bert", indexed_corpus, save, training__train_iters=8, data__seq_length=16))


def test_init_from_loads_weights_only(indexed_corpus, tmp_path):
    from megatron_crossbert.checkpoint.errors import CheckpointError
    from megatron_crossbert.training import train

    source = tmp_path / "source"
    train(tiny_config("crossbert", indexed_corpus, source, training__train_iters=3, training__lr=0.01, **NO_DROPOUT))
    one_step = dict(training__train_iters=1, training__lr_warmup_iters=0, **NO_DROPOUT)
    fresh = train(tiny_config("crossbert", indexed_corpus, None, **one_step))
    warm = train(tiny_config("crossbert", indexed_corpus, tmp_path / "warm", checkpoint__init_from=str(source),
                             **one_step))
    assert warm["start_iteration"] == 0 and warm["resumed_from"] is None
    assert warm["losses"][0] < fresh["losses"][0]
    with pytest.raises(CheckpointError, match="hidden_size"):
        train(tiny_config("crossbert", indexed_corpus, None, checkpoint__init_from=str(source), model__hidden_size=64))


def test_distributed_optimizer_checkpoint_refuses_other_tp_pp(tmp_path):
    """Older dp_reshardable optimizer state (no format record) reshards across DP only: a TP/PP change is a clear error."""
    from megatron_crossbert.checkpoint.errors import CheckpointError
    from megatron_crossbert.checkpoint.verify import verify_checkpoint

    saved = tiny_config("bert", "unused", parallel__use_distributed_optimizer=True)
    saved.save_json(tmp_path / "run_config.json")  # no shards, no checksums.json: a layout check only
    current = dict(parallel__use_distributed_optimizer=True, checkpoint__verify="off")
    verify_checkpoint(tmp_path, tiny_config("bert", "unused", **current))
    with pytest.raises(CheckpointError, match="can only be resumed at that TP/PP"):
        verify_checkpoint(tmp_path, tiny_config("bert", "unused", **current, parallel__tensor_model_parallel_size=2))
    verify_checkpoint(tmp_path, tiny_config("bert", "unused", **current, parallel__tensor_model_parallel_size=2),
                      weights_only=True)
