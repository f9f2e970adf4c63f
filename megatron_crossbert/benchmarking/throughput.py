"""Interleaved training-step throughput: CrossBERT settings against the sparse MLM baseline of their family.

References (``BenchCase.is_reference``): megatron-core's BertModel for the classic encoder, the modern
encoder + MLM head for the modern one, each with sparse prediction (the strongest BERT a user could
run instead); every row's ratios are to its own family's reference. Each row also carries its ratio
to the family's dense-head baseline (Megatron-LM's BERT) and the ratio model FLOPs predict.

Why interleaved: on a shared machine the available compute drifts by tens of percent within a
minute, so timing one model after another would measure the neighbours, not the models. All
models are built in one process, warmed up, then timed round-robin: in every round each model
runs one full training step (forward, backward, grad finalisation, optimizer update), and the
order rotates between rounds. Ratios to the reference are medians of the per-round ratios, so drift that
affects a whole round cancels. Samples/s use the median step time.

Which clock: on a GPU, wall time (with CUDA syncs). On a CPU shared with other jobs, wall time
also counts the time the OS gives to the neighbours (we saw 10-20x inflated steps at load 20 on
2 cores), so the default there is this process's CPU time (``time.process_time``, all threads):
the compute the step actually consumed. Both clocks are always recorded in the JSON.
"""

from __future__ import annotations

import platform as py_platform
import statistics
import time
from dataclasses import asdict, dataclass, field

import torch

from megatron_crossbert.arch import get_arch
from megatron_crossbert.benchmarking.batches import make_batches
from megatron_crossbert.benchmarking.cases import BenchCase, default_cases, size_overrides
from megatron_crossbert.platform.peak import mfu_peak
from megatron_crossbert.benchmarking.choices import CLOCKS
from megatron_crossbert.benchmarking.memory import measure_step_memory, persistent_bytes
from megatron_crossbert.benchmarking.step import StepRunner, build_runner


@dataclass
class ThroughputOptions:
    """What to run; defaults are sized for a 2-core CPU (~2 minutes)."""

    size: str = "cpu"
    warmup: int = 2
    steps: int = 6
    precision: str = "fp32"
    transformer_impl: str = "auto"
    peak_tflops: float | None = None
    """MFU peak per device; None: the GEMM measured now on a GPU, no MFU on the CPU (``platform.peak``)."""
    seq_length: int | None = None
    micro_batch_size: int | None = None
    num_layers: int | None = None
    only: list[str] = field(default_factory=list)
    """Restrict to these case names (each family's sparse MLM baseline is always kept as its reference)."""
    seed: int = 1234
    clock: str = "auto"
    """One of ``choices.CLOCKS``."""
    profile: bool = False
    """Add a per-component time breakdown of one extra step per model (see benchmarking.profile)."""
    attention_backend: str = "auto"
    """``model.attention_backend`` of every model ('megatron': megatron-core's unfused attention)."""
    document_mask: bool = True
    """``data.document_mask``: synthetic samples carry documents and attention stays inside them."""


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def resolve_clock(clock: str, device: torch.device) -> str:
    if clock not in CLOCKS:
        raise ValueError(f"clock must be one of {', '.join(CLOCKS)}, got {clock!r}")
    return ("cpu" if device.type == "cpu" else "wall") if clock == "auto" else clock


def _timed_step(runner: StepRunner, batch: dict, device: torch.device) -> tuple[float, float]:
    """(wall seconds, process CPU seconds) of one training step."""
    _sync(device)
    wall, cpu = time.perf_counter(), time.process_time()
    runner.step(batch)
    _sync(device)
    return time.perf_counter() - wall, time.process_time() - cpu


def select_cases(options: ThroughputOptions) -> list[BenchCase]:
    cases = default_cases(options.size, options.precision, options.transformer_impl,
                          seq_length=options.seq_length, micro_batch_size=options.micro_batch_size,
                          num_layers=options.num_layers, attention_backend=options.attention_backend,
                          document_mask=options.document_mask)
    unknown = sorted(set(options.only) - {c.name for c in cases})
    if unknown:
        raise ValueError(f"unknown throughput case(s) {unknown}; choose from {[c.name for c in cases]}")
    if options.only:
        cases = [c for c in cases if c.is_reference or c.name in options.only]
    return cases


