"""The MFU a GPU measured (``crossbert-plan --mfu-from``), read from a device check's or a gpu-check's JSON.

A measurement that cannot be one is refused in one line naming the file, the row and the value, by the same
rule ``--mfu`` states: an MFU is a fraction of the peak in (0, 1]. So every achieved TFLOP/s the plan would
average must be a finite number above 0 and at most the planned device's dense peak (``GpuSpec.peak_tflops``,
or ``--peak-tflops``): no run computes faster than its chip's peak, and a figure above the planned chip's
peak was measured on a faster one. A row without a figure (``null``: no FLOP count) is skipped.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from megatron_crossbert.config import RunConfig
from megatron_crossbert.planning.device import GpuSpec


def read_report(path: str) -> dict:
    """The JSON object in ``path``; ValueError naming the file when it is not JSON or not an object."""
    try:
        payload = json.loads(Path(path).read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"--mfu-from {path}: not a JSON report ({err})") from err
    if not isinstance(payload, dict):
        raise ValueError(f"--mfu-from {path}: expected a JSON object (a device check's or gpu-check's report), "
                         f"got a {type(payload).__name__}")
    return payload


def _field(path: str, where: str, obj: dict, key: str, kind: type, default):
    """``obj[key]`` when it has the JSON type ``kind``, ``default`` when absent; ValueError otherwise."""
    value = obj.get(key, default)
    if not isinstance(value, kind):
        raise ValueError(f"--mfu-from {path}: {where}{key}={value!r} must be a JSON {_JSON_NAMES[kind]}")
    return value


_JSON_NAMES = {dict: "object", list: "list", str: "string"}


def achieved_tflops(path: str, where: str, row: dict, gpu: GpuSpec) -> float | None:
    """One row's achieved TFLOP/s, None when it has none; ValueError when it cannot be a measurement."""
    value = row.get("achieved_tflops")
    if value is None:
        return None
    name = f"{where}achieved_tflops={value!r}"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"--mfu-from {path}: {name} must be a number")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"--mfu-from {path}: {name} must be a finite number > 0, as --mfu must be > 0")
    if value > gpu.peak_tflops:
        raise ValueError(f"--mfu-from {path}: {name} is above the {gpu.name}'s dense peak "
                         f"(--peak-tflops={gpu.peak_tflops:g}): MFU {value / gpu.peak_tflops:.2f} > 1, as --mfu "
                         "must be <= 1 (measured on a faster GPU?)")
    return float(value)


def _runs(path: str, payload: dict) -> list:
    """The gpu-check runs, inside a device check's report or at the top of a gpu-check's."""
    stages = _field(path, "", payload, "stages", dict, {})
    check = _field(path, "stages.", stages, "gpu_check", dict, {})
    report = _field(path, "stages.gpu_check.", check, "result", dict, payload)
    return _field(path, "", report, "runs", list, [])


def rows_by_size(path: str, run_cfg: RunConfig, gpu: GpuSpec) -> dict[str, list[float]]:
    """Achieved TFLOP/s of this run's architecture and family, by measured size (bf16 runs only)."""
    from megatron_crossbert.benchmarking.cases import SIZES

    this_run, by_size = (run_cfg.model.arch, run_cfg.model.encoder), {}
    for i, run in enumerate(_runs(path, read_report(path))):
        if not isinstance(run, dict):
            raise ValueError(f"--mfu-from {path}: runs[{i}]={run!r} must be a JSON object")
        size = run.get("size")
        if "report" not in run or run.get("precision") != "bf16" or not isinstance(size, str) or size not in SIZES:
            continue
        report = _field(path, f"runs[{i}].", run, "report", dict, {})
        for j, row in enumerate(_field(path, f"runs[{i}].report.", report, "results", list, [])):
            where = f"runs[{i}].report.results[{j}]."
            if not isinstance(row, dict):
                raise ValueError(f"--mfu-from {path}: {where[:-1]}={row!r} must be a JSON object")
            if (row.get("arch"), row.get("encoder")) == this_run:
                value = achieved_tflops(path, where, row, gpu)
                if value is not None:
                    by_size.setdefault(size, []).append(value)
    return by_size


def measured_mfu(path: str, run_cfg: RunConfig, gpu: GpuSpec) -> tuple[float, str]:
    """(MFU against ``gpu``'s peak, where it comes from): the bf16 rows of this run's architecture and family at
    the measured shape nearest its width, their mean achieved TFLOP/s over the peak. ValueError naming the
    file when it holds no such row or a row that cannot be a measurement."""
    from megatron_crossbert.benchmarking.cases import SIZES

    model = run_cfg.model
    by_size = rows_by_size(path, run_cfg, gpu)
    if not by_size:
        raise ValueError(f"--mfu-from {path}: no bf16 gpu-check measurement of arch={model.arch} "
                         f"encoder={model.encoder}")
    size = min(by_size, key=lambda name: abs(SIZES[name]["hidden_size"] - model.hidden_size))
    achieved = sum(by_size[size]) / len(by_size[size])
    return achieved / gpu.peak_tflops, f"measured: gpu-check {size}, {achieved:.0f} TFLOP/s, in {path}"
