"""What the GPU-only tests expect, counted on the CPU: the smoke stage of the device check runs
``test_gpu.py``, so an expectation that does not match what ``run_throughput`` builds fails for certain there."""

from __future__ import annotations

import pytest

from megatron_crossbert.arch import REGISTRY
from megatron_crossbert.benchmarking.cases import default_cases
from megatron_crossbert.benchmarking.throughput import select_cases
from tests.benchmarking.test_gpu import gpu_options


@pytest.mark.parametrize("impl", ["local", "auto"])
def test_gpu_test_expects_the_cases_run_throughput_builds(impl):
    options = gpu_options("bf16", impl)
    cases = select_cases(options)  # what run_throughput times, one result each
    assert [c.name for c in cases] == [c.name for c in default_cases("tiny", "bf16", impl)]
    assert len({c.name for c in cases}) == len(cases) > 4  # the old hard-coded 4 undercounted
    pairs = {(spec.name, encoder) for spec in REGISTRY.values() for encoder in spec.encoders}
    assert pairs <= {(c.arch, c.encoder) for c in cases}  # every architecture trains in the smoke stage
