"""Checkpoint safety: strict 'latest', refusals that touch nothing, pruning, no code from pickles.

Pointer and pruning checks use fake checkpoint roots (a complete save is one with run_config.json),
so they cost no megatron work; the readers and the overwrite/resume paths use one real 2-step
checkpoint trained once per module.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

import pytest

from tests.support.checkpoints import tree_digest, write_malicious_metadata, write_tokenizer
from tests.support.training import tiny_config, write_corpus

ITER2 = "iter_0000002"


def _fake_root(tmp_path: Path, complete=(2,), partial=()) -> Path:
    root = tmp_path / "ckpt"
    cfg = tiny_config("crossbert", "unused")
    for it in (*complete, *partial):
        (root / f"iter_{it:07d}").mkdir(parents=True)
    for it in complete:
        cfg.save_json(root / f"iter_{it:07d}" / "run_config.json")
    return root


def _ways_out(root: Path, newest: str = ITER2) -> str:
    return (f"pass --resume-from {newest} (checkpoint.resume_from) to resume it, or --overwrite "
            f"(checkpoint.overwrite) to start over; --overwrite moves the existing checkpoints into "
            f"{root}/replaced_<time>/ and deletes nothing")


def _start_error(root: Path) -> str:
    from megatron_crossbert.checkpoint.errors import CheckpointError
    from megatron_crossbert.checkpoint.start_guard import choose_start

    with pytest.raises(CheckpointError) as info:
        choose_start(tiny_config("crossbert", "unused", root))
    return str(info.value)


def test_latest_pointer_is_parsed_strictly(tmp_path):
    root = _fake_root(tmp_path, complete=(2,), partial=(4,))
    latest = root / "latest"
    beside = f"; {root} holds complete checkpoints (newest {ITER2}): {_ways_out(root)}"
    cases = {
        b"\xff\xfe\x00junk": f"{latest}: holds 7 bytes that are not text; expected 'iter_' followed by digits, "
                             f"e.g. iter_0000100",
        b"": f"{latest}: is empty; expected 'iter_' followed by digits, e.g. iter_0000100",
        b"  \n": f"{latest}: is empty; expected 'iter_' followed by digits, e.g. iter_0000100",
        b"hello": f"{latest}: holds 'hello', not 'iter_' followed by digits",
        b"iter_xyz": f"{latest}: holds 'iter_xyz', not 'iter_' followed by digits",
        b"iter_0000004": f"{latest}: points at iter_0000004, which is missing or incomplete (no run_config.json: "
                         f"its save did not finish)",
        b"iter_0000009": f"{latest}: points at iter_0000009, which is missing or incomplete (no such directory)",
    }
    for content, message in cases.items():
        latest.write_bytes(content)
        assert _start_error(root) == message + beside, content
    latest.unlink()
    assert _start_error(root) == (f"{root}: holds complete checkpoints (newest {ITER2}) but no 'latest' file; "
                                 f"refusing to start over on top of them: {_ways_out(root)}")


def test_readers_name_the_pointer_file(tmp_path):
    from megatron_crossbert.checkpoint.directories import latest_iteration, resolve_checkpoint_dir
    from megatron_crossbert.checkpoint.errors import CheckpointError

    root = _fake_root(tmp_path)
    (root / "latest").write_text("iter_12x\n")
    with pytest.raises(CheckpointError, match=r"latest: holds 'iter_12x', not 'iter_' followed by digits$"):
        resolve_checkpoint_dir(root)
    with pytest.raises(CheckpointError, match="not 'iter_' followed by digits"):
        latest_iteration(root)
    (root / "latest").write_text(ITER2 + "\n")
    assert resolve_checkpoint_dir(root) == root / ITER2 and latest_iteration(root) == 2


def test_refused_runs_touch_nothing(tmp_path):
    """Junk 'latest', no 'latest', and a --save dir of another run: refused before any write."""
    from megatron_crossbert.checkpoint.errors import CheckpointError
    from megatron_crossbert.training import train

    from megatron_crossbert.checkpoint.run_lock import RunLock

    root = _fake_root(tmp_path, complete=(2, 4))
    other = _fake_root(tmp_path / "other", complete=(6,))
    (other / "latest").write_text("iter_0000006")
    RunLock(root).acquire().release()  # left by the run that wrote them
    attempts = [({}, b"junk"), ({}, None), ({"checkpoint__load_dir": str(other)}, b"iter_0000004")]
    for extra, latest in attempts:
        if latest is None:
            (root / "latest").unlink()
        else:
            (root / "latest").write_bytes(latest)
        before = tree_digest(tmp_path)
        with pytest.raises(CheckpointError, match="--resume-from iter_0000004"):
            train(tiny_config("crossbert", "unused", root, **extra))
        assert tree_digest(tmp_path) == before, extra
    assert "while resuming" in _start_error_with(root, checkpoint__load_dir=str(other))


def _start_error_with(root: Path, **extra) -> str:
    from megatron_crossbert.checkpoint.errors import CheckpointError
    from megatron_crossbert.checkpoint.start_guard import choose_start

    with pytest.raises(CheckpointError) as info:
        choose_start(tiny_config("crossbert", "unused", root, **extra))
    return str(info.value)


def test_prune_touches_only_older_complete_checkpoints(tmp_path):
    from megatron_crossbert.checkpoint.save import prune_checkpoints

    root = _fake_root(tmp_path, complete=(1, 2, 3, 4, 5), partial=(0, 6))
    (root / "iter_backup").mkdir()
    (root / "replaced_x").mkdir()
    (root / "latest").write_text("iter_0000003")  # e.g. rolled back: 4 and 5 are newer than 'latest'
    removed = prune_checkpoints(root, keep_last=1)
    assert sorted(p.name for p in removed) == ["iter_0000000", "iter_0000001", "iter_0000002"]
    assert sorted(p.name for p in root.iterdir()) == ["iter_0000003", "iter_0000004", "iter_0000005",
                                                       "iter_0000006", "iter_backup", "latest", "replaced_x"]
    (root / "latest").write_text("iter_0000005")
    assert [p.name for p in prune_checkpoints(root, keep_last=2)] == ["iter_0000003"]
    (root / "latest").unlink()
    assert prune_checkpoints(root, keep_last=1) == []  # without a valid pointer nothing is judged stale


def test_a_save_never_replaces_a_checkpoint_it_did_not_write(tmp_path):
    from megatron_crossbert.checkpoint.errors import CheckpointError
    from megatron_crossbert.checkpoint.save import _prepare_dir
    from megatron_crossbert.checkpoint.save_errors import SaveTarget

    root = _fake_root(tmp_path, complete=(2,), partial=(3,))
    before = tree_digest(root / ITER2)
    with pytest.raises(CheckpointError, match="a complete checkpoint from an earlier run is in the way"):
        _prepare_dir(root / ITER2, set(), SaveTarget.of(root, 2))
    assert tree_digest(root / ITER2) == before
    (root / "iter_0000003" / "half.distcp").write_bytes(b"x")
    _prepare_dir(root / "iter_0000003", set(), SaveTarget.of(root, 3))  # a partial save: cleared for the retry
    assert list((root / "iter_0000003").iterdir()) == []  # megatron's save expects an empty directory


@pytest.fixture(scope="module")
def real(tiny_checkpoint, indexed_corpus) -> tuple[str, Path]:
    """(corpus prefix, checkpoint root with iter_0000001 and iter_0000002) from a 2-step run."""
    return indexed_corpus, tiny_checkpoint


@pytest.mark.slow
def test_resume_from_and_overwrite_are_explicit_ways_out(real, tmp_path):
    from megatron_crossbert.fsutil import current_umask
    from megatron_crossbert.training import train

    corpus, ckpt = real
    root = tmp_path / "ckpt"
    shutil.copytree(ckpt, root)
    (root / "latest").write_text("garbage")
    originals = {name: tree_digest(root / name) for name in ("iter_0000001", ITER2)}
    resumed = train(tiny_config("crossbert", corpus, root, training__train_iters=3,
                                checkpoint__resume_from="iter_0000001",
                                checkpoint__lr_schedule_on_resume="config", checkpoint__overwrite=True))
    assert resumed["start_iteration"] == 1 and resumed["iteration"] == 3
    moved = next(root.glob("replaced_*"))  # iter_0000002 was in the way of the resumed run's saves
    assert moved.stat().st_mode & 0o777 == 0o777 & ~current_umask()  # not mkdtemp's 0700
    assert sorted(p.name for p in moved.iterdir()) == [ITER2, "latest"]
    assert tree_digest(moved / ITER2) == originals[ITER2] and (moved / "latest").read_text() == "garbage"
    fresh = train(tiny_config("crossbert", corpus, root, training__train_iters=1, training__lr_warmup_iters=0,
                              checkpoint__overwrite=True))
    assert fresh["start_iteration"] == 0 and fresh["checkpoint"].endswith("iter_0000001")
    kept = sorted(root.glob("replaced_*/iter_*"))
    assert [tree_digest(p) for p in kept if p.name == "iter_0000001"] == [originals["iter_0000001"]]


def test_malicious_metadata_is_refused_by_every_reader(real, tmp_path):
    """resume, init_from, export and the probe/mteb model resolver: refused, and the payload never runs."""
    from megatron_crossbert.checkpoint.errors import CheckpointError
    from megatron_crossbert.convert import ConversionError, export_to_hf
    from megatron_crossbert.evaluation.encoders import resolve_model
    from megatron_crossbert.training import train

    corpus, ckpt = real
    evil = tmp_path / "evil"
    shutil.copytree(ckpt, evil)
    marker = tmp_path / "payload_ran"
    write_malicious_metadata(evil / ITER2 / ".metadata", marker)
    refusal = (f"{evil / ITER2 / '.metadata'}: refused to unpickle posix.mkdir, which is not a checkpoint data "
               f"type (the file may be crafted to run code; nothing in it was executed)")
    with pytest.raises(CheckpointError) as resume:
        train(tiny_config("crossbert", corpus, None, training__train_iters=2, checkpoint__load_dir=str(evil)))
    with pytest.raises(CheckpointError) as init_from:
        train(tiny_config("crossbert", corpus, None, checkpoint__init_from=str(evil)))
    tokenizer = write_tokenizer(tmp_path / "tok")
    with pytest.raises(ConversionError) as export:
        export_to_hf(evil, tmp_path / "hf", tokenizer_dir=tokenizer)
    with pytest.raises(ConversionError) as probe:
        resolve_model(evil, cache_dir=tmp_path / "cache", tokenizer_dir=tokenizer)
    assert str(resume.value) == refusal and str(init_from.value) == refusal
    assert refusal in str(export.value) and refusal in str(probe.value)
    assert not marker.exists()


def test_stored_objects_load_weights_only(tmp_path):
    """A byte item in a .distcp file (how RNG and common state are stored) is refused under
    checked_read; torch's own reader would run it, which is why the guard exists."""
    from megatron.core import dist_checkpointing
    from megatron.core.dist_checkpointing.mapping import ShardedObject

    from megatron_crossbert.platform import distributed as platform
    from megatron_crossbert.checkpoint.errors import UnsafeCheckpointError
    from megatron_crossbert.checkpoint.safe_pickle import checked_read
    from megatron_crossbert.config import ParallelConfig

    class Payload:
        def __reduce__(self):
            return os.mkdir, (str(tmp_path / "payload_ran"),)

    platform.initialize(ParallelConfig(), 0)
    target = tmp_path / "ckpt"
    target.mkdir()
    dist_checkpointing.save({"obj": ShardedObject("obj", Payload(), (1,), (0,), replica_id=0)}, str(target))
    request = {"obj": ShardedObject("obj", None, (1,), (0,), replica_id=0)}
    with pytest.raises(UnsafeCheckpointError, match=r"item obj.*refused to unpickle|refused to unpickle"):
        with checked_read(target):
            dist_checkpointing.load(request, str(target))
    assert not (tmp_path / "payload_ran").exists()
    dist_checkpointing.load({"obj": ShardedObject("obj", None, (1,), (0,), replica_id=0)}, str(target))
    assert (tmp_path / "payload_ran").is_dir()  # the unguarded reader runs it


