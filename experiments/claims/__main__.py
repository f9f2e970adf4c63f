"""``python -m experiments.claims``: probe score vs samples and vs FLOPs, resumable.

Trains the plan's runs through ``crossbert-pretrain``, frozen-probes every checkpoint and (re)writes
the results page (docs/results.md by default) from whatever was measured. Rerunning the same
command continues a partial run; ``--stages probe report --follow`` probes beside a running
``--stages data train``.
"""

from __future__ import annotations

import argparse
import os
import sys

from .study.plan import plan_names
from .study.stopping import StudyStopped, exit_after
from megatron_crossbert.cli.errors import add_debug_flag, cli_main
from megatron_crossbert.platform.threads import limit_threads, thread_count
from megatron_crossbert.shared_data import default_or_error

from .cli import SHARED, add_exit_duration_flag, mteb_lite_dir
from .pipeline import STAGES, ExperimentPaths, run_experiment


def build_parser() -> argparse.ArgumentParser:
    # the data folders default to the shared data folder, resolved in main(); here only the other fields' defaults
    defaults = ExperimentPaths(work_dir="benchmarks/out/claims", corpus="", glue_dir="", probe_dir="")
    p = argparse.ArgumentParser(prog="python -m experiments.claims", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work-dir", default=defaults.work_dir,
                   help="tokenizer, data, checkpoints, probe results (every stage skips what is done)")
    p.add_argument("--plan", default="cpu", metavar="NAME|FILE",
                   help=f"a shipped plan ({', '.join(plan_names())}; smoke: CI only) or a YAML file of Plan fields "
                        "(experiments/claims/plans/cluster.yaml is a template)")
    p.add_argument("--corpus", default=None, help=f"JSONL(.gz) file or directory (default: corpus/ {SHARED})")
    p.add_argument("--glue-dir", default=None, help=f"glue_data directory (default: glue/ {SHARED})")
    p.add_argument("--probe-dir", default=None, help=f"JSONL probe tasks (default: probe/ {SHARED})")
    p.add_argument("--mteb-lite-dir", default=None,
                   help="MTEB-lite folders (STS12-16, Banking77) every checkpoint is also scored on with mteb "
                        f"(default: mteb_lite/ {SHARED}, skipped when absent; 'none' disables)")
    p.add_argument("--results-md", default=defaults.results_md, help="markdown results page to (re)write")
    p.add_argument("--figures-dir", default=defaults.figures_dir)
    p.add_argument("--throughput-json", nargs="+", default=defaults.throughput_json,
                   help="throughput reports (crossbert-bench throughput) to include in the results page, "
                        "those that exist")
    p.add_argument("--records", default=None, metavar="DIR",
                   help="the study's records (small JSON, meant to be committed): each run is sealed there once "
                        "trained and probed, and a fresh --work-dir is seeded from it after its data stage, so a "
                        "study spans sessions whose machines do not keep the work dir (default: none)")
    p.add_argument("--session", default=None, metavar="LABEL",
                   help="the working session this invocation belongs to (any label, the same for every process of "
                        "one session): the page counts the distinct labels in the records' sessions.json; without "
                        "it, a new session is inferred at a new machine boot or after 30 minutes with no process")
    p.add_argument("--stages", nargs="*", default=None, choices=STAGES,
                   help="subset of the stages (default: all, in order)")
    p.add_argument("--follow", action="store_true",
                   help="probe/report only: keep probing checkpoints as a concurrent 'train' invocation writes them")
    p.add_argument("--threads", type=thread_count, default=None,
                   help="CPU threads of torch and of the BLAS/OpenMP pools (the probes' scikit-learn), in this process "
                   "and its children (default: torch one per core, the pools their own setting)")
    timed = p.add_argument_group("equal FLOPs inside a time budget (what the device check runs; see timed.py)")
    timed.add_argument("--train-seconds", type=float, default=None,
                       help="instead of the plan's budgets: one run per arm, every arm the same model FLOPs, all "
                            "of them training for about this many seconds together (speeds measured first)")
    timed.add_argument("--time-budget", type=float, default=None,
                       help="wall seconds for the whole timed run: a further seed runs only if it still fits")
    timed.add_argument("--seeds", type=int, nargs="+", default=[], help="seeds of the timed run (default: the plan's)")
    timed.add_argument("--probe-workers", type=int, default=4, help="processes probing checkpoints in parallel")
    timed.add_argument("--probe-max-train", type=int, default=None, help="train rows per probe task (default: the plan's)")
    timed.add_argument("--dry-run", action="store_true",
                       help="the CPU dry run: a fixed budget of two BERT steps, a tiny fp32 calibration, "
                            "subsampled dev sets")
    timed.add_argument("--result-json", default=None,
                       help="the timed run's result, rewritten after every step (default: WORK_DIR/timed.json)")
    add_exit_duration_flag(p)
    add_debug_flag(p)
    return p


def _run_timed(args: argparse.Namespace, corpus: str, glue_dir: str, mteb_lite_dir: str | None) -> int:
    """The equal-FLOPs run in a time budget; exit 1 when an arm failed or was not probed (the result says which)."""
    from .timed import TimedStudy, run_timed

    study = TimedStudy(plan=args.plan, work_dir=args.work_dir, corpus=corpus, glue_dir=glue_dir,
                       result_json=args.result_json or os.path.join(args.work_dir, "timed.json"),
                       train_seconds=args.train_seconds, time_budget=args.time_budget, mteb_lite_dir=mteb_lite_dir,
                       seeds=args.seeds, probe_max_train=args.probe_max_train, probe_workers=args.probe_workers,
                       dry_run=args.dry_run)
    try:
        result = run_timed(study)
    except StudyStopped as stop:
        print(f"[claims] {stop}: {study.result_json} holds what was measured", file=sys.stderr, flush=True)
        return 128 + stop.signum
    print(f"[claims] wrote {study.result_json}", flush=True)
    return 0 if result["ok"] else 1


@cli_main
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    corpus = args.corpus or default_or_error("--corpus", "corpus", "corpus")
    glue_dir = args.glue_dir or default_or_error("--glue-dir", "GLUE folder", "glue")
    mteb_lite = mteb_lite_dir(args.mteb_lite_dir)
    limit_threads(args.threads)
    exit_after(args.exit_duration_in_mins)
    os.environ.setdefault("TQDM_DISABLE", "1")  # probe progress bars would flood the experiment log
    if args.train_seconds is not None:
        return _run_timed(args, corpus, glue_dir, mteb_lite)
    probe_dir = args.probe_dir or default_or_error("--probe-dir", "probe task folder", "probe")
    paths = ExperimentPaths(work_dir=args.work_dir, corpus=corpus, glue_dir=glue_dir, probe_dir=probe_dir,
                            results_md=args.results_md, figures_dir=args.figures_dir,
                            throughput_json=args.throughput_json, mteb_lite_dir=mteb_lite,
                            records=args.records, session=args.session)
    try:
        run_experiment(paths, plan_name=args.plan, stages=args.stages, follow=args.follow)
    except StudyStopped as stop:
        print(f"[claims] {stop}: status.json says so; rerun the same command to resume", file=sys.stderr, flush=True)
        return 128 + stop.signum
    return 0


if __name__ == "__main__":
    sys.exit(main())
