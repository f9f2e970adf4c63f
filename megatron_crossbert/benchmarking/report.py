"""Markdown tables and JSON files for benchmark reports (no torch import: usable by plotting code)."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any

from megatron_crossbert.fsutil import atomic_write_text
from megatron_crossbert.results_page.blocks import Block, Column, Paragraph, Table, measured
from megatron_crossbert.results_page.render import markdown_table as render_table
from megatron_crossbert.results_page.render import render_blocks


def fmt(value: Any, digits: int = 2, scale: float = 1.0, suffix: str = "") -> str:
    """A table cell: numbers rounded, missing values as an em dash."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if isinstance(value, (int, float)):
        return f"{value * scale:,.{digits}f}{suffix}"
    return str(value)


def markdown_table(headers: list[str], rows: list[list[Any]]) -> str:
    """Console and report tables: the results page's renderer (``results_page.render``), so a table prints the
    same here and on the page."""
    return render_table(headers, rows)


def _col(name: str, digits: int, scale: float = 1.0, suffix: str = "") -> Column:
    """A numeric column shown as :func:`fmt` shows a number."""
    return Column(name, format=f",.{digits}f", scale=scale, suffix=suffix)


THROUGHPUT_COLUMNS = [
    Column("model"), Column("encoder"), _col("step CPU ms", 0, 1e3), _col("step wall ms", 0, 1e3),
    _col("samples/s", 2), _col("× sparse MLM", 2, suffix="x"), _col("× sparse MLM (FLOPs)", 2, suffix="x"),
    _col("× dense MLM", 2, suffix="x"), _col("input tok/s", 0), _col("supervised tok/s", 0),
    _col("× sparse MLM (supervised)", 2, suffix="x"), _col("step peak mem MB", 0, 1 / 2**20), _col("params M", 2, 1e-6),
    _col("GFLOP/sample", 2, 1e-9), _col("TFLOP/s", 3), _col("MFU", 1, 100, "%")]
"""The throughput table's columns: each cell holds the measured value (seconds, bytes, a fraction)."""
THROUGHPUT_HEADERS = [column.name for column in THROUGHPUT_COLUMNS]


def _median(values: list[float] | None) -> float | None:
    return statistics.median(values) if values else None


def throughput_rows(results: list[dict]) -> list[list[Any]]:
    """One row per model: the measurements themselves (``THROUGHPUT_COLUMNS`` says how each is shown)."""
    keys = ["samples_per_s", "samples_per_s_vs_ref", "predicted_samples_per_s_vs_ref", "samples_per_s_vs_dense",
            "input_tokens_per_s", "supervised_tokens_per_s", "supervised_tokens_per_s_vs_ref", "peak_step_bytes",
            "num_parameters", "model_flops_per_sample", "achieved_tflops", "mfu"]
    return [[r["name"], r.get("encoder", "classic"), _median(r.get("cpu_step_s")), _median(r.get("wall_step_s")),
             *[measured(r.get(key)) for key in keys]] for r in results]


def throughput_blocks(report: dict) -> list[Block]:
    """The facts needed to read the table (shape, device, methods), the table, then how it was measured."""
    meta = report["meta"]
    shape = meta["shape"]
    header = (f"Throughput on {meta['device']} ({meta['device_name']}, {meta['torch_threads']} torch threads, "
              f"clock: {meta.get('clock', 'wall')}), "
              f"precision {meta['options']['precision']}; encoder h={shape['hidden_size']}, "
              f"layers={shape['num_layers']}, heads={shape['num_attention_heads']}, L={shape['seq_length']}, "
              f"vocab={shape['vocab_size']}, micro-batch={shape['micro_batch_size']}, CrossBERT decoder "
              f"layers={shape['decoder_num_layers']}; {meta['options']['steps']} timed rounds after "
              f"{meta['options']['warmup']} warm-up rounds.")
    notes = (f"× sparse MLM: samples/s ratio to the family's MLM baseline with sparse prediction, the head on "
             f"the masked positions only (classic: bert = megatron-core BertModel, modern: mlm-modern); (FLOPs): "
             f"the ratio model FLOPs per sample predict; × dense MLM: to the same baseline with the dense head on "
             f"all L positions (Megatron-LM's BERT; bert dense, mlm-modern dense). The ratios are measured "
             f"against the clock named above; both clocks' medians are shown. Decoder rows: 'dec h/2' = decoder "
             f"width h/2 (heads halved), '1L' = 1 decoder layer.\nTiming: {meta['timing']}.\n"
             f"Memory: {meta['memory_method']}.\nData: {meta['data']}.")
    return [Paragraph(header), Table(THROUGHPUT_COLUMNS, throughput_rows(report["results"])), Paragraph(notes)]


