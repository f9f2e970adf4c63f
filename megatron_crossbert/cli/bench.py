"""crossbert-bench: throughput, attention, GPU-check, HF export-speed, checkpoint and preprocessing benchmarks.

Each subcommand parses options into the importable function that does the work
(``megatron_crossbert.benchmarking``), prints a markdown table on stdout and writes JSON. The
claims study is an experiment of the repository (``python -m experiments.claims``).
"""

from __future__ import annotations

import argparse
import os
import sys

from megatron_crossbert.benchmarking.choices import CLOCKS, EXPORT_DEVICES, GPU_CHECK_PRECISIONS, GPU_DTYPES
from megatron_crossbert.cli.errors import add_debug_flag, cli_main
from megatron_crossbert.config import CheckpointConfig, DataConfig, ModelConfig, TrainingConfig, field_choices
from megatron_crossbert.platform.threads import thread_count


def _add_throughput(sub) -> None:
    from megatron_crossbert.benchmarking.cases import SIZES

    p = sub.add_parser("throughput",
                       help="interleaved training-step throughput, CrossBERT vs the sparse MLM baseline of its "
                            "encoder family (dense-head baseline and narrow-decoder rows too)")
    p.add_argument("--size", default="cpu", choices=sorted(SIZES),
                   help="shared encoder shape (cpu = BERT-base shape ratios scaled down; base/large for GPU)")
    p.add_argument("--steps", type=int, default=6, help="timed round-robin rounds (each model one step per round)")
    p.add_argument("--warmup", type=int, default=2, help="untimed rounds first")
    p.add_argument("--precision", default=None, choices=field_choices(TrainingConfig, "precision"),
                   help="default: fp32 on CPU, bf16 on GPU")
    p.add_argument("--transformer-impl", default="auto", choices=field_choices(ModelConfig, "transformer_impl"),
                   help="layer spec: auto = Transformer Engine on a GPU with TE, else megatron-core's local spec")
    p.add_argument("--attention-backend", default=ModelConfig.attention_backend,
                   choices=field_choices(ModelConfig, "attention_backend"),
                   help="core attention of every model (megatron = megatron-core's unfused attention, the 'before')")
    p.add_argument("--document-mask", action=argparse.BooleanOptionalAction, default=DataConfig.document_mask,
                   help="attention inside each synthetic document (geometric lengths, corpus mean 67 tokens)")
    p.add_argument("--seq-length", type=int, default=None, help="override the size's sequence length L")
    p.add_argument("--micro-batch-size", type=int, default=None, help="override the size's micro-batch")
    p.add_argument("--num-layers", type=int, default=None, help="override the size's encoder depth")
    p.add_argument("--only", nargs="*", default=[],
                   help="case names to keep (each family's sparse MLM baseline always runs as its reference)")
    p.add_argument("--peak-tflops", type=float, default=None,
                   help="device peak TFLOP/s for MFU (default: the GEMM measured now on a GPU; none on the CPU)")
    p.add_argument("--clock", default="auto", choices=CLOCKS,
                   help="step timer: process CPU time is robust to other jobs on a shared CPU (auto: cpu on CPU, wall on GPU)")
    p.add_argument("--threads", type=thread_count, default=None,
                   help="CPU threads of torch and the BLAS/OpenMP pools (default: torch one per core)")
    p.add_argument("--profile", action="store_true",
                   help="also break one step per model into embedding/encoder/decoder/LM head/optimizer time")
    p.add_argument("--out", default="benchmarks/out/throughput.json", help="JSON report path")