def time_interleaved(runners: list[StepRunner], batches: dict[str, list], warmup: int, steps: int,
                     device: torch.device, on_round=None) -> dict[str, dict[str, list[float]]]:
    """Warm every model up, then time ``steps`` rounds, rotating the order each round; ``on_round(times)`` after
    every timed round (a caller keeps the rows measured so far). Each model's warm-up step times are kept under
    ``"warmup_wall"``: the first one holds its compiles (``compile_seconds``)."""
    times = {r.case.name: {"wall": [], "cpu": [], "warmup_wall": []} for r in runners}
    for round_index in range(warmup):
        for runner in runners:
            wall, _ = _timed_step(runner, batches[runner.case.name][round_index % len(batches[runner.case.name])],
                                  device)
            times[runner.case.name]["warmup_wall"].append(wall)
    for round_index in range(steps):
        shift = round_index % len(runners)
        for runner in runners[shift:] + runners[:shift]:
            pool = batches[runner.case.name]
            wall, cpu = _timed_step(runner, pool[round_index % len(pool)], device)
            times[runner.case.name]["wall"].append(wall)
            times[runner.case.name]["cpu"].append(cpu)
        if on_round is not None:
            on_round(times)
    return times


def compile_seconds(times: dict[str, dict[str, list[float]]]) -> float:
    """Seconds the first warm-up round spent beyond a timed step, summed over the models: their compiles (flex
    kernels, block masks) and first-call set-up; 0 without a warm-up round."""
    return sum(max(0.0, clocks["warmup_wall"][0] - statistics.median(clocks["wall"]))
               for clocks in times.values() if clocks["warmup_wall"] and clocks["wall"])


def _flops_per_sample(case: BenchCase) -> float | None:
    from megatron_crossbert.models import model_flops_per_sample

    try:
        return float(model_flops_per_sample(case.run_cfg))
    except NotImplementedError:
        return None


def _masking_fields(case: BenchCase) -> dict:
    """mask_ratio, views and decoder shape where the architecture draws views; MLM rows have one unmasked
    view and say whether their head is sparse."""
    masking, model = case.run_cfg.masking, case.run_cfg.model
    if get_arch(case.arch).uses_views:
        return {"mask_ratio": masking.mask_ratio, "views": masking.num_views,
                "decoder_hidden_size": model.dec_hidden, "decoder_num_layers": model.decoder_num_layers}
    return {"mask_ratio": None, "views": 1, "sparse_prediction": model.sparse_prediction}


def adjusted_flops_per_sample(case: BenchCase, batches: list[dict]) -> float | None:
    """The attention-adjusted count (``models.attention_flops``), averaged over the timed batches' samples."""
    from megatron_crossbert.models.attention_flops import attention_adjusted_flops_per_sample, document_lengths

    if _flops_per_sample(case) is None or not case.run_cfg.data.document_mask:
        return _flops_per_sample(case)
    rows = [row for batch in batches for row in batch["segments"].cpu().numpy()]
    return sum(attention_adjusted_flops_per_sample(case.run_cfg, document_lengths(row)) for row in rows) / len(rows)


def _case_metrics(case: BenchCase, clocks: dict[str, list[float]], clock: str, peak_tflops: float | None,
                  adjusted_flops: float | None = None) -> dict:
    step_times = clocks[clock]
    median = statistics.median(step_times)
    samples_s = case.micro_batch_size / median
    flops = _flops_per_sample(case)
    achieved = flops * samples_s / 1e12 if flops else None
    adjusted = adjusted_flops * samples_s / 1e12 if adjusted_flops else None
    return {
        "name": case.name, "arch": case.arch, "encoder": case.encoder, "is_reference": case.is_reference,
        **_masking_fields(case),
        "step_time_s": {"clock": clock, "median": median, "min": min(step_times), "all": list(step_times)},
        "wall_step_s": list(clocks["wall"]), "cpu_step_s": list(clocks["cpu"]),
        "wall_step_median_s": statistics.median(clocks["wall"]), "cpu_step_median_s": statistics.median(clocks["cpu"]),
        "samples_per_s": samples_s,
        "input_tokens_per_s": samples_s * case.input_tokens_per_sample(),
        "supervised_tokens_per_sample": case.supervised_tokens_per_sample(),
        "supervised_tokens_per_s": samples_s * case.supervised_tokens_per_sample(),
        "model_flops_per_sample": flops,
        "achieved_tflops": achieved,
        "mfu": achieved / peak_tflops if achieved and peak_tflops else None,
        "model_flops_per_sample_attention_adjusted": adjusted_flops,
        "mfu_attention_adjusted": adjusted / peak_tflops if adjusted and peak_tflops else None,
    }


def _round_ratios(times: dict[str, dict[str, list[float]]], clock: str, own: str, reference: str) -> list[float]:
    """Per-round samples/s ratios of ``own`` to ``reference`` (same round, so shared drift cancels)."""
    return [b / o for b, o in zip(times[reference][clock], times[own][clock])]