def throughput_markdown(report: dict) -> str:
    """The stdout table of ``crossbert-bench throughput`` (the page shows the same blocks)."""
    return render_blocks(throughput_blocks(report))


def write_json(path: str | Path, payload: dict) -> Path:
    """Atomically (a reader, or a run killed mid-write, sees the old file or the new one, never half of one):
    benchmarks rewrite their JSON after every row they measure."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(payload, indent=2, sort_keys=False, default=str) + "\n")
    return path


CHECKPOINT_HEADERS = ["size", "params M", "state", "mode", "optimizer format", "MB on disk", "save s",
                      "blocking s", "save MB/s", "save CPU s", "record s", "load s", "load MB/s", "load CPU s",
                      "verify s"]


def _share(part: float | None, whole: float | None) -> str:
    """``part`` seconds and its share of ``whole``, e.g. '0.05 (2%)'."""
    if part is None or not whole:
        return "-"
    return f"{fmt(part, 2)} ({100 * part / whole:.0f}%)"


def checkpoint_rows(sizes: list[dict]) -> list[list[str]]:
    rows = []
    for size in sizes:
        for c in size["cases"]:
            blocking = c["blocking_s"] if c["mode"] == "async" else c["save_s"]
            rows.append([size["size"], fmt(size["num_parameters"], 1, 1e-6), c["state"], c["mode"], c["format"],
                         fmt(c["bytes"], 1, 1e-6), fmt(c["save_s"], 2), fmt(blocking, 2), fmt(c["save_MBps"], 0),
                         fmt(c["save_cpu_s"], 2), _share(c.get("record_s"), c["save_s"]), fmt(c["load_s"], 2),
                         fmt(c["load_MBps"], 0), fmt(c["load_cpu_s"], 2), _share(c.get("verify_s"), c["load_s"])])
    return rows


def checkpoint_markdown(report: dict) -> str:
    """The cost table, the growth exponents and how the numbers were taken."""
    meta = report["meta"]
    header = (f"Checkpoint cost on {meta['device']} ({meta['host']}, {meta['torch_threads']} torch threads), "
              f"{meta['layout']}; median of {meta['options']['repeats']} saves and loads per case. "
              "save s = until committed; blocking s = until training may continue (async: the writer "
              "processes keep going); CPU s = this process only (async writers excluded); record s = hashing "
              "every file for checksums.json, part of every save (share of save s); verify s = the checksum check "
              f"inside the load (checkpoint.verify={meta['options'].get('verify', 'full')}; share of load s).")
    growth = [[case, fmt(g.get("save_s"), 2), fmt(g.get("load_s"), 2), fmt(g.get("bytes"), 2)]
              for case, g in report["growth"].items()]
    parts = [header, markdown_table(CHECKPOINT_HEADERS, checkpoint_rows(report["sizes"]))]
    if growth:
        parts += ["Growth with size: exponent k in cost ~ parameters^k, smallest to largest size "
                  "(1 = linear).", markdown_table(["case", "save s", "load s", "bytes"], growth)]
    return "\n\n".join(parts)
