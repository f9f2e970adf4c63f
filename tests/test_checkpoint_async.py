"""Async checkpoint saves (``checkpoint.async_save``) on 2 gloo ranks, in one spawn.

Checks: the save is committed ('latest', run_config.json) only by ``RunSaves.finalize``, after
every rank's writer finished; a run saving asynchronously at every step and then resumed is
bit-identical to an uninterrupted synchronous run (distributed optimizer, dropout on); and the
async checkpoint holds exactly what a synchronous save of the same state holds.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from test_train_support import tiny_config


def _cfg(indexed_corpus: str, save_dir: Path | None, async_save: bool, save_interval: int = 1, **extra):
    return tiny_config("bert", indexed_corpus, save_dir, parallel__use_distributed_optimizer=True,
                       training__train_iters=4, checkpoint__save_interval=save_interval,
                       checkpoint__async_save=async_save, **extra)


def _commit_waits_for_finalize(indexed_corpus: str, root: Path) -> dict:
    """Save the same state async and sync; the async one is committed only by finalize."""
    from megatron.core.dist_checkpointing import load_plain_tensors
    from megatron.core.dist_checkpointing.dict_utils import diff

    from megatron_crossbert.checkpoint.layout import latest_iteration
    from megatron_crossbert.checkpoint.save import save_checkpoint
    from megatron_crossbert.training.setup import build_session

    session = build_session(_cfg(indexed_corpus, None, True, checkpoint__load_dir=str(root / "straight")))
    args = (session.model, session.optimizer, session.scheduler, session.progress)
    path = save_checkpoint(session.saves, root / "async_copy", *args, session.run_cfg)
    before = {"pending": session.saves.in_flight.pending(), "latest": latest_iteration(root / "async_copy"),
              "run_config": (path / "run_config.json").exists()}
    session.saves.finalize(blocking=True)
    after = {"pending": session.saves.in_flight.pending(), "latest": latest_iteration(root / "async_copy"),
             "run_config": (path / "run_config.json").exists()}
    session.run_cfg.checkpoint.async_save = False
    sync = save_checkpoint(session.saves, root / "sync_copy", *args, session.run_cfg)
    only_async, only_sync, unequal = diff(load_plain_tensors(str(path)), load_plain_tensors(str(sync)))
    return {"before": before, "after": after, "differences": [only_async, only_sync, unequal]}


def _worker(rank: int, world_size: int, indexed_corpus: str, root: str) -> dict:
    from megatron_crossbert.training import train

    root = Path(root)
    straight = train(_cfg(indexed_corpus, root / "straight", False, save_interval=0))["losses"]
    first = train(_cfg(indexed_corpus, root / "async", True), exit_at_iteration=2)["losses"]
    resumed = train(_cfg(indexed_corpus, root / "async", True))
    return {"straight": straight, "async": first + resumed["losses"], "start": resumed["start_iteration"],
            **_commit_waits_for_finalize(indexed_corpus, root)}


@pytest.mark.multirank
def test_async_save_commits_after_all_ranks_and_resumes_exactly(indexed_corpus, tmp_path):
    from multirank import run_ranks

    from megatron_crossbert.checkpoint.layout import latest_iteration

    results = run_ranks(_worker, 2, indexed_corpus, str(tmp_path))
    first = results[0]
    assert first["straight"] == first["async"] and first["start"] == 2, first
    assert latest_iteration(tmp_path / "async") == 4
    assert first["before"] == {"pending": 1, "latest": None, "run_config": False}, first["before"]
    assert first["after"] == {"pending": 0, "latest": 4, "run_config": True}, first["after"]
    assert first["differences"] == [[], [], []]
    assert results[1]["async"] == first["async"]

