"""A full disk during a save ends in one line naming the save and the last complete checkpoint, exit 2.

Unguarded: a 40-line traceback ("Worker failure", "unexpected pos") that never said the disk was
full, and a rerun on the still-full disk said ``[Errno 28]`` without a path after a TensorBoard thread
traceback. megatron-core's writer drops the ENOSPC behind a generic "Worker failure", so the verdict
comes from the exception chain where it survives, else from the filesystem (``save_errors``).

The end-to-end test runs the real CLI in a private tmpfs (``unshare -m`` as root, ``unshare -rm``
otherwise; skipped with the reason where no tmpfs can be mounted): train 2 steps with a save (sync,
async, and a copy for a 2-rank run), fill the disk, resume so that the save at step 4 hits ENOSPC
(free-space checks off), then rerun on the still-full disk (the start check refuses at once).
"""

from __future__ import annotations

import errno
import json
import sys
from pathlib import Path

import pytest
from torch.distributed.checkpoint.api import CheckpointException

from megatron_crossbert.checkpoint import save_errors
from megatron_crossbert.checkpoint.errors import CheckpointSaveError, DiskFullError
from megatron_crossbert.checkpoint.save_errors import SaveTarget, no_space_in_chain, save_failure
from tests.support.disk_full_driver import run_cases_in_tmpfs, run_in_tmpfs
from tests.support.training import tiny_overrides

TARGET = SaveTarget(Path("/ckpt"), "iter_0000004", "iter_0000002", 0)


def _torch_save_failure() -> RuntimeError:
    """What torch.save onto a full disk raises: 'unexpected pos' with the OSError as __context__."""
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")
    except RuntimeError as err:
        return err


def _megatron_lost_cause() -> CheckpointException:
    """megatron-core 0.19's writer: the cause is gone, only the class name is left."""
    worker = RuntimeError("Worker failure: An error is caught while starting worker 0, error: <class 'RuntimeError'>")
    return CheckpointException("write", {0: (worker, None)})


def test_no_space_is_found_behind_every_disguise():
    assert no_space_in_chain(_torch_save_failure())
    assert no_space_in_chain(OSError(errno.EDQUOT, "Disk quota exceeded"))
    remote = RuntimeError("Worker failure: [Errno 28] No space left on device: '/ckpt/iter_0000004/__1_0.distcp'")
    assert no_space_in_chain(CheckpointException("write", {1: (remote, None)}))  # pickled: only text survives
    assert not no_space_in_chain(_megatron_lost_cause())


def test_a_lost_cause_with_room_is_a_plain_save_error(tmp_path):
    err = save_failure(_megatron_lost_cause(), SaveTarget(tmp_path, "iter_0000004", "iter_0000002", 0))
    assert type(err) is CheckpointSaveError
    assert str(err).startswith(f"{tmp_path}: saving iter_0000004 failed (RuntimeError: Worker failure")
    assert str(err).endswith("; the last complete checkpoint is iter_0000002") and "\n" not in str(err)


def test_a_lost_cause_with_too_little_free_space_is_disk_full(tmp_path, monkeypatch):
    monkeypatch.setattr(save_errors, "free_bytes", lambda path: 10)
    err = save_failure(_megatron_lost_cause(), SaveTarget(tmp_path, "iter_0000004", None, 1000))
    assert isinstance(err, DiskFullError)
    assert str(err) == (f"{tmp_path}: no space left on device while saving iter_0000004; "
                        f"there is no complete checkpoint yet")


def test_a_save_that_cannot_fit_is_refused_before_it_starts(tmp_path, monkeypatch):
    monkeypatch.setattr(save_errors, "free_bytes", lambda path: 3 << 20)
    target = SaveTarget(tmp_path, "iter_0000004", "iter_0000002", 8 << 20)
    assert save_errors.room_problem(target, "saving iter_0000004") == (
        f"{tmp_path}: no space left on device for saving iter_0000004: 3.0 MiB free, a checkpoint takes 8.0 MiB; "
        f"the last complete checkpoint is iter_0000002")
    assert save_errors.room_problem(target, "saving iter_0000004", reclaimable=6 << 20) is None
    assert save_errors.free_bytes(tmp_path / "not" / "made") == 3 << 20


TMPFS_CHECK = """
import json, os, sys
from megatron_crossbert.checkpoint.save_errors import SaveTarget, free_bytes, probe_says_full, save_failure
from pathlib import Path
d = Path(sys.argv[1])
with open(d / "fill", "wb") as f:
    try:
        f.write(b"x" * (2 << 20))
    except OSError:
        pass
err = RuntimeError("Worker failure: An error is caught while starting worker 0, error: <class 'RuntimeError'>")
print(json.dumps({"probe": probe_says_full(d), "free": free_bytes(d),
                  "msg": str(save_failure(err, SaveTarget(d, "iter_0000004", "iter_0000002", 0)))}))
"""