def test_swapped_tokenizer_of_the_same_size_is_refused(tmp_path, caplog):
    """Same vocab size and special ids, different id -> word map: resume, init_from and the
    dataset check refuse it, naming both fingerprints and files; the override flag downgrades to a warning."""
    from megatron_crossbert.checkpoint.errors import CheckpointError
    from megatron_crossbert.checkpoint.tokenizer_record import TokenizerMismatchError, check_tokenizers
    from megatron_crossbert.data.tokenizers.fingerprint import record_path, tokenizer_fingerprint, write_dataset_record
    from megatron_crossbert.data.tokenizers.tokenizer import load_tokenizer
    from megatron_crossbert.training import train
    from megatron_crossbert.checkpoint.manager import CheckpointManager

    corpus = write_corpus(tmp_path / "corpus")
    dir_a, dir_b = write_tokenizer(tmp_path / "tok_a"), write_tokenizer(tmp_path / "tok_b", reverse=True)
    tok_a, tok_b = load_tokenizer(dir_a), load_tokenizer(dir_b)
    fp_a, fp_b = tokenizer_fingerprint(tok_a), tokenizer_fingerprint(tok_b)
    assert tok_a.vocab_size == tok_b.vocab_size and tok_a.special_ids == tok_b.special_ids and fp_a != fp_b
    ckpt = tmp_path / "ckpt"
    train(tiny_config("crossbert", corpus, ckpt, training__train_iters=2, data__tokenizer=str(dir_a)))
    record = ckpt / ITER2 / "checkpoint.tokenizer.json"
    assert json.loads(record.read_text())["fingerprint"] == fp_a
    swapped = dict(training__train_iters=2, data__tokenizer=str(dir_b))
    expected = (f"{record}: the checkpoint used tokenizer {fp_a} ({dir_a}), but this run's data.tokenizer is "
                f"{fp_b} ({dir_b}); the same ids would mean different tokens. Set --allow-tokenizer-change "
                f"(checkpoint.allow_tokenizer_change) only if the change is deliberate")
    for extra in ({}, {"checkpoint__init_from": str(ckpt)}):
        save = None if extra else ckpt
        with pytest.raises(CheckpointError) as info:
            CheckpointManager.check(tiny_config("crossbert", corpus, save, **swapped, **extra))
        assert str(info.value) == expected
    with pytest.raises(CheckpointError, match="allow-tokenizer-change"):
        train(tiny_config("crossbert", corpus, ckpt, **swapped))
    allowed = tiny_config("crossbert", corpus, ckpt, **swapped, checkpoint__allow_tokenizer_change=True)
    assert CheckpointManager.check(allowed).choice.source.directory == ckpt / ITER2
    assert "allowed by checkpoint.allow_tokenizer_change" in caplog.text

    check_tokenizers(tiny_config("crossbert", corpus, None, data__tokenizer=str(dir_b)))
    # a dataset written by another tool (no record): warned once by each start that reached the dataset
    # check (the first train, the allowed check, the call above), not once per process
    assert caplog.text.count(f"dataset {corpus} has no tokenizer record") == 3
    check_tokenizers(tiny_config("crossbert", corpus, None, data__tokenizer=str(dir_b),
                                         data__data_path=["0.5", corpus, "0.5", corpus]))
    assert caplog.text.count(f"dataset {corpus} has no tokenizer record") == 4  # twice in a blend, warned once
    write_dataset_record(corpus, tok_a, dir_a)
    with pytest.raises(TokenizerMismatchError) as data:
        check_tokenizers(tiny_config("crossbert", corpus, None, data__tokenizer=str(dir_b)))
    assert str(data.value) == expected.replace(f"{record}: the checkpoint", f"{record_path(corpus)}: this dataset")
    check_tokenizers(tiny_config("crossbert", corpus, None, data__tokenizer=str(dir_a)))


