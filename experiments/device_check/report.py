"""Device-check results as blocks: the per-call report and the GPU section of docs/results.md.

Everything is built from the JSON the driver writes (no numbers typed in by hand): tables keep the measured
values, and the section is published through ``results_page.publish`` (its JSON under docs/results/, then its
part of the page), so re-rendering replaces only that section; a toy (CPU dry run) payload is never written
there, since it holds no GPU numbers.
"""

from __future__ import annotations

from pathlib import Path

from megatron_crossbert.benchmarking.gpu_check import ratio_table
from megatron_crossbert.benchmarking.report import fmt
from megatron_crossbert.results_page import Bullets, Column, Heading, Paragraph, Section, Table, publish, render_blocks
from megatron_crossbert.results_page.blocks import measured
from megatron_crossbert.results_page.render import render_section

from .memory_stage import memory_table

SECTION = "gpu-validation"
SECTION_NOTE = "written by scripts/device_check.sh render"
SECTION_START = f"<!-- {SECTION}:start"
"""How the section's start mark begins (the mark goes on with who wrote it and when)."""


def _seconds(name: str) -> Column:
    return Column(name, format=",.0f")


def _stage_table(payload: dict) -> Table:
    rows = [[name, "ok" if record["ok"] else f"FAILED: {record.get('error') or 'see its log'}",
             measured(record.get("wall_s")), measured(record.get("budget_s"))]
            for name, record in payload["stages"].items()]
    return Table([Column("stage"), Column("status"), _seconds("wall s"), _seconds("budget s")], rows)


def smoke_blocks(result: dict) -> list:
    """The smoke stage's facts and steps; a stage stopped early shows what it kept (no GPU tests line)."""
    tests, cuda, coll = result.get("gpu_tests"), result["cuda"], result.get("collective")
    lines = [f"`{tests['command']}`: exit {tests['exit_code']} ({tests['summary']})" if tests
             else "GPU tests: not run (the stage stopped first)",
             f"CUDA: {cuda.get('device', 'not available')}, torch {cuda['torch']}, CUDA {cuda['cuda']}, "
             f"NCCL {cuda.get('nccl', '—')}, bf16 {cuda.get('bf16_supported', '—')}"]
    if coll:
        lines.append(f"all-reduce over {coll['backend']} (world {coll['world_size']}): "
                     f"{'ok' if coll['ok'] else 'WRONG'}")
    rows = [[s["name"], s.get("precision", "—"), [measured(x) for x in s.get("losses", [])],
             "ok" if s["ok"] else f"FAILED: {s.get('error', 'non-finite loss')}"]
            for s in result.get("train_steps", [])]
    columns = [Column("model"), Column("precision"), Column("losses", format=",.3f", join=" "), Column("status")]
    return [Bullets(lines), Table(columns, rows)]


KERNEL_COLUMNS = [Column(name) for name in ("mask", "L", "batch", "documents", "dtype", "passes")] + [
    _seconds("flex tok/s"), _seconds("sdpa tok/s"), Column("flex / sdpa", format=",.2f", suffix="x"),
    _seconds("flex MiB"), _seconds("sdpa MiB"), Column("out rel err", format=".2e"),
    Column("grad rel err", format=".2e"), Column("status")]
MFU_COLUMNS = [Column("attention backend"), Column("model"), Column("samples/s", format=",.1f"),
               Column("TFLOP/s", format=",.1f"), Column("MFU", format=",.1f", scale=100, suffix="%")]


def attention_blocks(result: dict) -> list:
    """Flex against SDPA per mask, then MFU with SDPA against megatron's unfused attention."""
    rows = [[r["mask"], r["seq_length"], r.get("batch", 1), r["documents"], r["dtype"], r["passes"],
             *[measured(v) for v in (r["flex"]["tokens_per_s"], r["sdpa"]["tokens_per_s"], r["flex_speedup"],
                                     r["flex"]["peak_step_mib"], r["sdpa"]["peak_step_mib"])],
             measured(r["output_rel_err"]), measured(r["grad_rel_err"]), "ok" if r["ok"] else "MISMATCH"]
            for r in result.get("kernels", [])]
    mfu = [[run["attention_backend"], r["name"], *[measured(r.get(k)) for k in ("samples_per_s", "achieved_tflops", "mfu")]]
           for run in result.get("mfu", []) for r in run["results"]]
    return [Table(KERNEL_COLUMNS, rows), Table(MFU_COLUMNS, mfu)]


def _gpu_check_blocks(result: dict) -> list:
    return [Paragraph(f"`{result.get('command', 'crossbert-bench gpu-check')}`; compile "
                      f"{fmt(result.get('compile_s_per_shape'), 1)} s per flex shape; "
                      f"GEMM now {fmt(result.get('gemm_tflops_measured_now'), 1)} TFLOP/s "
                      f"(MFU quoted against {result.get('peak_tflops_used')}); {result.get('transformer_engine')}"),
            ratio_table(result)]


def _stage_blocks(name: str, record: dict) -> list:
    result = record.get("result")
    if not result:
        return [Paragraph(f"Stage failed before producing results: {record.get('error')}")]
    if name == "smoke":
        return smoke_blocks(result)
    if name == "attention":
        return attention_blocks(result)
    if name == "memory":
        rows = [r for r in result.get("rows", []) if "error" not in r]
        return [memory_table(rows)] if rows or not result.get("markdown") else [Paragraph(result["markdown"])]
    if name == "gpu_check":
        return _gpu_check_blocks(result)
    return [Paragraph(f"`{result.get('command', 'python -m experiments.claims')}`"),
            Paragraph(result.get("markdown", "(no table)"))]  # the stage's own markdown, made on the device


def device_check_blocks(payload: dict) -> list:
    """The report of one device call: what ran where, each stage's status, then each stage's tables."""
    meta = payload["meta"]
    blocks = [Paragraph(f"Device check on {meta['device']} "
                        f"({'TOY CPU dry run, not GPU numbers' if meta['toy'] else 'GPU run'}), started "
                        f"{meta['started_utc']}, torch {meta['torch']}, Python {meta['python']}."),
              Paragraph(f"Command: `{meta['command']}`"), Paragraph(meta["transformer_engine"]), _stage_table(payload)]
    for name, record in payload["stages"].items():
        blocks += [Heading(name, 4), *_stage_blocks(name, record)]
    return blocks


def device_check_markdown(payload: dict) -> str:
    """The per-call report (``device_check.md`` and the console)."""
    return render_blocks(device_check_blocks(payload))


def gpu_validation(payloads: list[dict]) -> Section:
    """The docs/results.md section: one part per device call, in the order given."""
    blocks = []
    for index, payload in enumerate(payloads, 1):
        blocks += [Heading(f"Call {index}: stages {', '.join(payload['meta']['stages'])}", 3),
                   *device_check_blocks(payload)]
    written = max((p["meta"]["started_utc"] for p in payloads), default="")
    return Section(SECTION, Heading("GPU validation"), SECTION_NOTE, written, blocks)


def gpu_section(payloads: list[dict]) -> str:
    """The section as it stands on the page, marks included."""
    return render_section(gpu_validation(payloads))


def write_gpu_section(results_md: Path, payloads: list[dict]) -> Path:
    """Publish the GPU section of ``results_md`` (its JSON, then that section of the page, nothing else);
    refuses toy payloads (not GPU results)."""
    toy = [p["meta"]["command"] for p in payloads if p["meta"]["toy"]]
    if toy:
        raise ValueError(f"{results_md}: refusing to write CPU dry-run (toy) results as the GPU section: {toy[0]}")
    return publish(results_md, gpu_validation(payloads))
