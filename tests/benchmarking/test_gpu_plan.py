"""What the GPU-only tests expect, counted on the CPU: the smoke stage of the device check runs
``test_gpu.py``, so an expectation that does not match what ``run_throughput`` builds fails for certain there."""

from __future__ import annotations

import pytest

import torch

from megatron_crossbert.arch import REGISTRY
from megatron_crossbert.benchmarking.cases import default_cases
from megatron_crossbert.benchmarking.throughput import select_cases
from megatron_crossbert.models.attention_setup import attention_backend
from tests.benchmarking.test_gpu import gpu_options


def test_gpu_test_expects_the_cases_run_throughput_builds():
    options = gpu_options("bf16", "auto")
    cases = select_cases(options)  # what run_throughput times, one result each
    assert [c.name for c in cases] == [c.name for c in default_cases("tiny", "bf16", "auto")]
    assert len({c.name for c in cases}) == len(cases) > 4  # the old hard-coded 4 undercounted
    pairs = {(spec.name, encoder) for spec in REGISTRY.values() for encoder in spec.encoders}
    assert pairs <= {(c.arch, c.encoder) for c in cases}  # every architecture trains in the smoke stage


def test_the_gpu_tests_run_sdpa_and_compile_nothing(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # what the backend resolves to on a GPU
    cases = select_cases(gpu_options("bf16", "auto"))
    assert {attention_backend(case.run_cfg, training=True)[0] for case in cases} == {"sdpa"}