def test_lr_schedule_change_on_resume_is_refused_kept_or_applied(real, caplog):
    from megatron_crossbert.checkpoint.errors import CheckpointError
    from megatron_crossbert.checkpoint.manager import CheckpointManager
    from megatron_crossbert.training.setup import build_session

    corpus, ckpt = real
    longer = dict(training__train_iters=4, training__lr_decay_style="linear")
    with pytest.raises(CheckpointError) as info:
        CheckpointManager.check(tiny_config("crossbert", corpus, ckpt, **longer))
    assert str(info.value) == (
        f"{ckpt / ITER2}: the schedule differs from the checkpoint's (training.train_iters: checkpoint 2 -> "
        f"run 4; training.lr_decay_style: checkpoint 'cosine' -> run 'linear'); set --lr-schedule-on-resume "
        f"checkpoint (keep the saved schedule) or config (apply this run's from step 2 on), or restore the "
        f"old values")
    kept = build_session(tiny_config("crossbert", corpus, ckpt, **longer,
                                     checkpoint__lr_schedule_on_resume="checkpoint")).scheduler
    assert (kept.lr_decay_steps, kept.lr_decay_style, kept.num_steps) == (2, "cosine", 2)
    assert "keeping the checkpoint's schedule (checkpoint.lr_schedule_on_resume=checkpoint)" in caplog.text
    applied = build_session(tiny_config("crossbert", corpus, ckpt, **longer,
                                        checkpoint__lr_schedule_on_resume="config")).scheduler
    assert (applied.lr_decay_steps, applied.lr_decay_style, applied.num_steps) == (4, "linear", 2)
    assert "applying this run's schedule (checkpoint.lr_schedule_on_resume=config)" in caplog.text