def _add_attention(sub) -> None:
    from megatron_crossbert.benchmarking.attention import BACKENDS, MASKS, AttentionBenchOptions

    defaults = AttentionBenchOptions()
    p = sub.add_parser("attention", help="one attention layer per backend (megatron/sdpa/flex), with and without "
                                         "document masks and windows: time, CPU time, peak memory; with --corpus "
                                         "also the share of unmasked attention pairs that cross documents")
    p.add_argument("--seq-lengths", type=int, nargs="+", default=defaults.seq_lengths,
                   help="sequence lengths L of the layer (default: %(default)s)")
    p.add_argument("--backends", nargs="+", default=defaults.backends, choices=BACKENDS,
                   help="core-attention kernels to time (flex: forward only on the CPU)")
    p.add_argument("--masks", nargs="+", default=defaults.masks, choices=MASKS,
                   help="none, document masks, or document masks plus the local window")
    p.add_argument("--window", type=int, default=defaults.window, help="local window (tokens) of the windowed cases")
    p.add_argument("--heads", type=int, default=defaults.heads, help="attention heads (default: %(default)s)")
    p.add_argument("--head-dim", type=int, default=defaults.head_dim, help="channels per head (default: %(default)s)")
    p.add_argument("--batch", type=int, default=defaults.batch, help="samples per call (default: %(default)s)")
    p.add_argument("--repeats", type=int, default=defaults.repeats, help="timed calls per case (median)")
    p.add_argument("--device", default=defaults.device, choices=EXPORT_DEVICES,
                   help="auto = cuda when available (bf16), else cpu (fp32)")
    p.add_argument("--flex-eager", action="store_true", help="run flex uncompiled (materialises scores; debugging)")
    p.add_argument("--corpus", nargs="*", default=[], help="JSONL(.gz) files or globs (quoted): real document "
                                                           "masks and the leakage table")
    p.add_argument("--tokenizer", default=None, help="the corpus' tokenizer (default: a 32k WordPiece trained on "
                                                      "a 20k-document sample)")
    p.add_argument("--leakage-lengths", type=int, nargs="+", default=defaults.leakage_lengths,
                   help="with --corpus: sample lengths of the leakage table (default: %(default)s)")
    p.add_argument("--leakage-samples", type=int, nargs="+", default=defaults.leakage_samples,
                   help="packed samples measured per leakage length")
    p.add_argument("--out", default="benchmarks/out/attention.json", help="JSON report path (markdown beside it)")


def _add_gpu_check(sub) -> None:
    p = sub.add_parser("gpu-check", help="H200 validation: bf16 (and FP8 if TE) throughput and MFU, base and large")
    p.add_argument("--peak-tflops", type=float, default=None,
                   help="dense peak TFLOP/s for MFU (default: the 8192^3 bf16 GEMM measured now on this GPU)")
    p.add_argument("--sizes", nargs="*", default=["base", "large"], help="model sizes (default: %(default)s)")
    p.add_argument("--steps", type=int, default=8, help="timed rounds (default: %(default)s)")
    p.add_argument("--warmup", type=int, default=3, help="untimed rounds first (default: %(default)s)")
    p.add_argument("--precision", default="bf16", choices=GPU_CHECK_PRECISIONS, help="main runs' precision")
    p.add_argument("--gemm-size", type=int, default=8192, help="side of the GEMM re-measured as the peak")
    p.add_argument("--allow-cpu", action="store_true", help="without CUDA, run on the CPU (dry run) instead of skipping")
    p.add_argument("--only", nargs="*", default=None,
                   help="throughput rows to time (default: gpu_check.GPU_CHECK_ROWS; sparse MLM baselines always run)")
    p.add_argument("--out", default="benchmarks/out/gpu_check.json", help="JSON report path")


def _add_export_speed(sub) -> None:
    p = sub.add_parser("export-speed", help="HF export inference speed: every format x attention backend, s=128/512")
    p.add_argument("--hidden-size", type=int, default=512, help="encoder width (default: BERT-small 512)")
    p.add_argument("--num-layers", type=int, default=4, help="encoder layers (default: %(default)s)")
    p.add_argument("--num-attention-heads", type=int, default=8, help="attention heads (default: %(default)s)")
    p.add_argument("--seq-lengths", type=int, nargs="+", default=[128, 512],
                   help="input lengths (default: %(default)s)")
    p.add_argument("--batch-size", type=int, default=8, help="sentences per forward (half padded to half length)")
    p.add_argument("--warmup", type=int, default=1, help="untimed rounds per sequence length")
    p.add_argument("--repeats", type=int, default=3, help="timed round-robin rounds per sequence length")
    p.add_argument("--formats", nargs="*", default=[], help="export formats to include (default: all)")
    p.add_argument("--device", default="auto", choices=EXPORT_DEVICES, help="auto = cuda when available, else cpu")
    p.add_argument("--gpu-dtype", default="bfloat16", choices=GPU_DTYPES, help="dtype on the GPU (CPU: fp32)")
    p.add_argument("--clock", default="auto", choices=CLOCKS,
                   help="auto: process CPU time on CPU (robust to other jobs), wall on GPU")
    p.add_argument("--work-dir", default=None, help="keep the checkpoint and exports here (default: temp dir)")
    p.add_argument("--threads", type=thread_count, default=None,
                   help="CPU threads of torch and the BLAS/OpenMP pools (default: torch one per core)")
    p.add_argument("--out", default="benchmarks/out/export_speed.json", help="JSON report path")


