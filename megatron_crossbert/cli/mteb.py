"""``crossbert-mteb``: run MTEB on a native checkpoint or an HF encoder.

Online (hub reachable)::

    crossbert-mteb --model runs/tiny --benchmark "MTEB(eng, v2)" --out results/mteb
    crossbert-mteb --model hf_dir --tasks STSBenchmark,Banking77Classification

Offline, with local file-backed tasks (``KIND:NAME:PATH``; KIND is classification or sts)::

    crossbert-mteb --model hf_dir --local-task classification:bbc:../shared/data/probe/bbc_news \\
        --local-task sts:stsb-dev:../shared/data/glue/STS-B/dev.tsv

Exit status 2 with one ``error:`` line for bad input (a damaged checkpoint, no tasks); 1 when every
task failed (a failed run, not bad input).
"""

from __future__ import annotations

import argparse
import logging
import sys

from megatron_crossbert.cli import add_encoder_arguments, cache_dir_arg
from megatron_crossbert.cli.errors import add_debug_flag, cli_main


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="crossbert-mteb", description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add_encoder_arguments(p, max_len=256)
    p.add_argument("--benchmark", help='mteb benchmark name, e.g. "MTEB(eng, v2)" (online)')
    p.add_argument("--tasks", default="", help="comma list of built-in mteb task names (online)")
    p.add_argument("--local-task", action="append", default=[], metavar="KIND:NAME:PATH",
                   help="offline task from files: classification:NAME:DIR (train/test.jsonl {text,label}) or "
                        "sts:NAME:FILE (JSONL {text,text_pair,score} or TSV sentence1/sentence2/score); repeatable")
    p.add_argument("--samples-per-label", type=int, help="local classification: train examples per class "
                                                         "(mteb default 8)")
    p.add_argument("--n-experiments", type=int, help="local classification: resampling rounds (mteb default 10)")
    p.add_argument("--normalize", action="store_true", help="L2-normalise embeddings")
    p.add_argument("--raise-error", action="store_true", help="stop at the first failing task")
    p.add_argument("--out", default="mteb_results", help="output directory")
    add_debug_flag(p)
    return p


def _gather_tasks(args: argparse.Namespace) -> list:
    from megatron_crossbert.evaluation.mteb_adapter import resolve_mteb_tasks
    from megatron_crossbert.evaluation.mteb_tasks import build_local_task

    names = [t.strip() for t in args.tasks.split(",") if t.strip()]
    tasks = resolve_mteb_tasks(names, args.benchmark) if (names or args.benchmark) else []
    kwargs = {k: v for k, v in (("samples_per_label", args.samples_per_label),
                                ("n_experiments", args.n_experiments)) if v is not None}
    for spec in args.local_task:
        extra = kwargs if spec.startswith("classification:") else {}
        tasks.append(build_local_task(spec, **extra))
    return tasks


@cli_main
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    from megatron_crossbert.evaluation.encoders import HFEncoder, resolve_model
    from megatron_crossbert.evaluation.mteb_adapter import run_mteb, summary_markdown

    tasks = _gather_tasks(args)
    if not tasks:
        raise ValueError("no tasks: give --benchmark, --tasks or --local-task")
    resolved = resolve_model(args.model, cache_dir=cache_dir_arg(args.cache_dir), tokenizer_dir=args.tokenizer_dir,
                             verify=args.verify)
    encoder = HFEncoder(resolved,
                        device=args.device,
                        max_len=args.max_len, batch_size=args.batch_size)
    summary = run_mteb(encoder, tasks, args.out, pooling=args.pooling, normalize=args.normalize,
                       batch_size=args.batch_size, raise_error=args.raise_error)
    print(summary_markdown(summary))
    print(f"wrote {args.out}/mteb_summary.json and per-task results")
    return 1 if summary["errors"] and not summary["tasks"] else 0


if __name__ == "__main__":
    sys.exit(main())
