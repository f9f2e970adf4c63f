"""Checksums: every file of a checkpoint is recorded at commit and verified once before any use.

Checking sizes alone, one flipped byte in a ``.distcp`` shard would load silently and
export and resume would run on the changed weight. The CLI rows (resume, init_from, export, probe, MTEB on a
flipped byte) are in ``cli/test_error_lines.py``; the 2-rank split (each rank verifies its share, every
rank raises the same line) and the async save's record in ``checkpoint/test_async_save.py``.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest

from megatron_crossbert.checkpoint import checksums
from megatron_crossbert.checkpoint.checksums import CHECKSUMS_FILE, files_for_rank, read_record
from megatron_crossbert.checkpoint.errors import ChecksumMismatchError
from megatron_crossbert.checkpoint.verify import open_checkpoint, verify_contents
from tests.support.checkpoints import flip_byte

ITER2 = "iter_0000002"


@pytest.fixture
def ckpt(tiny_checkpoint, tmp_path) -> Path:
    """A copy of the session checkpoint's iter_0000002 (free to damage)."""
    shutil.copytree(tiny_checkpoint / ITER2, tmp_path / ITER2)
    return tmp_path / ITER2


def test_the_record_covers_every_file_and_an_untouched_checkpoint_verifies(tiny_checkpoint):
    directory = tiny_checkpoint / ITER2
    record = json.loads((directory / CHECKSUMS_FILE).read_text())
    on_disk = {p.name: p.stat().st_size for p in directory.iterdir() if p.name != CHECKSUMS_FILE}
    assert record["algorithm"] == "xxh3_128" and {n: e["bytes"] for n, e in record["files"].items()} == on_disk
    assert {"run_config.json", ".metadata", "__0_0.distcp"} <= set(on_disk)
    assert open_checkpoint(tiny_checkpoint).contents == "verified"


def test_one_flipped_byte_is_named_in_one_line(ckpt):
    flip_byte(ckpt / "__0_0.distcp")
    with pytest.raises(ChecksumMismatchError) as info:
        open_checkpoint(ckpt)
    message = str(info.value)
    assert message.startswith(f"{ckpt / '__0_0.distcp'}: content changed since it was saved (xxh3_128 ")
    assert message.endswith("; restore it from a copy or use an earlier checkpoint") and "\n" not in message


def test_the_completeness_marker_and_sizes_are_covered_too(ckpt):
    path = ckpt / "run_config.json"
    original = path.read_text()
    path.write_text(original.replace('"lr": 0.001', '"lr": 0.002'))
    with pytest.raises(ChecksumMismatchError, match=f"^{path}: content changed since it was saved"):
        open_checkpoint(ckpt)
    with open(ckpt / ".metadata", "ab") as handle:
        handle.write(b"\0")
    with pytest.raises(ChecksumMismatchError, match=r"\(and 1 more file\(s\)\)$") as info:
        open_checkpoint(ckpt)
    assert f"{ckpt / '.metadata'}: " in str(info.value) and " bytes, but " in str(info.value)


def test_verify_off_skips_and_says_so(ckpt):
    (ckpt / "__0_0.distcp").write_bytes(b"junk")
    assert open_checkpoint(ckpt, verify="off").contents == "off"


def _as_saved_before_records(ckpt: Path) -> None:
    """What a checkpoint of the version before checksums holds: no record, no data record, and no
    checkpoint.verify in its run_config.json (the three arrived together)."""
    (ckpt / CHECKSUMS_FILE).unlink()
    (ckpt / "checkpoint.data.json").unlink()
    saved = json.loads((ckpt / "run_config.json").read_text())
    del saved["checkpoint"]["verify"]
    (ckpt / "run_config.json").write_text(json.dumps(saved))


def test_a_checkpoint_from_before_records_warns_once(ckpt, caplog):
    _as_saved_before_records(ckpt)
    with caplog.at_level(logging.WARNING, logger=checksums.__name__):
        assert open_checkpoint(ckpt).contents == "unrecorded" and open_checkpoint(ckpt).contents == "unrecorded"
    assert caplog.text.count("has no checksums.json (saved by an older version): its files cannot be verified") == 1


