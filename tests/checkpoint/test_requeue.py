"""A run killed after a checkpoint is complete but before 'latest' moves: the same command, rerun, resumes it.

Without the commit journal such a kill (SIGKILL, a node failure) left a complete checkpoint newer than 'latest', and
every rerun of the same command was refused as if another run had written it, until someone passed
``--resume-from``; a ``.latest.tmp-*`` file stayed for good. The commit journal ``latest.pending``
(``checkpoint/directories.py``) tells such a checkpoint apart from a deliberate roll-back of 'latest',
which stays refused. Fake roots check the rules; one interpreter (``tests/support/cli_cases.py``) runs
the real kills and reruns.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from megatron_crossbert.checkpoint.directories import PENDING_FILE, begin_commit, resolve_latest
from megatron_crossbert.checkpoint.errors import CheckpointError
from megatron_crossbert.checkpoint.start_guard import apply_start, choose_start
from tests.support import REPO_ROOT
from tests.support.cli_cases import cases_argv, cases_env
from tests.support.training import tiny_config, tiny_overrides

ITER2, ITER4 = "iter_0000002", "iter_0000004"


def _killed_before_latest(tmp_path: Path) -> Path:
    """iter_2 and iter_4 complete, 'latest' = iter_2, and iter_4's commit journal: a kill between
    run_config.json and 'latest', as ``save._seal`` orders them."""
    root = tmp_path / "ckpt"
    cfg = tiny_config("crossbert", "unused", root)
    (root / ITER2).mkdir(parents=True)
    cfg.save_json(root / ITER2 / "run_config.json")
    (root / "latest").write_text(ITER2)
    (root / ITER4).mkdir()
    begin_commit(root / ITER4, cfg.to_json())
    cfg.save_json(root / ITER4 / "run_config.json")
    return root


def _start(root: Path, **extra):
    """The choice of a rerun of the same command (checksums off: fake checkpoints have none)."""
    return choose_start(tiny_config("crossbert", "unused", root, checkpoint__verify="off", **extra))


def _dead_writers_temporary(root: Path) -> Path:
    """``atomic_open``'s temporary of 'latest', as a process that has since exited made it."""
    done = subprocess.run([sys.executable, "-c", "from megatron_crossbert.fsutil import temp_sibling; "
                                                 f"print(temp_sibling({str(root / '.latest')!r}))"],
                          capture_output=True, text=True, check=True, env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)))
    path = Path(done.stdout.strip() + "-k3y9x2ab")
    path.write_text(ITER4)
    return path


def test_a_commit_killed_before_latest_is_resumed_and_finished(tmp_path, caplog):
    root = _killed_before_latest(tmp_path)
    stale = _dead_writers_temporary(root)
    assert resolve_latest(root) == root / ITER4  # readers too: the commit lacked only the pointer
    choice = _start(root)
    assert choice.source.directory == root / ITER4 and choice.move_aside == ()
    assert (choice.finish_commit.checkpoint, choice.finish_commit.after) == (ITER4, ITER2)
    with caplog.at_level(logging.WARNING):
        apply_start(choice, str(root))
    assert (root / "latest").read_text() == ITER4 and not (root / PENDING_FILE).exists() and not stale.exists()
    assert (f"{root / ITER4} was complete but 'latest' still named {ITER2}: the run that wrote it (pid {os.getpid()} "
            f"on ") in caplog.text
    assert f"removed 1 temporary file(s) left by a killed run: {stale}" in caplog.text


def test_a_journal_that_does_not_describe_the_checkpoint_changes_nothing(tmp_path):
    """Its checkpoint incomplete: 'latest' stays the start. 'latest' moved by hand since, or another
    run_config.json in the checkpoint: today's refusal, with its two ways out."""
    root = _killed_before_latest(tmp_path)
    config = root / ITER4 / "run_config.json"
    saved = config.read_text()
    config.unlink()
    assert resolve_latest(root) == root / ITER2 and _start(root).finish_commit is None
    config.write_text(saved.replace('"lr": 0.001', '"lr": 0.002'))
    with pytest.raises(CheckpointError, match=f"holds complete checkpoints this run would overwrite or prune "
                                              f"\\({ITER4}\\) while resuming .*--resume-from {ITER4}"):
        _start(root)
    config.write_text(saved)
    journal = json.loads((root / PENDING_FILE).read_text())
    (root / PENDING_FILE).write_text(json.dumps(dict(journal, after="iter_0000001")))  # 'latest' moved since
    with pytest.raises(CheckpointError, match=f"--resume-from {ITER4}"):
        _start(root)
    (root / PENDING_FILE).unlink()  # a clean commit leaves no journal: a roll-back of 'latest' stays refused
    with pytest.raises(CheckpointError, match=f"--resume-from {ITER4}"):
        _start(root)


def _pretrain(save: Path, corpus: str, *extra: str, env: dict | None = None) -> dict:
    overrides = tiny_overrides("crossbert", corpus, save, training__train_iters=4, checkpoint__save_interval=2,
                               checkpoint__async_save=save.name == "async")
    return {"module": "megatron_crossbert.cli.pretrain", "argv": [a for o in overrides for a in ("--set", o)]
            + list(extra), "env": env or {}}


@pytest.mark.e2e
def test_the_same_command_rerun_after_a_kill_before_latest_resumes(indexed_corpus, tmp_path):
    """sync and async: SIGKILL once iter_4's (the last) run_config.json is written, before 'latest' moves;
    for sync a failed attempt in between (refused at its start, as a requeue on a changed config would be)."""
    kill = {"CROSSBERT_TEST_KILL_BEFORE_LATEST": "4"}
    sync, asynchronous = tmp_path / "sync", tmp_path / "async"
    cases = [_pretrain(sync, indexed_corpus, env=kill), _pretrain(asynchronous, indexed_corpus, env=kill),
             _pretrain(sync, indexed_corpus, "--set", "model.hidden_size=64"),
             _pretrain(sync, indexed_corpus), _pretrain(asynchronous, indexed_corpus)]
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    subprocess.run(cases_argv(tmp_path / "cases.json", tmp_path / "results.json"), check=True, cwd=tmp_path,
                   env=cases_env(), timeout=900)
    killed_sync, killed_async, failed, *reruns = json.loads((tmp_path / "results.json").read_text())
    assert killed_sync["rc"] == killed_async["rc"] == -9, (killed_sync["stderr"][-2000:],
                                                           killed_async["stderr"][-2000:])
    assert failed["rc"] == 2 and "model.hidden_size: checkpoint 32 vs run 64" in failed["stderr"]
    for save, rerun in zip((sync, asynchronous), reruns):
        assert rerun["rc"] == 0, rerun["stderr"][-3000:]
        assert f"resumed from {save / ITER4} at step 4, 16 samples consumed" in rerun["stdout"]
        assert f"{save / ITER4} was complete but 'latest' still named {ITER2}: the run that wrote it" in rerun["stderr"]
        assert (save / "latest").read_text() == ITER4
        assert not (save / PENDING_FILE).exists() and not list(save.glob(".latest*"))
