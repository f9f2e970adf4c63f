"""One-shot H200 validation: bf16 (and FP8 when Transformer Engine imports) throughput and MFU.

Designed to finish in well under 8 minutes on one H200: for BERT-base and BERT-large shapes at
L=512 it runs the interleaved throughput benchmark (BERT + three CrossBERT settings, real training
steps), then the same at FP8 for BERT-base if TE is importable. MFU is model FLOPs per second over
the bf16 dense peak: by default the 790 TFLOP/s measured on an H200 for an 8192^3 bf16 GEMM; the
script also re-measures that GEMM on the spot and reports it, so a slow or throttled device shows.
Without CUDA it writes a JSON saying so and exits 0 (nothing to validate; never a CI failure).
"""

from __future__ import annotations

import importlib.util
import time

import torch

from megatron_crossbert.benchmarking.report import throughput_markdown, write_json
from megatron_crossbert.benchmarking.throughput import ThroughputOptions, run_throughput


def measure_gemm_peak(size: int = 8192, iters: int = 20) -> float:
    """bf16 dense GEMM TFLOP/s on the current GPU (best of a short timed loop after warm-up)."""
    a = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(iters):
        a @ b
    torch.cuda.synchronize()
    return 2.0 * size**3 * iters / (time.perf_counter() - start) / 1e12


def transformer_engine_status() -> tuple[bool, str]:
    """(usable, why): TE must import cleanly (a half-installed TE raises at import)."""
    if importlib.util.find_spec("transformer_engine") is None:
        return False, "transformer_engine is not installed: FP8 path NOT measured"
    try:
        import transformer_engine.pytorch  # noqa: F401
    except Exception as err:  # any import failure means no FP8 path; say exactly why
        return False, f"transformer_engine failed to import ({type(err).__name__}: {err}): FP8 path NOT measured"
    return True, "transformer_engine imported"


def _one(size: str, precision: str, impl: str, peak: float, steps: int, warmup: int) -> dict:
    options = ThroughputOptions(size=size, precision=precision, transformer_impl=impl, peak_tflops=peak,
                                steps=steps, warmup=warmup)
    start = time.time()
    report = run_throughput(options)
    report["meta"]["wall_s"] = round(time.time() - start, 1)
    torch.cuda.empty_cache()
    return report


def _runs(sizes: list[str], te_ok: bool) -> list[tuple[str, str, str]]:
    """(size, precision, transformer_impl) to run, bf16 first; FP8 (TE) on the first size only."""
    runs = [(size, "bf16", "auto") for size in sizes]
    if te_ok and sizes:
        runs.append((sizes[0], "fp8", "transformer_engine"))
    return runs


def run_gpu_check(peak_tflops: float = 790.0, sizes: list[str] | None = None, steps: int = 8,
                  warmup: int = 3, out: str = "benchmarks/out/gpu_check.json") -> int:
    """Run every configured check, print tables and write one JSON; returns the exit code."""
    sizes = sizes or ["base", "large"]
    if not torch.cuda.is_available():
        message = "CUDA is not available on this machine: gpu_check measured nothing (run it on the H200)."
        write_json(out, {"status": "skipped", "reason": message})
        print(message)
        return 0
    te_ok, te_note = transformer_engine_status()
    payload = {"status": "ok", "device": torch.cuda.get_device_name(), "peak_tflops_used": peak_tflops,
               "gemm_bf16_tflops_measured_now": measure_gemm_peak(), "transformer_engine": te_note, "runs": []}
    print(f"device {payload['device']}; bf16 GEMM now {payload['gemm_bf16_tflops_measured_now']:.0f} TFLOP/s; "
          f"MFU against {peak_tflops} TFLOP/s; {te_note}")
    for size, precision, impl in _runs(sizes, te_ok):
        try:
            report = _one(size, precision, impl, peak_tflops, steps, warmup)
        except Exception as err:  # keep the other checks' results; report this one's failure
            payload["runs"].append({"size": size, "precision": precision, "error": f"{type(err).__name__}: {err}"})
            print(f"\n### {size} {precision}: FAILED: {err}")
            continue
        payload["runs"].append({"size": size, "precision": precision, "report": report})
        print(f"\n### {size} {precision} ({impl})\n\n{throughput_markdown(report)}")
        write_json(out, payload)
    write_json(out, payload)
    print(f"\nJSON written to {out}")
    return 0 if all("error" not in r for r in payload["runs"]) else 1