def _drop_entries(ckpt: Path, *names: str) -> None:
    """Remove entries from the record (every entry when no name is given)."""
    path = ckpt / CHECKSUMS_FILE
    record = json.loads(path.read_text())
    record["files"] = {name: entry for name, entry in record["files"].items() if names and name not in names}
    path.write_text(json.dumps(record))


def test_a_record_that_should_be_there_and_is_not_is_damage(ckpt):
    """A deleted record must not pass as 'saved by an older version', or a flipped byte beside it is
    exported and trained on; the run's own files say it was saved with one."""
    (ckpt / CHECKSUMS_FILE).unlink()
    flip_byte(ckpt / "__0_0.distcp")
    with pytest.raises(ChecksumMismatchError) as info:
        open_checkpoint(ckpt)
    assert str(info.value) == (
        f"{ckpt / CHECKSUMS_FILE}: missing, but this checkpoint was saved with checksums (its run_config.json "
        f"records checkpoint.verify); it is damaged: restore the file from a copy, use an earlier checkpoint, or "
        f"read it unverified with checkpoint.verify=off (--checkpoint-verify off; --verify off for export, probe "
        f"and MTEB)")
    saved = json.loads((ckpt / "run_config.json").read_text())
    del saved["checkpoint"]["verify"]
    (ckpt / "run_config.json").write_text(json.dumps(saved))  # the data record still tells
    with pytest.raises(ChecksumMismatchError, match=r"saved with checksums \(it has checkpoint\.data\.json\)"):
        open_checkpoint(ckpt)
    assert open_checkpoint(ckpt, verify="off").contents == "off"


@pytest.mark.parametrize("dropped,named,why", [
    (("__0_0.distcp",), "__0_0.distcp", ".metadata lists it"),
    ((".metadata",), ".metadata", "the index of every load"),
    ((), ".metadata", "the index of every load"),
    (("checkpoint.data.json",), "checkpoint.data.json", "the data record"),
], ids=["shard", ".metadata", "empty record", "data record"])
def test_every_file_a_load_reads_must_be_in_the_record(ckpt, dropped, named, why):
    """Checking only the names a record lists, an entry removed from it would let a flipped byte in
    that file through without a word."""
    _drop_entries(ckpt, *dropped)
    if named == "__0_0.distcp":
        flip_byte(ckpt / named)
    with pytest.raises(ChecksumMismatchError) as info:
        open_checkpoint(ckpt)
    assert str(info.value).startswith(f"{ckpt / named}: read by this checkpoint ({why}) but not recorded in "
                                      f"checksums.json; the record is incomplete"), str(info.value)
    assert "\n" not in str(info.value)


def test_a_file_no_load_reads_may_stay_unrecorded(ckpt):
    (ckpt / "notes.txt").write_text("copied from the cluster on Monday\n")
    assert open_checkpoint(ckpt).contents == "verified"


def test_a_damaged_record_is_named(ckpt):
    (ckpt / CHECKSUMS_FILE).write_text("{not json")
    with pytest.raises(Exception, match=f"{ckpt / CHECKSUMS_FILE}: not a readable checksum record"):
        open_checkpoint(ckpt)


def test_loads_refuse_a_checkpoint_whose_contents_were_never_checked(ckpt):
    from dataclasses import replace

    from megatron_crossbert.checkpoint.load import read_model_weights

    source = replace(open_checkpoint(ckpt, verify="off"), contents="pending")
    with pytest.raises(ValueError, match="were not checked against checksums.json"):
        read_model_weights(None, source)
    assert verify_contents(source, "full").contents == "verified"


def test_ranks_split_the_files_and_cover_each_once(tiny_checkpoint):
    sizes = {name: entry["bytes"] for name, entry in read_record(tiny_checkpoint / ITER2).items()}
    shares = [files_for_rank(sizes, rank, 3) for rank in range(3)]
    assert sorted(sum(shares, [])) == sorted(sizes)
    assert max(sizes, key=sizes.get) in shares[0]
