"""The device check's memory stage: its comparison and table, on the CPU (the GPU run measures CUDA peaks)."""

from __future__ import annotations

from experiments.device_check.memory_stage import compare, memory_rows, predicted_memory
from megatron_crossbert.benchmarking.cases import default_cases


def test_compare_puts_prediction_beside_measurement():
    predicted = {"persistent_bytes": 3 << 20, "step_bytes": 6 << 20, "peak_bytes": 9 << 20, "activation_bytes": 5 << 20}
    row = compare("arm", predicted, {"peak_step_bytes": 4 << 20, "peak_allocated_bytes": 12 << 20, "method": "cuda"})
    assert row["step_ratio"] == 1.5 and row["peak_ratio"] == 0.75
    missing = compare("cpu arm", predicted, {"peak_step_bytes": 2 << 20, "method": "rss"})
    assert missing["peak_ratio"] is None
    table = memory_rows([row, missing]).splitlines()
    assert len(table) == 4 and "| arm | 6.0 | 4.0 | 1.50 | 9.0 | 12.0 | 0.75 |" in table


def test_prediction_of_a_trained_arm_adds_up():
    case = next(case for case in default_cases("claims", "bf16") if case.name == "crossbert r=0.5 compl")
    predicted = predicted_memory(case.run_cfg)
    assert predicted["peak_bytes"] == predicted["persistent_bytes"] + predicted["step_bytes"]
    assert predicted["step_bytes"] > predicted["activation_bytes"] > 0
