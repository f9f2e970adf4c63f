"""Which writer async saves use (the one ``checkpoint.async_writer`` names, mcore by default; nvrx refused in one
line where it cannot run), said in one line of our log, and megatron's deprecation warning filtered out instead of
repeated."""

from __future__ import annotations

import logging

import pytest

from megatron_crossbert.checkpoint import async_strategy
from megatron_crossbert.checkpoint.async_strategy import (
    MCORE_DEPRECATION,
    MEGATRON_LOGGER,
    choose_async_strategy,
    run_async_strategy,
)


@pytest.mark.parametrize("cuda,nvrx", [(True, True), (True, False), (False, True), (False, False)])
def test_the_config_chooses_the_writer_never_the_environment(cuda, nvrx):
    assert choose_async_strategy("mcore", cuda, nvrx).name == "mcore"  # the default, even where NVRx imports
    if cuda and nvrx:
        assert choose_async_strategy("nvrx", cuda, nvrx).name == "nvrx"
    else:
        with pytest.raises(ValueError, match="checkpoint.async_writer=nvrx") as refused:
            choose_async_strategy("nvrx", cuda, nvrx)
        assert "\n" not in str(refused.value) and "use mcore" in str(refused.value)


def test_async_writer_defaults_to_mcore_and_nvrx_is_refused_at_start_without_a_gpu(tmp_path):
    from megatron_crossbert.config import load_run_config
    from megatron_crossbert.training.setup import check_support

    assert load_run_config(None, []).checkpoint.async_writer == "mcore"
    with pytest.raises(ValueError, match="must be one of mcore, nvrx"):
        load_run_config(None, ["checkpoint.async_writer=torch"])
    base = ["checkpoint.async_save=true", f"checkpoint.save_dir={tmp_path / 'save'}", "data.data_path=[corpus]"]
    check_support(load_run_config(None, base))
    with pytest.raises(ValueError, match="needs a GPU"):
        check_support(load_run_config(None, [*base, "checkpoint.async_writer=nvrx"]))


def test_one_line_says_which_and_megatrons_deprecation_is_filtered(caplog):
    run_async_strategy.cache_clear()
    megatron_logger = logging.getLogger(MEGATRON_LOGGER)
    before = list(megatron_logger.filters)
    try:
        with caplog.at_level(logging.WARNING):
            assert run_async_strategy("mcore").name == "mcore" and run_async_strategy("mcore").name == "mcore"
            megatron_logger.warning(MCORE_DEPRECATION + " and will be removed in the future releases.")
            megatron_logger.warning("another megatron warning")
        ours = [r for r in caplog.records if r.name == async_strategy.__name__]
        assert [r.getMessage() for r in ours] == [
            "async checkpoint saves: megatron-core's writer (checkpoint.async_writer=mcore)"]
        assert MCORE_DEPRECATION not in caplog.text and "another megatron warning" in caplog.text
    finally:
        megatron_logger.filters[:] = before
        run_async_strategy.cache_clear()
