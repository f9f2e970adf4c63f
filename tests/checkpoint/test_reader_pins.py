"""Readers pin the checkpoint they read; pruning keeps a pinned one until a later save (``checkpoint/pins.py``).

Without pins a run's pruning removed the checkpoint an export of the same save directory was reading,
and every such export failed, calling the checkpoint "incomplete". These tests use fake roots (a complete
checkpoint is a directory with ``run_config.json``; a pinnable one also has ``.readers.lock``) and real
``flock`` locks: a pin is a shared lock of its own open file, so a second descriptor in this process meets
it as another process would. The end-to-end case (exports of a live run's save directory) shares its
trainer with the stop-signal test in ``tests/training/test_stop_signals.py``.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from megatron_crossbert.checkpoint import save
from megatron_crossbert.checkpoint.directories import resolve_checkpoint_dir
from megatron_crossbert.checkpoint.errors import CheckpointError
from megatron_crossbert.checkpoint.pins import PIN_FILE, ReaderPin, pin_resolved, remove_stale_removals
from megatron_crossbert.checkpoint.save import prune_checkpoints
from tests.support import REPO_ROOT
from tests.support.training import tiny_config


def _root(tmp_path: Path, iterations=(1, 2, 3), pinnable: bool = True) -> Path:
    root = tmp_path / "ckpt"
    cfg = tiny_config("crossbert", "unused")
    for it in iterations:
        directory = root / f"iter_{it:07d}"
        directory.mkdir(parents=True)
        cfg.save_json(directory / "run_config.json")
        if pinnable:
            (directory / PIN_FILE).touch()
    (root / "latest").write_text(f"iter_{iterations[-1]:07d}")
    return root


def test_a_pinned_checkpoint_is_kept_past_keep_last_and_pruned_once_released(tmp_path, caplog):
    root = _root(tmp_path)
    pin = ReaderPin.take(root / "iter_0000001")
    with caplog.at_level(logging.WARNING, logger=save.__name__):
        assert [p.name for p in prune_checkpoints(root, keep_last=1)] == ["iter_0000002"]
    assert (root / "iter_0000001" / "run_config.json").is_file()
    assert (f"keeping {root / 'iter_0000001'} past checkpoint.keep_last=1: a reader (an export, an evaluation, "
            f"another run's start) is reading it; a later save prunes it") in caplog.text
    pin.release()
    assert [p.name for p in prune_checkpoints(root, keep_last=1)] == ["iter_0000001"]
    assert sorted(p.name for p in root.iterdir()) == ["iter_0000003", "latest"]  # nothing half-deleted left


def test_checkpoints_saved_before_pins_are_read_and_pruned_as_before(tmp_path):
    root = _root(tmp_path, pinnable=False)
    assert ReaderPin.take(root / "iter_0000001") is None  # readers never create the file
    assert not (root / "iter_0000001" / PIN_FILE).exists()
    assert [p.name for p in prune_checkpoints(root, keep_last=1)] == ["iter_0000001", "iter_0000002"]


def test_a_root_reference_pruned_before_the_pin_resolves_again(tmp_path):
    root = _root(tmp_path)
    calls = []

    def pruned_in_between(reference: Path) -> Path:
        target = resolve_checkpoint_dir(reference)
        if not calls:  # the run prunes it (and saves iter_0000004) between the resolution and the pin
            shutil.copytree(root / "iter_0000003", root / "iter_0000004")
            (root / "latest").write_text("iter_0000004")
            shutil.rmtree(target)
        calls.append(target.name)
        return target

    directory, pin = pin_resolved(root, pruned_in_between)
    assert calls == ["iter_0000003", "iter_0000004"] and directory == root / "iter_0000004"
    assert isinstance(pin, ReaderPin)
    pin.release()


def test_an_explicit_reference_that_was_pruned_says_why(tmp_path):
    root = _root(tmp_path)

    def pruned(reference: Path) -> Path:
        shutil.rmtree(reference)
        return reference

    with pytest.raises(CheckpointError) as gone:
        pin_resolved(root / "iter_0000002", pruned)
    why = (f"a training run writing into {root} prunes checkpoints older than its checkpoint.keep_last newest; "
           f"its 'latest' names iter_0000003")
    assert str(gone.value) == (f"{root / 'iter_0000002'}: was removed while this command read it ({why}): run the "
                               f"command again, or copy the checkpoint before reading it")
    with pytest.raises(CheckpointError) as missing:  # gone before the command started
        resolve_checkpoint_dir(root / "iter_0000002")
    assert str(missing.value) == f"checkpoint path {root / 'iter_0000002'} does not exist; {why}"


def test_what_a_killed_pruner_left_is_removed_at_the_next_start(tmp_path):
    """The pruner renames a checkpoint to ``fsutil.temp_sibling``'s name before deleting it."""
    root = _root(tmp_path)
    done = subprocess.run([sys.executable, "-c", f"from megatron_crossbert.fsutil import temp_sibling; "
                                                 f"print(temp_sibling({str(root / 'iter_0000001')!r}))"],
                          capture_output=True, text=True, check=True, env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)))
    mine = Path(done.stdout.strip())  # as a pruner that has since exited named it
    other = root / "iter_0000002.tmp-elsewhere-123-456"
    for leftover in (mine, other):
        leftover.mkdir()
        (leftover / "__0_0.distcp").write_bytes(b"half-deleted")
    assert remove_stale_removals(root) == [mine]
    assert not mine.exists() and other.is_dir()  # another host's pruner may still be at work


def test_every_save_creates_the_pin_file_and_records_it(tiny_checkpoint):
    directory = tiny_checkpoint / "iter_0000002"
    assert (directory / PIN_FILE).is_file() and (directory / PIN_FILE).stat().st_size == 0
    assert PIN_FILE in json.loads((directory / "checksums.json").read_text())["files"]


def test_a_save_gives_megatron_an_empty_directory_so_it_warns_of_no_corrupted_checkpoint(tmp_path, indexed_corpus,
                                                                                         caplog):
    """The pin file is made at the commit: before, every save made megatron log "Overwriting old incomplete /
    corrupted checkpoint..." (it warns when the directory it writes into is not empty)."""
    from megatron_crossbert.platform import distributed as platform
    from megatron_crossbert.training import train

    with caplog.at_level(logging.WARNING):
        train(tiny_config("crossbert", indexed_corpus, tmp_path / "ckpt", training__train_iters=2,
                          checkpoint__save_interval=1))
    platform.destroy()
    assert "corrupted checkpoint" not in caplog.text
    assert all((tmp_path / "ckpt" / f"iter_000000{it}" / PIN_FILE).is_file() for it in (1, 2))