def test_a_batch_size_change_on_resume_is_logged(real, caplog):
    """The samples per step change from the resumed step on (the LR schedule counts steps): a resume says so."""
    from megatron_crossbert.checkpoint.resume_schedule import schedule_on_resume
    from megatron_crossbert.checkpoint.verify import verify_checkpoint

    corpus, ckpt = real
    changed = tiny_config("crossbert", corpus, None, training__train_iters=2, training__global_batch_size=8,
                          training__micro_batch_size=4)
    with caplog.at_level(logging.WARNING):
        source = verify_checkpoint(ckpt / ITER2, changed)
        assert schedule_on_resume(changed, source) is changed
        source.release()
    assert (f"resume from {ckpt / ITER2}: training.global_batch_size 4 -> 8 from step 2 (samples per step change "
            f"from here on; the LR schedule counts steps)") in caplog.text
    assert f"resume from {ckpt / ITER2}: training.micro_batch_size 2 -> 4 from step 2" in caplog.text


def test_wsd_batch_and_masking_schedules_are_guarded_on_resume(indexed_corpus, tmp_path, caplog):
    """The new schedule fields are refused on change by default; 'checkpoint' keeps the saved ones (WSD
    from the saved run config, which megatron's scheduler state lacks: a WSD checkpoint under a cosine
    config would otherwise fail in get_lr); 'config' applies this run's."""
    from megatron_crossbert.checkpoint.errors import CheckpointError
    from megatron_crossbert.training import train
    from megatron_crossbert.checkpoint.manager import CheckpointManager
    from megatron_crossbert.training.setup import build_session

    scheduled = dict(training__train_iters=4, training__lr_warmup_iters=1, training__lr_decay_style="wsd",
                     training__lr_wsd_decay_iters=2, training__lr_wsd_decay_style="linear",
                     training__rampup_batch_size=[2, 2, 8], masking__bert_mask_prob_schedule="0:0.3 1K:0.15")
    ckpt = tmp_path / "ckpt"
    train(tiny_config("crossbert", indexed_corpus, ckpt, **scheduled), exit_at_iteration=2)
    plain = dict(training__train_iters=4, training__lr_warmup_iters=1)
    with pytest.raises(CheckpointError) as info:
        CheckpointManager.check(tiny_config("crossbert", indexed_corpus, ckpt, **plain))
    for change in ("training.lr_decay_style: checkpoint 'WSD' -> run 'cosine'",
                   "training.lr_wsd_decay_iters: checkpoint 2 -> run None",
                   "training.lr_wsd_decay_style: checkpoint 'linear' -> run 'exponential'",
                   "training.rampup_batch_size: checkpoint [2, 2, 8] -> run None",
                   "masking.bert_mask_prob_schedule: checkpoint '0:0.3 1K:0.15' -> run None"):
        assert change in str(info.value)
    kept = build_session(tiny_config("crossbert", indexed_corpus, ckpt, **plain,
                                     checkpoint__lr_schedule_on_resume="checkpoint"))
    sched = kept.scheduler
    assert (sched.lr_decay_style, sched.wsd_decay_steps, sched.lr_wsd_decay_style) == ("WSD", 2, "linear")
    assert sched.get_lr(sched.optimizer.param_groups[0]) == 1e-3            # stable phase of the saved WSD
    assert kept.run_cfg.training.rampup_batch_size == [2, 2, 8] and kept.batch_schedule.at(4) == (2, 1)
    assert kept.run_cfg.masking.bert_mask_prob_schedule == "0:0.3 1K:0.15"
    applied = build_session(tiny_config("crossbert", indexed_corpus, ckpt, **plain,
                                        checkpoint__lr_schedule_on_resume="config"))
    assert applied.scheduler.lr_decay_style == "cosine" and applied.batch_schedule.at(4) == (4, 2)
    assert applied.run_cfg.masking.bert_mask_prob_schedule is None


