"""Which writer async saves use (NVRx where it imports on a GPU, else megatron's), said in one line of our log,
and megatron's deprecation warning filtered out instead of repeated."""

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


@pytest.mark.parametrize("cuda,nvrx,expected", [(True, True, "nvrx"), (True, False, "mcore"),
                                                (False, True, "mcore"), (False, False, "mcore")])
def test_nvrx_only_where_it_imports_on_a_gpu(cuda, nvrx, expected):
    strategy = choose_async_strategy(cuda, nvrx)
    assert strategy.name == expected and strategy.why


def test_one_line_says_which_and_megatrons_deprecation_is_filtered(caplog):
    run_async_strategy.cache_clear()
    megatron_logger = logging.getLogger(MEGATRON_LOGGER)
    before = list(megatron_logger.filters)
    try:
        with caplog.at_level(logging.WARNING):
            assert run_async_strategy().name == "mcore" and run_async_strategy().name == "mcore"
            megatron_logger.warning(MCORE_DEPRECATION + " and will be removed in the future releases.")
            megatron_logger.warning("another megatron warning")
        ours = [r for r in caplog.records if r.name == async_strategy.__name__]
        assert [r.getMessage() for r in ours] == [
            "async checkpoint saves: megatron-core's writer (no GPU (nvidia-resiliency-ext is CUDA-only))"]
        assert MCORE_DEPRECATION not in caplog.text and "another megatron warning" in caplog.text
    finally:
        megatron_logger.filters[:] = before
        run_async_strategy.cache_clear()
