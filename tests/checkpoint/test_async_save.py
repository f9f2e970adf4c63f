"""Async checkpoint saves (``checkpoint.async_save``) on 2 gloo ranks, in one spawn.

Checks: the save is committed ('latest', run_config.json) only by ``RunSaves.finalize``, after
every rank's writer finished; a run saving asynchronously at every step and then resumed is
bit-identical to an uninterrupted synchronous run (distributed optimizer, dropout on); and the
async checkpoint holds exactly what a synchronous save of the same state holds.

In the same spawn: the async checkpoint's checksums.json covers both ranks' shards; a
flipped byte in the file rank 1 verifies is raised on both ranks as the same line; a commit that
fails on rank 0 (a full disk while writing run_config.json), or a free-space check that fails there,
ends both ranks with the same one-line error instead of leaving rank 1 waiting in a barrier.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from tests.support.training import tiny_config


def _cfg(indexed_corpus: str, save_dir: Path | None, async_save: bool, save_interval: int = 1, **extra):
    return tiny_config("bert", indexed_corpus, save_dir, parallel__use_distributed_optimizer=True,
                       training__train_iters=4, checkpoint__save_interval=save_interval,
                       checkpoint__async_save=async_save, **extra)


def _commit_waits_for_finalize(indexed_corpus: str, root: Path) -> dict:
    """Save the same state async and sync; the async one is committed only by finalize."""
    from megatron.core.dist_checkpointing import load_plain_tensors
    from megatron.core.dist_checkpointing.dict_utils import diff

    from megatron_crossbert.checkpoint.directories import latest_iteration
    from megatron_crossbert.checkpoint.save import save_checkpoint
    from megatron_crossbert.training.setup import build_session

    # no --save (a start refuses periodic or background saves without one): the saves below name their roots
    session = build_session(_cfg(indexed_corpus, None, False, save_interval=0,
                                 checkpoint__load_dir=str(root / "straight")))
    session.run_cfg.checkpoint.async_save = True
    args = (session.model, session.optimizer, session.scheduler, session.progress)
    path = save_checkpoint(session.checkpoints.saves, root / "async_copy", *args, session.run_cfg)
    before = {"pending": session.checkpoints.saves.in_flight.pending(), "latest": latest_iteration(root / "async_copy"),
              "run_config": (path / "run_config.json").exists()}
    session.checkpoints.saves.finalize(blocking=True)
    after = {"pending": session.checkpoints.saves.in_flight.pending(), "latest": latest_iteration(root / "async_copy"),
             "run_config": (path / "run_config.json").exists()}
    session.run_cfg.checkpoint.async_save = False
    sync = save_checkpoint(session.checkpoints.saves, root / "sync_copy", *args, session.run_cfg)
    only_async, only_sync, unequal = diff(load_plain_tensors(str(path)), load_plain_tensors(str(sync)))
    return {"before": before, "after": after, "differences": [only_async, only_sync, unequal],
            "rank0_full": _fails_on_rank_zero_only(session, root)}


def _flipped_in_rank_one_share(root: Path) -> dict:
    """Rank 0 flips a byte in the largest file rank 1 verifies; both verify collectively."""
    import torch.distributed as dist

    from megatron_crossbert.checkpoint.checksums import files_for_rank, read_record
    from megatron_crossbert.checkpoint.verify import open_checkpoint, verify_contents
    from tests.support.checkpoints import flip_byte

    source, copy = root / "async" / "iter_0000004", root / "flipped" / "iter_0000004"
    sizes = {name: entry["bytes"] for name, entry in read_record(source).items()}
    victim = files_for_rank(sizes, 1, 2)[0]
    if dist.get_rank() == 0:
        shutil.copytree(source, copy)
        flip_byte(copy / victim)
    dist.barrier()
    opened = replace(open_checkpoint(copy, verify="off"), contents="pending")
    try:
        verify_contents(opened, "full", collective=True)
    except Exception as err:  # noqa: BLE001 - the test compares what each rank raised
        return {"victim": str(copy / victim), "error": f"{type(err).__name__}: {err}"}
    return {"victim": str(copy / victim), "error": None}


def _fails_on_rank_zero_only(session, root: Path) -> dict:
    """A full disk seen by rank 0 alone, in the commit and in the free-space check: same error on both ranks."""
    import errno
    from unittest import mock

    import torch.distributed as dist

    from megatron_crossbert.checkpoint import save, save_errors

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(args[0]))

    args = (session.model, session.optimizer, session.scheduler, session.progress, session.run_cfg)
    session.run_cfg.checkpoint.async_save = False
    if dist.get_rank() == 0:  # a complete checkpoint there sets how much room the next save needs
        shutil.copytree(root / "async" / "iter_0000004", root / "full_preflight" / "iter_0000003")
    dist.barrier()
    out = {}
    for name, patch in (("commit", mock.patch.object(save, "atomic_write_text", full)),
                        ("preflight", mock.patch.object(save_errors, "free_bytes", lambda path: 0))):
        try:
            with patch if dist.get_rank() == 0 else contextlib.nullcontext():
                save.save_checkpoint(session.checkpoints.saves, root / f"full_{name}", *args)
            out[name] = None
        except Exception as err:  # noqa: BLE001
            out[name] = f"{type(err).__name__}: {err}"
    return out


def _worker(rank: int, world_size: int, indexed_corpus: str, root: str) -> dict:
    from megatron_crossbert.training import train

    root = Path(root)
    straight = train(_cfg(indexed_corpus, root / "straight", False, save_interval=0))["losses"]
    first = train(_cfg(indexed_corpus, root / "async", True), exit_at_iteration=2)["losses"]
    resumed = train(_cfg(indexed_corpus, root / "async", True))
    committed = _commit_waits_for_finalize(indexed_corpus, root)
    return {"straight": straight, "async": first + resumed["losses"], "start": resumed["start_iteration"],
            **committed, "flipped": _flipped_in_rank_one_share(root), "rank0_full": committed.pop("rank0_full")}


@pytest.mark.multirank
def test_async_save_commits_after_all_ranks_and_resumes_exactly(indexed_corpus, tmp_path):
    from tests.support.multirank import run_ranks

    from megatron_crossbert.checkpoint.directories import latest_iteration

    results = run_ranks(_worker, 2, indexed_corpus, str(tmp_path))
    first = results[0]
    assert first["straight"] == first["async"] and first["start"] == 2, first
    assert latest_iteration(tmp_path / "async") == 4
    assert first["before"] == {"pending": 1, "latest": None, "run_config": False}, first["before"]
    assert first["after"] == {"pending": 0, "latest": 4, "run_config": True}, first["after"]
    assert first["differences"] == [[], [], []]
    assert results[1]["async"] == first["async"]
    directory = tmp_path / "async" / "iter_0000004"
    recorded = json.loads((directory / "checksums.json").read_text())["files"]
    assert set(recorded) == {p.name for p in directory.iterdir()} - {"checksums.json"}
    assert {"__0_0.distcp", ".metadata", "metadata.json", "run_config.json"} <= set(recorded)
    flipped = [r["flipped"] for r in results]
    assert flipped[0] == flipped[1] and flipped[0]["error"].startswith(
        f"ChecksumMismatchError: {flipped[0]['victim']}: content changed since it was saved"), flipped
    commit, preflight = (results[0]["rank0_full"][key] for key in ("commit", "preflight"))
    assert results[1]["rank0_full"] == results[0]["rank0_full"]
    assert commit == (f"DiskFullError: {tmp_path / 'full_commit'}: no space left on device while saving "
                      f"iter_0000004; there is no complete checkpoint yet")
    assert preflight.startswith(f"DiskFullError: {tmp_path / 'full_preflight'}: no space left on device for saving "
                                f"iter_0000004: 0.0 MiB free, a checkpoint takes "), preflight
    assert preflight.endswith(" MiB; the last complete checkpoint is iter_0000003")

