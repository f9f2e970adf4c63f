"""``crossbert-preprocess-datatrove``: crossbert-preprocess split into tasks on datatrove's executors.

Task ``r`` of ``--tasks N`` tokenizes its contiguous share of the input files exactly as
crossbert-preprocess does (same flags, same ids, same skip report) into
``OUTPUT_DIR/<r:05d>_<key>_document.bin/.idx``; ``crossbert-merge --input OUTPUT_DIR`` then gives the bytes
one crossbert-preprocess run over the same files writes, or ``--blend-file`` a --data-path that trains on
the shards as on their merge. ``--executor local`` runs the tasks here, ``slurm`` submits an sbatch array
(one array task per datatrove task), ``ray`` runs them on a Ray cluster. The run is recorded in OUTPUT_DIR
(preprocess_run.json: task count, inputs with their sizes and content identity, encoding flags); a rerun of
the same run skips finished tasks, one that differs (another --tasks, a changed input) is refused unless
--force starts over (the earlier run is moved aside, never deleted). A task killed mid-write leaves only
temporaries, which nothing reads; a local task that dies fails the launch (the others finish), and local
tasks die with a killed launcher. ``--reader jsonl|parquet`` reads one folder or fsspec URL (s3://, hf://)
with datatrove's readers instead (then documents without text are dropped by the reader, and the task order
is datatrove's).
"""

from __future__ import annotations

import argparse
import logging
import sys

from megatron_crossbert.cli import DefaultsHelpFormatter
from megatron_crossbert.cli.errors import add_debug_flag, cli_main
from megatron_crossbert.cli.preprocess import add_encoding_flags, encoding_options


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def build_parser() -> argparse.ArgumentParser:
    from megatron_crossbert.data.datatrove.launch import EXECUTORS, READERS

    p = argparse.ArgumentParser(prog="crossbert-preprocess-datatrove", description=__doc__,
                                formatter_class=DefaultsHelpFormatter)
    p.add_argument("--input", nargs="+", required=True,
                   help="JSONL/JSONL.gz files or globs (--reader ours), or one folder/fsspec URL (jsonl, parquet)")
    p.add_argument("--output-dir", required=True, help="folder for the tasks' .bin/.idx pairs and reports")
    add_encoding_flags(p)
    t = p.add_argument_group("tasks (datatrove)")
    t.add_argument("--executor", choices=EXECUTORS, default="local", help="where the tasks run")
    t.add_argument("--tasks", type=int, default=1, help="number of tasks (shards of the input)")
    t.add_argument("--parallel-tasks", type=int, default=-1, help="tasks running at once (-1: all)")
    t.add_argument("--logging-dir", default=None,
                   help="datatrove logs and completion markers (default: OUTPUT_DIR/logs)")
    t.add_argument("--force", action="store_true",
                   help="start over when OUTPUT_DIR holds an earlier run (moved aside, nothing deleted)")
    t.add_argument("--reader", choices=READERS, default="ours", help="who reads the input")
    t.add_argument("--glob-pattern", default=None, help="datatrove readers: files of the folder to read")
    s = p.add_argument_group("slurm and ray")
    s.add_argument("--partition", default=None, help="slurm partition")
    s.add_argument("--time", default="24:00:00", help="slurm time limit per array task")
    s.add_argument("--cpus-per-task", type=int, default=1, help="CPUs per task (match --workers)")
    s.add_argument("--mem-per-cpu-gb", type=float, default=2, help="memory per CPU in GB")
    s.add_argument("--job-name", default="crossbert_preprocess", help="slurm job name")
    s.add_argument("--env-command", default=None, help="shell line each slurm task runs first (activate the venv)")
    s.add_argument("--sbatch-arg", type=_key_value, action="append", default=[], metavar="KEY=VALUE",
                   help="extra #SBATCH directive, repeatable (e.g. account=proj)")
    s.add_argument("--ray-address", default=None, help="Ray cluster address (default: start a local one)")
    add_debug_flag(p)
    return p


@cli_main
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    from megatron_crossbert.data.datatrove.launch import LaunchConfig, launch

    opts = encoding_options(args, args.input, args.output_dir)
    cfg = LaunchConfig(
        output_dir=args.output_dir, logging_dir=args.logging_dir or f"{args.output_dir}/logs", executor=args.executor,
        tasks=args.tasks, parallel_tasks=args.parallel_tasks, reader=args.reader, glob_pattern=args.glob_pattern,
        partition=args.partition, time=args.time, cpus_per_task=args.cpus_per_task,
        mem_per_cpu_gb=args.mem_per_cpu_gb, job_name=args.job_name, env_command=args.env_command,
        sbatch_args=dict(args.sbatch_arg), ray_address=args.ray_address, force=args.force)
    executor = launch(cfg, opts)
    merge = f"crossbert-merge --input {args.output_dir} --output-prefix PREFIX (or --blend-file NAME.blend.json)"
    if args.executor == "slurm":  # submitted, not run: the array's job id, for a dependent merge job
        print(f"slurm job: {executor.job_id}\nwhen it has ended: {merge}")
    else:
        from megatron_crossbert.data.datatrove.shards import run_totals

        totals = run_totals(args.output_dir, args.tasks)
        kinds = ", ".join(f"{kind}={n}" for kind, n in sorted(totals["skipped_by_kind"].items()))
        print(f"tasks done: {totals['documents_written']} documents written, {totals['documents_skipped']} skipped"
              + (f" ({kinds}; where: {args.output_dir}/<rank>_preprocess_report.json)" if kinds else "")
              + f"\nthen: {merge}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