def test_a_training_start_loads_its_tokenizer_once_and_a_changed_one_again(tmp_path, monkeypatch):
    """The tokenizer record check and the datasets' special ids share one load of the run's tokenizer; a file
    rewritten in place is loaded again (the cache follows the files, not the path)."""
    import megatron_crossbert.data.tokenizers.tokenizer as tokenizer_module
    from megatron_crossbert.data.tokenizers.fingerprint import tokenizer_fingerprint
    from megatron_crossbert.training import train

    loads = []
    real_load = tokenizer_module.load_tokenizer
    monkeypatch.setattr(tokenizer_module, "load_tokenizer", lambda path: loads.append(path) or real_load(path))
    tokenizer_module._cached_load.cache_clear()
    corpus, tok_dir = write_corpus(tmp_path / "corpus"), write_tokenizer(tmp_path / "tok")
    train(tiny_config("crossbert", corpus, tmp_path / "ckpt", training__train_iters=2, data__tokenizer=str(tok_dir)))
    assert (tmp_path / "ckpt" / ITER2 / "checkpoint.tokenizer.json").is_file() and len(loads) == 1
    before = tokenizer_fingerprint(tokenizer_module.run_tokenizer(tok_dir))
    shutil.rmtree(tok_dir)
    write_tokenizer(tok_dir, reverse=True)
    os.utime(tok_dir / "tokenizer.json", ns=(1, 1))  # a rewrite within the clock's resolution still shows
    assert tokenizer_fingerprint(tokenizer_module.run_tokenizer(tok_dir)) != before and len(loads) == 2
