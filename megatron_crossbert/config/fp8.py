"""Transformer Engine's FP8 shape rule, checked where the config is checked (``RunConfig``), before any TE import.

TE's FP8 GEMMs need the rows of every input (tokens x batch) divisible by 8 and every width divisible by 16;
a run that breaks it would fail deep inside TE on the cluster. The rows come from the architecture
(``gemm_rows``: CrossBERT's visible and target tokens of each view, the MLM encoder's sequence), the
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


def gemm_rows(seq_length: int, pipeline_shape: tuple[int, int], views: bool) -> dict[str, int]:
    """Rows of the TE GEMMs of one micro-batch, named by the fields that make them: the encoder over its
    ``pipeline_shape`` (``RunConfig.pipeline_shape``), and with ``views`` CrossBERT's decoder over the masked
    targets and its cross-attention keys over the visible tokens (the MLMs' sparse head is local)."""
    length, rows = pipeline_shape
    if not views:
        return {"encoder rows (data.seq_length x training.micro_batch_size)": length * rows}
    return {"encoder rows (visible tokens x training.micro_batch_size x views)": length * rows,
            "decoder rows (masked targets x training.micro_batch_size x views)": (seq_length - length) * rows,
            "cross-attention key rows (visible tokens x training.micro_batch_size x views)": length * rows}
