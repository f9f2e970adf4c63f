"""One MFU: the trainer, gpu-check and the throughput benchmark quote MFU against the same peak."""

from __future__ import annotations

import pytest

from megatron_crossbert.platform import peak as peak_module
from megatron_crossbert.platform.peak import Peak, mfu, mfu_peak


def test_the_flag_wins_and_without_a_gpu_or_flag_there_is_no_mfu():
    assert mfu_peak(500.0) == Peak(500.0, "--peak-tflops")
    assert mfu_peak(None).tflops is None  # no CUDA here
    assert mfu(2.5e14, Peak(500.0, "x"), devices=2) == pytest.approx(0.25) and mfu(1.0, Peak(None, "x")) is None


def test_the_measured_gemm_is_the_default_peak_everywhere(monkeypatch):
    monkeypatch.setattr(peak_module.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(peak_module, "measure_gemm_peak", lambda size=8192: 790.0)
    from megatron_crossbert.training.logging import MetricsLogger
    from tests.support.models import tiny_config

    logger = MetricsLogger(tiny_config(), world_size=1, flops_per_sample=1.0, enabled=False)
    assert logger.peak == mfu_peak(None) == Peak(790.0, "bf16 8192^3 GEMM measured now")
    from megatron_crossbert.benchmarking.gpu_check import GpuCheckOptions

    assert GpuCheckOptions().peak_tflops is None  # gpu-check: the same measured GEMM unless flagged
