"""GPU-only checks (skipped without CUDA): real training steps in bf16 and, with Transformer
Engine on Hopper, FP8. They reuse the throughput benchmark's tiny cases, so what runs here is the
same training step that pretraining and ``crossbert-bench gpu-check`` use. Each case runs once:
``auto`` is Transformer Engine where it imports, else the local spec (a second ``local`` run would repeat
the same steps), and without document masks, so SDPA runs and nothing compiles (the compiled flex path
is gpu-check's and the device check's attention stage's).
"""

from __future__ import annotations

import math

import pytest
import torch

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def _te_importable() -> bool:
    try:
        import transformer_engine.pytorch  # noqa: F401
    except Exception:
        return False
    return True


def gpu_options(precision: str, impl: str):
    """The throughput run these tests make (``tests/benchmarking/test_gpu_plan.py`` counts its cases on the CPU)."""
    from megatron_crossbert.benchmarking.throughput import ThroughputOptions

    return ThroughputOptions(size="tiny", precision=precision, transformer_impl=impl, steps=2, warmup=1,
                             document_mask=False)


def _run(precision: str, impl: str) -> dict:
    from megatron_crossbert.benchmarking.throughput import run_throughput

    return run_throughput(gpu_options(precision, impl))


def test_bf16_training_steps_on_gpu():
    from megatron_crossbert.benchmarking.throughput import select_cases

    report = _run("bf16", "auto")
    assert len(report["results"]) == len(select_cases(gpu_options("bf16", "auto")))
    for result in report["results"]:
        assert result["samples_per_s"] > 0 and math.isfinite(result["samples_per_s"])


@pytest.mark.skipif(not _te_importable() or torch.cuda.get_device_capability()[0] < 9,
                    reason="FP8 needs Transformer Engine on Hopper or newer")
def test_fp8_training_steps_with_transformer_engine():
    report = _run("fp8", "transformer_engine")
    assert all(result["samples_per_s"] > 0 for result in report["results"])
