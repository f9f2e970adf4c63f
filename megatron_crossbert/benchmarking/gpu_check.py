"""One-shot H200 validation: bf16 (and FP8 when Transformer Engine imports) throughput and MFU.

Designed to finish in well under 5 minutes on one H200: for BERT-base and BERT-large shapes at
L=512 it runs the interleaved throughput benchmark on a subset of its rows (``GpuCheckOptions.only``:
megatron-core BertModel with sparse prediction, the reference, and with the dense head; CrossBERT
r=0.5 single view, r=0.5 complementary, r=0.75, r=0.5 complementary with a decoder at h/2 x 1 layer;
the modern family's sparse MLM baseline and complementary CrossBERT; real training steps), then the
same at FP8 for BERT-base if TE is importable. MFU is model FLOPs per second over the one peak the
trainer uses too (``platform.peak``): the flag, else the 8192^3 bf16 GEMM measured on the spot, so
a slow or throttled device shows; an attention-adjusted MFU (only the query-key pairs the masks allow)
stands beside it. Each measured speed-up over the family's sparse MLM baseline is set beside the one the FLOPs
model predicts (reference FLOPs / own FLOPs per sample), which is the claim under test (1.46x for
r=0.5 single view at BERT-base against sparse BERT).

Without CUDA it writes a JSON saying so and exits 0 (nothing to validate; never a CI failure),
unless ``allow_cpu`` is set: then the same code runs on the CPU (the device check's ``--toy`` run).
"""

from __future__ import annotations

import importlib.util
import time
from dataclasses import dataclass, field

import torch

from megatron_crossbert.benchmarking.choices import GPU_CHECK_PRECISIONS
from megatron_crossbert.platform.peak import Peak, measure_gemm_peak, mfu_peak
from megatron_crossbert.results_page.blocks import Column, Table, measured
from megatron_crossbert.results_page.render import render_blocks
from megatron_crossbert.benchmarking.report import fmt, throughput_markdown, write_json
from megatron_crossbert.benchmarking.throughput import ThroughputOptions, run_throughput

GPU_CHECK_ROWS = ("bert dense", "crossbert r=0.5 single", "crossbert r=0.5 compl", "crossbert r=0.75 compl",
                  "crossbert r=0.5 compl dec h/2x1L", "crossbert-modern r=0.5 compl")
"""The throughput rows the check times besides the references: 8 models, so BERT-large's fit in memory
and time (the full table has 14)."""


@dataclass
class GpuCheckOptions:
    """What the GPU check runs; defaults are the H200 validation."""

    peak_tflops: float | None = None
    """Dense peak TFLOP/s that MFU is quoted against; None: the GEMM measured now (``platform.peak``)."""
    sizes: list[str] = field(default_factory=lambda: ["base", "large"])
    """Throughput-benchmark shapes (``cases.SIZES``) to run, in order."""
    steps: int = 8
    """Timed interleaved rounds per shape."""
    warmup: int = 3
    """Untimed rounds first (allocator, autotuning)."""
    precision: str = "bf16"
    """Precision of the main runs (fp32 only for the CPU dry run)."""
    gemm_size: int = 8192
    """Side of the square GEMM whose speed is re-measured as the peak."""
    allow_cpu: bool = False
    """Run on the CPU when CUDA is absent (dry run) instead of writing a 'skipped' JSON."""
    out: str = "benchmarks/out/gpu_check.json"
    """JSON report path."""
    only: list[str] = field(default_factory=lambda: list(GPU_CHECK_ROWS))
    """Throughput rows to time (``cases.SETTINGS`` names; each family's sparse MLM baseline always runs)."""

    def __post_init__(self) -> None:
        if (self.peak_tflops is not None and self.peak_tflops <= 0) or self.steps < 1 or self.warmup < 0 or self.gemm_size < 1:
            raise ValueError("GpuCheckOptions: peak_tflops, steps and gemm_size must be positive, warmup >= 0")
        if self.precision not in GPU_CHECK_PRECISIONS:
            raise ValueError(f"GpuCheckOptions.precision must be one of {', '.join(GPU_CHECK_PRECISIONS)}, "
                             f"got {self.precision!r}")
        if not self.sizes:
            raise ValueError("GpuCheckOptions.sizes must name at least one shape")


def transformer_engine_status() -> tuple[bool, str]:
    """(usable, why): TE must import cleanly (a half-installed TE raises at import)."""
    if importlib.util.find_spec("transformer_engine") is None:
        return False, "transformer_engine is not installed: FP8 path NOT measured"
    try:
        import transformer_engine.pytorch  # noqa: F401
    except Exception as err:  # any import failure means no FP8 path; say exactly why
        return False, f"transformer_engine failed to import ({type(err).__name__}: {err}): FP8 path NOT measured"
    return True, "transformer_engine imported"


def add_predicted_ratios(report: dict) -> dict:
    """Per model: measured over FLOP-predicted speed-up against its family's sparse MLM baseline (both
    from the throughput report, ``throughput._add_ratios``); returns ``report``."""
    for result in report["results"]:
        predicted, measured = result.get("predicted_samples_per_s_vs_ref"), result.get("samples_per_s_vs_ref")
        result["measured_over_predicted"] = measured / predicted if predicted and measured else None
    return report


RATIO_COLUMNS = [
    Column("shape"), Column("model"), Column("samples/s", format=",.1f"),
    Column("MFU", format=",.1f", scale=100, suffix="%"), Column("MFU attention-adjusted", format=",.1f", scale=100, suffix="%"),
    Column("× sparse MLM measured", format=",.2f", suffix="x"), Column("× sparse MLM FLOP-predicted", format=",.2f", suffix="x"),
    Column("measured / predicted", format=",.2f"), Column("× dense MLM measured", format=",.2f", suffix="x")]
