"""Stage ``memory``: the planner's predicted memory against ``torch.cuda.max_memory_allocated``.

For arms the device check trains (``ARMS``: throughput-benchmark cases at the claims run's shape, bf16, as
``claims`` trains them) it builds each model exactly as training does,
runs one optimizer step (so Adam's state exists), then measures a second step with
``benchmarking.memory.measure_step_memory``: the allocator's peak, and that peak minus what was allocated just
before the step. Beside them it puts ``crossbert-plan``'s prediction for the same run on one GPU: the
persistent bytes (weights, gradient buffer, optimizer states) and the step's transient (one micro-batch's
saved activations plus backward's extra). ``--toy`` runs it on the CPU at tiny size, where the measurement is
RSS-based and only checks the code path.

The comparison and its table (``compare``, ``memory_rows``) are pure, so the tests check them on the CPU.
"""

from __future__ import annotations

from pathlib import Path

from megatron_crossbert.results_page import Column, Table, render_blocks

from .program import DeviceCheckConfig
from .stage_io import keep_row

DEVICE_SIZE, TOY_SIZE = "claims", "tiny"
"""The shape measured on the device (the claims run's) and in the CPU dry run."""
ARMS = ("bert", "crossbert r=0.5 compl", "crossbert r=0.75 compl dec h/2x1L", "crossbert-modern r=0.5 compl")
"""The throughput cases measured: BERT, complementary CrossBERT, r=0.75 with the narrow decoder, the modern
family; four builds and eight steps fit the stage's 20 s."""


def predicted_memory(run_cfg) -> dict:
    """The planner's bytes for ``run_cfg`` on one GPU: persistent state and one step's transient."""
    from megatron_crossbert.planning.device import GPUS, Cluster
    from megatron_crossbert.planning.layouts import Planner
    from megatron_crossbert.planning.report import config_layout

    planner = Planner(run_cfg, Cluster(GPUS["h200"], gpus_per_node=1, nodes=1))
    plan = planner.price(config_layout(planner))
    return {"persistent_bytes": plan.states[0].total, "step_bytes": plan.stage_activation_bytes[0],
            "peak_bytes": plan.peak_bytes, "activation_bytes": plan.activations.stage_bytes(
                0, 1, run_cfg.model.num_layers)}


def compare(name: str, predicted: dict, measured: dict) -> dict:
    """One row: predicted and measured step and peak bytes, and their ratios (None where not measured)."""
    step, peak = measured.get("peak_step_bytes"), measured.get("peak_allocated_bytes")
    return {"name": name, **predicted, "measured_step_bytes": step, "measured_peak_bytes": peak,
            "step_ratio": predicted["step_bytes"] / step if step else None,
            "peak_ratio": predicted["peak_bytes"] / peak if peak else None, "method": measured.get("method")}


def _mib(name: str) -> Column:
    return Column(name, "right", ",.1f", scale=1 / 2 ** 20)


MEMORY_COLUMNS = [Column("arm"), _mib("predicted step MiB"), _mib("measured step MiB"),
                  Column("predicted / measured", "right", ".2f"), _mib("predicted peak MiB"), _mib("measured peak MiB"),
                  Column("predicted / measured", "right", ".2f")]
"""The comparison's columns: cells hold bytes and ratios, shown in MiB."""


def memory_table(rows: list[dict]) -> Table:
    """The table of ``compare`` rows."""
    keys = ("step_bytes", "measured_step_bytes", "step_ratio", "peak_bytes", "measured_peak_bytes", "peak_ratio")
    return Table(MEMORY_COLUMNS, [[r["name"], *[r[key] for key in keys]] for r in rows])


def memory_rows(rows: list[dict]) -> str:
    """The markdown table of ``compare`` rows (MiB), as the stage prints it."""
    return render_blocks([memory_table(rows)])


def _measure(case) -> dict:
    """Two optimizer steps of ``case``; the second under ``measure_step_memory``."""
    from megatron_crossbert.benchmarking.batches import make_batches
    from megatron_crossbert.benchmarking.memory import measure_step_memory
    from megatron_crossbert.benchmarking.step import build_runner
    from megatron_crossbert.platform.distributed import device

    runner = build_runner(case, device())
    first, second = make_batches(case, 2, device(), seed=0)
    runner.step(first)
    return measure_step_memory(lambda: runner.step(second), device())


def run_memory(config: DeviceCheckConfig) -> dict:
    """Every arm: measured against predicted, each row kept as it is measured; a failing arm is recorded, the
    others still run."""
    from megatron_crossbert.benchmarking.cases import default_cases
    from megatron_crossbert.config import ParallelConfig
    from megatron_crossbert.platform.distributed import initialize

    initialize(ParallelConfig(), 1234)
    precision = "fp32" if config.toy else "bf16"
    work, result = Path(config.work_dir), {"rows": []}
    size = TOY_SIZE if config.toy else DEVICE_SIZE
    for case in (case for case in default_cases(size, precision, "auto") if case.name in ARMS):
        name = f"{size} {case.name}"
        try:
            row = compare(name, predicted_memory(case.run_cfg), _measure(case))
        except Exception as err:  # record and keep going
            row = {"name": name, "error": f"{type(err).__name__}: {err}"}
        keep_row(work, "memory", result, "rows", row)
        _release()
    rows = result["rows"]
    measured = [row for row in rows if "error" not in row]
    print(memory_rows(measured), flush=True)
    return {"rows": rows, "markdown": memory_rows(measured), "ok": len(measured) == len(rows)}


def _release() -> None:
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
