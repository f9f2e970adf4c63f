"""A resume on other data is refused in one line; a moved dataset is the same data; allowed changes
are logged with where the new sample stream starts.

Without the data record a resume with another ``--data-path`` silently continues on the new data from the old
sample count. The CLI rows (refused, and allowed with ``--allow-data-change``) are in ``cli/test_error_lines.py``.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from megatron_crossbert.checkpoint import data_record
from megatron_crossbert.checkpoint.data_record import (
    RECORD_FILE,
    blend_differences,
    check_resume_data,
    run_blend,
    write_data_record,
)
from megatron_crossbert.checkpoint.errors import DataChangedError
from tests.support.training import copy_corpus, tiny_config, write_corpus


@pytest.fixture(scope="module")
def other_corpus(tmp_path_factory) -> str:
    return write_corpus(tmp_path_factory.mktemp("other_corpus"), seed=1)


def _blend(*data_path: str) -> list[dict]:
    return run_blend(tiny_config("crossbert", data_path[0], data__data_path=list(data_path)))


def test_the_same_data_moved_elsewhere_is_the_same_data(indexed_corpus, tmp_path):
    assert blend_differences(_blend(indexed_corpus), _blend(copy_corpus(indexed_corpus, tmp_path / "moved"))) == []


def test_other_content_of_the_same_size_is_caught(indexed_corpus, tmp_path):
    edited = copy_corpus(indexed_corpus, tmp_path / "edited")
    data = bytearray(Path(edited + ".bin").read_bytes())
    data[:64] = bytes(64)
    Path(edited + ".bin").write_bytes(bytes(data))
    diffs = blend_differences(_blend(indexed_corpus), _blend(edited))
    assert len(diffs) == 1 and "content fingerprint" in diffs[0] and f"{indexed_corpus} -> {edited}" in diffs[0]


def test_blend_weights_and_dataset_counts_are_compared(indexed_corpus, other_corpus):
    saved = _blend("0.7", indexed_corpus, "0.3", other_corpus)
    assert "blend weight 0.7 vs 0.5" in blend_differences(saved, _blend("0.5", indexed_corpus, "0.5", other_corpus))[0]
    assert "checkpoint blends 2 dataset(s)" in blend_differences(saved, _blend(indexed_corpus))[0]


def test_refused_then_allowed_with_the_stream_position(indexed_corpus, other_corpus, tmp_path, caplog):
    saved = tiny_config("crossbert", indexed_corpus)
    write_data_record(tmp_path, saved, consumed_samples=400)
    current = tiny_config("crossbert", other_corpus, data__split="80,20,0", data__seq_length=16)
    with pytest.raises(DataChangedError) as info:
        check_resume_data(tmp_path, saved, current)
    message = str(info.value)
    assert message.startswith(f"{tmp_path}: this run's data differs from the checkpoint's (data.split: checkpoint "
                              f"'90,10,0' vs run '80,20,0'; data.seq_length: checkpoint 32 vs run 16; dataset 1 (")
    assert "resuming would continue at sample 400 of other data" in message and "--allow-data-change" in message
    assert "\n" not in message
    allowed = tiny_config("crossbert", other_corpus, checkpoint__allow_data_change=True)
    with caplog.at_level(logging.WARNING, logger=data_record.__name__):
        changes = check_resume_data(tmp_path, saved, allowed)
    assert len(changes) == 1 and changes[0].startswith(f"dataset 1 ({indexed_corpus} -> {other_corpus}): ")
    assert "the new data's sample stream starts at sample 400" in caplog.text
    assert check_resume_data(tmp_path, saved, tiny_config("crossbert", indexed_corpus)) == ()


def test_an_old_checkpoint_warns_once_and_still_compares_seq_length(indexed_corpus, tmp_path, caplog):
    saved = tiny_config("crossbert", indexed_corpus)
    with caplog.at_level(logging.WARNING, logger=data_record.__name__):
        assert check_resume_data(tmp_path, saved, saved) == ()
        assert check_resume_data(tmp_path, saved, saved) == ()
    assert caplog.text.count(f"has no {RECORD_FILE} (saved by an older version)") == 1
    with pytest.raises(DataChangedError, match=r"data\.seq_length: checkpoint 32 vs run 16\); resuming would "
                                               r"continue at the checkpoint's consumed-sample count"):
        check_resume_data(tmp_path, saved, tiny_config("crossbert", indexed_corpus, data__seq_length=16))


def test_checkpoints_record_their_data(tiny_checkpoint, indexed_corpus):
    record = data_record.read_data_record(tiny_checkpoint / "iter_0000002")
    assert record["consumed_samples"] == 8 and record["blend"] == _blend(indexed_corpus)