def _add_ratios(results: list[dict], cases: list[BenchCase], times: dict[str, dict[str, list[float]]],
                clock: str) -> None:
    """Each row against its family's sparse MLM baseline (measured: median of per-round ratios; and as
    model FLOPs predict), and against the family's dense-head baseline when it ran."""
    refs = {c.encoder: c.name for c in cases if c.is_reference}
    dense = {c.encoder: c.name for c in cases if c.is_mlm and not c.is_reference}
    by_name = {r["name"]: r for r in results}
    for result in results:
        ref = by_name.get(refs.get(result["encoder"]))
        if ref is None:
            continue
        rounds = _round_ratios(times, clock, result["name"], ref["name"])
        result["reference"] = ref["name"]
        result["samples_per_s_vs_ref"] = statistics.median(rounds)
        result["supervised_tokens_per_s_vs_ref"] = (result["samples_per_s_vs_ref"]
                                                    * result["supervised_tokens_per_sample"]
                                                    / ref["supervised_tokens_per_sample"])
        result["samples_per_s_vs_ref_per_round"] = rounds
        own_flops, ref_flops = result["model_flops_per_sample"], ref["model_flops_per_sample"]
        result["predicted_samples_per_s_vs_ref"] = ref_flops / own_flops if own_flops and ref_flops else None
        if result["encoder"] in dense:
            result["dense_reference"] = dense[result["encoder"]]
            result["samples_per_s_vs_dense"] = statistics.median(
                _round_ratios(times, clock, result["name"], dense[result["encoder"]]))


def _meta(options: ThroughputOptions, device: torch.device, memory_method: str, clock: str) -> dict:
    return {
        "benchmark": "throughput", "options": asdict(options), "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else py_platform.processor() or "cpu",
        "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
        "shape": size_overrides(options.size, seq_length=options.seq_length,
                                micro_batch_size=options.micro_batch_size, num_layers=options.num_layers),
        "clock": clock,
        "timing": "round-robin interleaved full training steps (fwd+bwd+optimizer), median step time by the "
                  + ("process CPU-time clock (robust to other jobs on a shared CPU)" if clock == "cpu"
                     else "wall clock") + "; ratios = median of per-round ratios to the row's reference "
                  "(the sparse-prediction MLM baseline of its encoder family; 'x dense' to the dense-head one)",
        "memory_method": memory_method,
        "data": "synthetic random tokens, masks from megatron_crossbert.masking, pre-built before timing",
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def _results(runners: list[StepRunner], cases: list[BenchCase], times: dict, clock: str, peak: float | None,
             adjusted: dict[str, float | None]) -> list[dict]:
    """Every model's metrics and ratios from the rounds timed so far."""
    results = [_case_metrics(r.case, times[r.case.name], clock, peak, adjusted[r.case.name]) for r in runners]
    _add_ratios(results, cases, times, clock)
    return results


def run_throughput(options: ThroughputOptions, on_rows=None) -> dict:
    """Build every model, time them interleaved, measure memory; returns the JSON-ready report.
    ``on_rows(report)`` gets the report of the rounds timed so far after every round (no memory yet), so a
    caller keeps the rows as they are measured."""
    from megatron_crossbert.config import ParallelConfig
    from megatron_crossbert.platform.distributed import device as current_device, initialize

    initialize(ParallelConfig(), options.seed)
    device = current_device()
    peak = mfu_peak(options.peak_tflops).tflops  # the flag, else the GEMM measured on this GPU
    cases = select_cases(options)
    runners = [build_runner(case, device) for case in cases]
    batches = {c.name: make_batches(c, 2, device, seed=options.seed) for c in cases}
    adjusted = {c.name: adjusted_flops_per_sample(c, batches[c.name]) for c in cases}
    clock = resolve_clock(options.clock, device)

    def rows_so_far(times):
        report = {"meta": _meta(options, device, "", clock), "results": _results(runners, cases, times, clock,
                                                                                peak, adjusted)}
        report["meta"].update(rounds_timed=len(next(iter(times.values()))["wall"]), compile_s=compile_seconds(times))
        on_rows(report)

    times = time_interleaved(runners, batches, options.warmup, options.steps, device,
                             rows_so_far if on_rows else None)
    results, memory_method = _results(runners, cases, times, clock, peak, adjusted), ""
    for runner, metrics in zip(runners, results):
        memory = measure_step_memory(lambda: runner.step(batches[runner.case.name][0]), device)
        memory_method = memory.pop("method")
        metrics.update(memory, **persistent_bytes(runner.unwrapped, options.precision))
    report = {"meta": _meta(options, device, memory_method, clock), "results": results}
    report["meta"].update(rounds_timed=options.steps, compile_s=compile_seconds(times))
    if options.profile:
        from megatron_crossbert.benchmarking.profile import profile_step

        report["profile"] = {r.case.name: profile_step(r, batches[r.case.name][0], clock=clock) for r in runners}
    return report
