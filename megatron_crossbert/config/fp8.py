"""Transformer Engine's FP8 shape rule, checked where the config is checked (``RunConfig``), before any TE import.

TE's FP8 GEMMs need the rows of every input (tokens x batch) divisible by 8 and every width divisible by 16;
a run that breaks it would fail deep inside TE on the cluster. The rows come from the architecture
(``ArchSpec.gemm_rows``: CrossBERT's visible and target tokens of each view, the MLM encoder's sequence), the
widths from the model section; each problem names the config fields that make the shape.
"""

from __future__ import annotations

FP8_ROW_MULTIPLE = 8
"""GEMM rows (tokens x micro-batch) must divide by this..."""
FP8_WIDTH_MULTIPLE = 16
"""...and every width (hidden, FFN, per tensor-parallel rank) by this."""


def fp8_shape_problems(rows: dict[str, int], widths: dict[str, int], tensor_parallel: int = 1) -> list[str]:
    """Every GEMM shape FP8 cannot take, one line each naming its fields (``rows``/``widths``: description or
    field name -> size)."""
    problems = [f"{name} = {count} is not divisible by {FP8_ROW_MULTIPLE}"
                for name, count in rows.items() if count % FP8_ROW_MULTIPLE]
    per_rank = f" / TP {tensor_parallel}" if tensor_parallel > 1 else ""
    problems += [f"{name}={width}{per_rank} is not divisible by {FP8_WIDTH_MULTIPLE}"
                 for name, width in widths.items() if (width // tensor_parallel) % FP8_WIDTH_MULTIPLE]
    return problems