def test_a_real_full_tmpfs_is_recognised_without_any_exception_chain(tmp_path):
    mnt = tmp_path / "mnt"
    (tmp_path / "check.py").write_text(TMPFS_CHECK)
    proc = run_in_tmpfs(f'exec "{sys.executable}" "{tmp_path / "check.py"}" "{mnt}"', mnt, "1m", 120)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.splitlines()[-1])
    assert result["probe"] is True and result["free"] == 0
    assert result["msg"] == (f"{mnt}: no space left on device while saving iter_0000004; "
                             f"the last complete checkpoint is iter_0000002")


def _pretrain(corpus: str, save: Path, *extra: str, env: dict | None = None, mode: str = "sync") -> dict:
    over = tiny_overrides("crossbert", corpus, save, training__train_iters=4, checkpoint__save_interval=2,
                          checkpoint__async_save=mode == "async")
    return {"module": "megatron_crossbert.cli.pretrain", "argv": [a for o in over for a in ("--set", o)] + list(extra),
            "env": env or {}}


def _driver(*argv) -> dict:
    return {"module": "tests.support.disk_full_driver", "argv": [str(a) for a in argv]}


def _scenario(corpus: str, mnt: Path) -> dict[str, dict]:
    """name -> case, in the order they run (the disk is filled after the first three)."""
    no_check = {"CROSSBERT_TEST_NO_SPACE_CHECK": "1"}
    ranks = _pretrain(corpus, mnt / "ckpt_ranks")["argv"]
    return {
        "train sync": _pretrain(corpus, mnt / "ckpt_sync", "--exit-at-iteration", "2"),
        "copy for 2 ranks": _driver("copy", mnt / "ckpt_sync", mnt / "ckpt_ranks"),
        "train async": _pretrain(corpus, mnt / "ckpt_async", "--exit-at-iteration", "2", mode="async"),
        "fill": _driver("fill", mnt, 64 << 10),
        "save hits ENOSPC, sync": _pretrain(corpus, mnt / "ckpt_sync", env=no_check),
        "refill": _driver("fill", mnt, 64 << 10),  # the same headroom for each run (TensorBoard's first event)
        "save hits ENOSPC, async": _pretrain(corpus, mnt / "ckpt_async", env=no_check, mode="async"),
        "refill for 2 ranks": _driver("fill", mnt, 64 << 10),
        "save hits ENOSPC, 2 ranks": dict(_driver("ranks", 2, *ranks), env=no_check),
        "rerun on the full disk, sync": _pretrain(corpus, mnt / "ckpt_sync"),
        "rerun on the full disk, async": _pretrain(corpus, mnt / "ckpt_async", mode="async"),
        "listing": _driver("list", mnt / "ckpt_sync", mnt / "ckpt_async", mnt / "ckpt_ranks"),
    }


def _one_error_line(result: dict, expected: str) -> None:
    errors = [line for line in result["stderr"].splitlines() if line.startswith("error: ")]
    assert result["rc"] == 2 and "Traceback" not in result["stderr"], result["stderr"][-3000:]
    assert len(errors) == 1 and errors[0].startswith(expected), (errors, expected)


@pytest.mark.e2e
def test_a_full_disk_during_a_save_is_one_line_and_loses_nothing(indexed_corpus, tmp_path):
    mnt = tmp_path / "mnt"
    cases = _scenario(indexed_corpus, mnt)
    results = run_cases_in_tmpfs(cases, tmp_path, mnt, "48m")
    for name in ("train sync", "train async", "fill", "refill", "refill for 2 ranks"):
        assert results[name]["rc"] == 0, (name, results[name]["stderr"][-3000:])
    for mode in ("sync", "async"):
        save = mnt / f"ckpt_{mode}"
        _one_error_line(results[f"save hits ENOSPC, {mode}"],
                        f"error: {save}: no space left on device while saving iter_0000004; "
                        f"the last complete checkpoint is iter_0000002")
        _one_error_line(results[f"rerun on the full disk, {mode}"],
                        f"error: {save}: no space left on device for this run's next checkpoint: ")
    ranks = json.loads(results["save hits ENOSPC, 2 ranks"]["stdout"].splitlines()[-1])
    assert ranks["rc"] == [2, 2] and not any("Traceback" in err for err in ranks["stderr"]), ranks
    assert [line for line in ranks["stderr"][0].splitlines() if line.startswith("error: ")] == [
        f"error: {mnt / 'ckpt_ranks'}: no space left on device while saving iter_0000004; "
        f"the last complete checkpoint is iter_0000002"]
    assert "error: " not in ranks["stderr"][1]  # under torchrun only rank 0 prints; every rank exits 2
    for root, listing in json.loads(results["listing"]["stdout"].splitlines()[-1]).items():
        assert listing["latest"] == "iter_0000002", (root, listing)
        assert {"iter_0000002/run_config.json", "iter_0000002/.metadata"} <= set(listing["files"]), listing
        assert "iter_0000004/run_config.json" not in listing["files"]