"""The throughput-claim table's columns (cells hold the measured values)."""
RATIO_HEADERS = [column.name for column in RATIO_COLUMNS]
_RATIO_KEYS = ("samples_per_s", "mfu", "mfu_attention_adjusted", "samples_per_s_vs_ref",
               "predicted_samples_per_s_vs_ref", "measured_over_predicted", "samples_per_s_vs_dense")


def ratio_rows(payload: dict) -> list[list]:
    """One row per (shape, model) of a gpu-check payload: the throughput-claim table."""
    rows = []
    for run in payload.get("runs", []):
        label = f"{run['size']} {run['precision']}"
        if run.get("partial"):
            label += f" (stopped after {run['report']['meta']['rounds_timed']} rounds)"
        if "error" in run:
            rows.append([label, f"FAILED: {run['error']}", *[None] * (len(RATIO_COLUMNS) - 2)])
            continue
        rows += [[label, r["name"], *[measured(r.get(key)) for key in _RATIO_KEYS]] for r in run["report"]["results"]]
    return rows


def ratio_table(payload: dict) -> Table:
    return Table(RATIO_COLUMNS, ratio_rows(payload))


def ratio_markdown(payload: dict) -> str:
    return render_blocks([ratio_table(payload)])


def _one(options: GpuCheckOptions, size: str, precision: str, impl: str, peak_tflops: float, on_rows) -> dict:
    throughput = ThroughputOptions(size=size, precision=precision, transformer_impl=impl,
                                   peak_tflops=peak_tflops, steps=options.steps, warmup=options.warmup,
                                   clock="wall", only=list(options.only))
    start = time.time()
    report = add_predicted_ratios(run_throughput(throughput,
                                                 on_rows=lambda partial: on_rows(add_predicted_ratios(partial))))
    report["meta"]["wall_s"] = round(time.time() - start, 1)
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return report


def round_line(size: str, precision: str, report: dict) -> str:
    """One printed line per timed round: every model's samples/s and MFU so far."""
    cells = [f"{r['name']}: {fmt(r['samples_per_s'], 1)}/s MFU {fmt(r.get('mfu'), 1, 100, '%')}"
             for r in report["results"]]
    return f"[gpu_check] {size} {precision} round {report['meta']['rounds_timed']}: " + "; ".join(cells)


def _keep_rows(options: GpuCheckOptions, payload: dict, size: str, precision: str):
    """``run_throughput``'s per-round callback: the JSON rewritten with this run's rows so far, and one line."""
    def keep(report: dict) -> None:
        print(round_line(size, precision, report), flush=True)
        run = {"size": size, "precision": precision, "report": report, "partial": True}
        write_json(options.out, {**payload, "runs": [*payload["runs"], run]})
    return keep


def _runs(options: GpuCheckOptions, te_ok: bool) -> list[tuple[str, str, str]]:
    """(size, precision, transformer_impl) to run, main precision first; FP8 (TE) on the first size only."""
    runs = [(size, options.precision, "auto") for size in options.sizes]
    if te_ok:
        runs.append((options.sizes[0], "fp8", "transformer_engine"))
    return runs


def _device_name() -> str:
    return torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"


def _header(options: GpuCheckOptions) -> dict:
    te_ok, te_note = transformer_engine_status()
    gemm = measure_gemm_peak(options.gemm_size)
    peak = mfu_peak(options.peak_tflops) if options.peak_tflops else Peak(gemm, f"{options.gemm_size}^3 GEMM "
                                                                                 "measured now")
    payload = {"status": "ok", "device": _device_name(), "peak_tflops_used": peak.tflops, "peak_source": peak.source,
               "gemm_tflops_measured_now": gemm, "gemm_size": options.gemm_size, "transformer_engine": te_note,
               "fp8_measured": te_ok, "runs": []}
    print(f"device {payload['device']}; GEMM now {gemm:.1f} TFLOP/s; MFU against {peak.tflops:.1f} TFLOP/s "
          f"({peak.source}); {te_note}", flush=True)
    return payload


def run_gpu_check(options: GpuCheckOptions | None = None) -> int:
    """Run every configured check, print tables and write one JSON, rewritten (atomically) after every timed
    round so that a check stopped or killed keeps every row measured before; returns the exit code."""
    options = options or GpuCheckOptions()
    if not torch.cuda.is_available() and not options.allow_cpu:
        message = "CUDA is not available on this machine: gpu_check measured nothing (run it on the H200)."
        write_json(options.out, {"status": "skipped", "reason": message})
        print(message)
        return 0
    payload = _header(options)
    write_json(options.out, payload)
    for size, precision, impl in _runs(options, payload["fp8_measured"]):
        try:
            report = _one(options, size, precision, impl, payload["peak_tflops_used"],
                          _keep_rows(options, payload, size, precision))
        except Exception as err:  # keep the other checks' results; report this one's failure
            payload["runs"].append({"size": size, "precision": precision, "error": f"{type(err).__name__}: {err}"})
            print(f"\n### {size} {precision}: FAILED: {err}", flush=True)
        else:
            payload["runs"].append({"size": size, "precision": precision, "report": report})
            print(f"\n### {size} {precision} ({impl})\n\n{throughput_markdown(report)}", flush=True)
        write_json(options.out, payload)
    print(f"\n### Measured against FLOP-predicted speed-ups\n\n{ratio_markdown(payload)}\n\nJSON written to {options.out}")
    return 0 if all("error" not in r for r in payload["runs"]) else 1
