"""A resume continues the checkpoint's sample stream, so another run's checkpoint copied into a save dir is
refused when its masking or training seed is not the command's (``data_record.STREAM_FIELDS``), in one line
naming the checkpoint and the seed; ``--allow-data-change`` lets a deliberate change through, logged."""

from __future__ import annotations

import shutil

import pytest

from megatron_crossbert.checkpoint.errors import DataChangedError
from megatron_crossbert.checkpoint.manager import CheckpointManager
from tests.support.training import tiny_config


@pytest.mark.parametrize("key", ["masking__seed", "training__seed"])
def test_a_copied_checkpoint_with_another_seed_is_refused(tiny_checkpoint, indexed_corpus, tmp_path, key, caplog):
    save = shutil.copytree(tiny_checkpoint, tmp_path / "save")

    def config(**extra):
        return tiny_config("crossbert", indexed_corpus, save, training__train_iters=4,
                           checkpoint__lr_schedule_on_resume="config", **extra)

    assert CheckpointManager.check(config()).choice.source is not None  # the same seeds: resumed
    with pytest.raises(DataChangedError) as err:
        CheckpointManager.check(config(**{key: 7}))
    message = str(err.value)
    assert f"{key.replace('__', '.')}: checkpoint 1234 vs run 7" in message and str(save) in message
    assert "\n" not in message and "--allow-data-change" in message
    assert CheckpointManager.check(config(**{key: 7}, checkpoint__allow_data_change=True)).choice.source is not None
    assert "on changed data, allowed by checkpoint.allow_data_change" in caplog.text