def _add_checkpoint(sub) -> None:
    p = sub.add_parser("checkpoint", help="checkpoint save/load seconds, MB/s and bytes at several model sizes")
    p.add_argument("--sizes", nargs="+", default=["10M", "50M", "200M"],
                   help="model sizes (10M, 50M, 200M; tiny for smoke tests)")
    p.add_argument("--repeats", type=int, default=2, help="saves and loads per case (median reported)")
    p.add_argument("--verify", choices=field_choices(CheckpointConfig, "verify"), default="full",
                   help="checkpoint.verify of the loads: check the checksums before reading (full) or not (off)")
    p.add_argument("--work-dir", default=None, help="where temporary checkpoints go (default: system temp dir)")
    p.add_argument("--threads", type=thread_count, default=None,
                   help="CPU threads of torch and the BLAS/OpenMP pools (default: torch one per core)")
    p.add_argument("--out", default="benchmarks/out/checkpoint.json",
                   help="JSON report path (the markdown table goes beside it, .md)")


def _add_preprocess(sub) -> None:
    from megatron_crossbert.benchmarking.preprocess import CASES
    from megatron_crossbert.data.preprocessing.encoding import BACKENDS

    p = sub.add_parser("preprocess", help="preprocessing CPU-s/wall/MB/s/RSS: ours per backend, the raw tokenizers "
                                          "ceiling and (with --megatron-lm) Megatron-LM's two tools, side by side")
    p.add_argument("--input", nargs="+", default=None,
                   help="JSONL(.gz) files or globs (quoted); default: corpus/*.jsonl.gz of the shared data folder "
                        "($CROSSBERT_DATA_DIR, else ../shared/data beside the repository)")
    p.add_argument("--tokenizer", required=True, help="HF tokenizer directory with a tokenizer.json")
    p.add_argument("--megatron-lm", default=None, help="Megatron-LM checkout: also time its tools/preprocess_data*.py")
    p.add_argument("--workers", type=int, default=2, help="threads/processes for every case that takes them")
    p.add_argument("--backends", nargs="+", default=["auto", "tokenizers"], choices=BACKENDS,
                   help="tokenizer back ends to time (default: %(default)s)")
    p.add_argument("--cases", nargs="*", default=list(CASES), choices=CASES, help="reference cases to run beside ours")
    p.add_argument("--datatrove-tasks", nargs="*", type=int, default=[],
                   help="also time crossbert-preprocess-datatrove with these task counts and the merge, beside "
                        "crossbert-preprocess, on the input files as given")
    p.add_argument("--work-dir", default="benchmarks/out/preprocess", help="combined input and every case's outputs")
    p.add_argument("--out", default="benchmarks/out/preprocess.json", help="JSON report path")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="crossbert-bench", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    _add_throughput(sub)
    _add_attention(sub)
    _add_gpu_check(sub)
    _add_export_speed(sub)
    _add_checkpoint(sub)
    _add_preprocess(sub)
    add_debug_flag(parser)
    return parser


def run_throughput_command(args) -> int:
    import torch

    from megatron_crossbert.benchmarking.report import throughput_markdown, write_json
    from megatron_crossbert.benchmarking.throughput import ThroughputOptions, run_throughput

    precision = args.precision or ("bf16" if torch.cuda.is_available() else "fp32")
    options = ThroughputOptions(size=args.size, warmup=args.warmup, steps=args.steps, precision=precision,
                                transformer_impl=args.transformer_impl, peak_tflops=args.peak_tflops,
                                seq_length=args.seq_length, micro_batch_size=args.micro_batch_size,
                                num_layers=args.num_layers, only=args.only, profile=args.profile,
                                clock=args.clock, attention_backend=args.attention_backend,
                                document_mask=args.document_mask)
    report = run_throughput(options)
    write_json(args.out, report)
    print(throughput_markdown(report))
    if "profile" in report:
        from megatron_crossbert.benchmarking.profile import profile_markdown

        print("\nWhere one step's time goes (ms, share of step; hooks add a little overhead):\n")
        print(profile_markdown(report["profile"]))
    print(f"\nJSON written to {args.out}")
    return 0


