"""Markdown tables and JSON files for benchmark reports (no torch import: usable by plotting code)."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any

from megatron_crossbert.fsutil import atomic_write_text


def fmt(value: Any, digits: int = 2, scale: float = 1.0, suffix: str = "") -> str:
    """A table cell: numbers rounded, missing values as an em dash."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if isinstance(value, (int, float)):
        return f"{value * scale:,.{digits}f}{suffix}"
    return str(value)


def markdown_table(headers: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(" --- " for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


THROUGHPUT_HEADERS = ["model", "encoder", "step CPU ms", "step wall ms", "samples/s", "× sparse MLM",
                      "× sparse MLM (FLOPs)", "× dense MLM", "input tok/s", "supervised tok/s",
                      "× sparse MLM (supervised)", "step peak mem MB", "params M", "GFLOP/sample", "TFLOP/s", "MFU"]


def _median_ms(values: list[float] | None) -> str:
    return fmt(statistics.median(values) * 1e3 if values else None, 0)


def throughput_rows(results: list[dict]) -> list[list[str]]:
    rows = []
    for r in results:
        rows.append([
            r["name"], r.get("encoder", "classic"), _median_ms(r.get("cpu_step_s")), _median_ms(r.get("wall_step_s")),
            fmt(r["samples_per_s"]), fmt(r.get("samples_per_s_vs_ref"), 2, suffix="x"),
            fmt(r.get("predicted_samples_per_s_vs_ref"), 2, suffix="x"),
            fmt(r.get("samples_per_s_vs_dense"), 2, suffix="x"), fmt(r["input_tokens_per_s"], 0),
            fmt(r["supervised_tokens_per_s"], 0), fmt(r.get("supervised_tokens_per_s_vs_ref"), 2, suffix="x"),
            fmt(r.get("peak_step_bytes"), 0, 1 / 2**20), fmt(r.get("num_parameters"), 2, 1e-6),
            fmt(r.get("model_flops_per_sample"), 2, 1e-9), fmt(r.get("achieved_tflops"), 3),
            fmt(r.get("mfu"), 1, 100, "%"),
        ])
    return rows


def throughput_markdown(report: dict) -> str:
    """The stdout/docs table plus the facts needed to read it (shape, device, methods)."""
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
    return "\n\n".join([header, markdown_table(THROUGHPUT_HEADERS, throughput_rows(report["results"])), notes])


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
