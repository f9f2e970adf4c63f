"""The CPU step-memory measurement pins glibc's allocation policy only while it measures: the process that asked
(a test worker, a benchmark with rows still to time) must not go on mmapping and faulting in every block."""

from __future__ import annotations

import ctypes.util
import resource

import pytest
import torch

from megatron_crossbert.benchmarking.memory import measure_step_memory

MIB_FLOATS = 256 * 1024
"""A 1 MiB float32 tensor: 256 pages, well over the pinned threshold and well under glibc's settled one."""


def _faults_of_reallocating(times: int = 100) -> int:
    """Minor page faults of allocating, filling and freeing a 1 MiB tensor ``times`` times."""
    torch.ones(MIB_FLOATS).sum()  # the heap already holds one such block
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(times):
        torch.ones(MIB_FLOATS).sum()
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


@pytest.mark.skipif(ctypes.util.find_library("c") is None, reason="no C library: the measurement pins nothing")
def test_the_cpu_measurement_sees_a_step_and_hands_the_heap_back():
    grown = []
    result = measure_step_memory(lambda: grown.append(torch.ones(8 * MIB_FLOATS).sum()), torch.device("cpu"))
    assert result["peak_step_bytes"] >= 0 and result["peak_rss_bytes"] > 0 and len(grown) == 2
    faults = _faults_of_reallocating()
    assert faults < 100 * 256 // 4, f"{faults} page faults for 100 reuses of a 1 MiB block: the heap stays pinned"