def run_attention_command(args) -> int:
    import tempfile
    from pathlib import Path

    from megatron_crossbert.benchmarking.attention import AttentionBenchOptions, attention_markdown, run_attention_bench
    from megatron_crossbert.benchmarking.report import write_json

    options = AttentionBenchOptions(
        seq_lengths=args.seq_lengths, backends=args.backends, masks=args.masks, window=args.window, heads=args.heads,
        head_dim=args.head_dim, batch=args.batch, repeats=args.repeats, device=args.device, flex_eager=args.flex_eager,
        corpus=args.corpus, tokenizer=args.tokenizer, leakage_lengths=args.leakage_lengths,
        leakage_samples=args.leakage_samples)
    with tempfile.TemporaryDirectory(prefix="crossbert-attention-") as work:
        report = run_attention_bench(options, work)
    write_json(args.out, report)
    table = attention_markdown(report)
    Path(args.out).with_suffix(".md").write_text(table + "\n")
    print(table)
    print(f"\n{report['meta']['cpu_s_process_tree']} CPU-s (process tree), {report['meta']['wall_s']} s wall. "
          f"JSON written to {args.out}")
    return 0 if all("error" not in r for r in report["results"]) else 1


def run_gpu_check_command(args) -> int:
    from megatron_crossbert.benchmarking.gpu_check import GpuCheckOptions, run_gpu_check

    only = {} if args.only is None else {"only": args.only}
    return run_gpu_check(GpuCheckOptions(peak_tflops=args.peak_tflops, sizes=args.sizes, steps=args.steps,
                                         warmup=args.warmup, precision=args.precision, gemm_size=args.gemm_size,
                                         allow_cpu=args.allow_cpu, out=args.out, **only))


def run_export_speed_command(args) -> int:
    from megatron_crossbert.benchmarking.export_speed import (
        ExportSpeedOptions,
        export_speed_markdown,
        run_export_speed,
    )
    from megatron_crossbert.benchmarking.report import write_json

    options = ExportSpeedOptions(hidden_size=args.hidden_size, num_layers=args.num_layers,
                                 num_attention_heads=args.num_attention_heads, seq_lengths=args.seq_lengths,
                                 batch_size=args.batch_size, warmup=args.warmup, repeats=args.repeats,
                                 formats=args.formats, device=args.device, gpu_dtype=args.gpu_dtype,
                                 clock=args.clock, work_dir=args.work_dir)
    report = run_export_speed(options)
    write_json(args.out, report)
    print(export_speed_markdown(report))
    print(f"\nJSON written to {args.out}")
    return 0


def run_checkpoint_command(args) -> int:
    from pathlib import Path

    from megatron_crossbert.benchmarking.checkpoint import CheckpointBenchOptions, run_checkpoint_bench
    from megatron_crossbert.benchmarking.report import checkpoint_markdown, write_json

    options = CheckpointBenchOptions(sizes=args.sizes, repeats=args.repeats, work_dir=args.work_dir,
                                     verify=args.verify)
    report = run_checkpoint_bench(options)
    write_json(args.out, report)
    table = checkpoint_markdown(report)
    Path(args.out).with_suffix(".md").write_text(table + "\n")
    print(table)
    print(f"\nJSON written to {args.out}")
    return 0


def run_preprocess_command(args) -> int:
    import shutil
    import tempfile

    from megatron_crossbert.benchmarking.preprocess import (
        PreprocessBenchOptions, preprocess_markdown, run_preprocess_bench,
    )
    from megatron_crossbert.benchmarking.report import write_json
    from megatron_crossbert.shared_data import default_or_error

    inputs = args.input or [default_or_error("--input", "corpus", "corpus", "*.jsonl.gz")]
    os.makedirs(args.work_dir, exist_ok=True)
    work = tempfile.mkdtemp(prefix="run-", dir=args.work_dir)  # fresh: never overwrites earlier outputs
    options = PreprocessBenchOptions(inputs=inputs, tokenizer=args.tokenizer, work_dir=work, workers=args.workers,
                                     backends=args.backends, megatron_lm=args.megatron_lm, cases=tuple(args.cases),
                                     datatrove_tasks=tuple(args.datatrove_tasks))
    try:
        report = run_preprocess_bench(options)
    finally:
        shutil.rmtree(work, ignore_errors=True)  # created by this run: outputs are only for the comparison
    write_json(args.out, report)
    print(preprocess_markdown(report))
    print(f"\nJSON written to {args.out}")
    return 0 if all(c["rc"] == 0 for c in report["cases"]) else 1


@cli_main
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command != "preprocess":  # preprocessing cases are subprocesses; the harness needs no torch
        from megatron_crossbert.platform.threads import limit_threads

        limit_threads(getattr(args, "threads", None))
    handlers = {"throughput": run_throughput_command, "attention": run_attention_command,
                "gpu-check": run_gpu_check_command,
                "export-speed": run_export_speed_command, "checkpoint": run_checkpoint_command,
                "preprocess": run_preprocess_command}
    return handlers[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
