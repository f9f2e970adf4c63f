"""The one peak every MFU is quoted against: the trainer's, gpu-check's and the device check's.

A flag (``--peak-tflops``, ``training.peak_tflops``) wins; else, on a GPU, the dense bf16 GEMM rate measured
now on this device (an 8192^3 product, after a warm-up): what the chip really sustains, so a throttled or
slower part shows up as itself rather than as low MFU. A datasheet figure (989 TFLOP/s for an H100/H200) would
make MFU 1.25x lower than the same run quoted against the measured 790. Without a GPU there is no MFU.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

GEMM_SIZE = 8192
"""Side of the square GEMM measured as the peak."""


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def measure_gemm_peak(size: int = GEMM_SIZE, iters: int = 20) -> float:
    """Dense GEMM TFLOP/s now (bf16 on the GPU, fp32 on the CPU), after a short warm-up."""
    device, dtype = ("cuda", torch.bfloat16) if torch.cuda.is_available() else ("cpu", torch.float32)
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    _sync()
    start = time.perf_counter()
    for _ in range(iters):
        a @ b
    _sync()
    return 2.0 * size**3 * iters / (time.perf_counter() - start) / 1e12


@dataclass(frozen=True)
class Peak:
    """The MFU denominator per device and where it came from."""

    tflops: float | None
    """Per-device dense TFLOP/s; None: no MFU."""
    source: str
    """For the log line and the report."""


def mfu_peak(configured: float | None, *, measure_on_cpu: bool = False, size: int = GEMM_SIZE) -> Peak:
    """The peak: ``configured`` if set, else the GEMM measured now on the GPU (on the CPU only when asked:
    the dry runs), else none."""
    if configured:
        return Peak(configured, "--peak-tflops")
    if torch.cuda.is_available() or measure_on_cpu:
        rate = measure_gemm_peak(size)
        return Peak(rate, f"{'bf16' if torch.cuda.is_available() else 'fp32'} {size}^3 GEMM measured now")
    return Peak(None, "no GPU and no --peak-tflops: MFU not reported")


def mfu(flops_per_s: float | None, peak: Peak, devices: int = 1) -> float | None:
    """Achieved FLOP/s over ``devices`` times the peak."""
    if not flops_per_s or not peak.tflops:
        return None
    return flops_per_s / (peak.tflops * 1e12 * devices)
