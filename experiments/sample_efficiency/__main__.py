"""``python -m experiments.sample_efficiency``: probe score vs samples and vs FLOPs, resumable.

Trains the plan's runs through ``crossbert-pretrain``, frozen-probes every checkpoint and (re)writes
the results page (docs/results.md by default) from whatever was measured. Rerunning the same
command continues a partial run; ``--stages probe report --follow`` probes beside a running
``--stages data train``.
"""

from __future__ import annotations

import argparse
import os
import sys

from megatron_crossbert.cli.errors import add_debug_flag, cli_main

from .pipeline import STAGES, ExperimentPaths, run_experiment
from .plan import PLANS

DEFAULT_MTEB_LITE = "/work/shared/data/mteb_lite"


def build_parser() -> argparse.ArgumentParser:
    defaults = ExperimentPaths(work_dir="benchmarks/out/sample_efficiency", corpus="/work/shared/data/corpus",
                               glue_dir="/work/shared/data/glue", probe_dir="/work/shared/data/probe")
    p = argparse.ArgumentParser(prog="python -m experiments.sample_efficiency", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work-dir", default=defaults.work_dir,
                   help="tokenizer, data, checkpoints, probe results (every stage skips what is done)")
    p.add_argument("--plan", default="cpu", choices=list(PLANS), help="experiment size preset (smoke: tests only)")
    p.add_argument("--corpus", default=defaults.corpus, help="JSONL(.gz) file or directory")
    p.add_argument("--glue-dir", default=defaults.glue_dir)
    p.add_argument("--probe-dir", default=defaults.probe_dir)
    p.add_argument("--mteb-lite-dir", default=DEFAULT_MTEB_LITE,
                   help="MTEB-lite folders (STS12-16, Banking77) every checkpoint is also scored on with mteb "
                        "(skipped when the directory is absent; 'none' disables)")
    p.add_argument("--results-md", default=defaults.results_md, help="markdown results page to (re)write")
    p.add_argument("--figures-dir", default=defaults.figures_dir)
    p.add_argument("--throughput-json", nargs="+", default=defaults.throughput_json,
                   help="throughput reports (crossbert-bench throughput) to include in the results page, "
                        "those that exist")
    p.add_argument("--stages", nargs="*", default=None, choices=STAGES,
                   help="subset of the stages (default: all, in order)")
    p.add_argument("--follow", action="store_true",
                   help="probe/report only: keep probing checkpoints as a concurrent 'train' invocation writes them")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: all cores)")
    add_debug_flag(p)
    return p


def _mteb_lite_dir(value: str) -> str | None:
    """The MTEB-lite directory to use, or None ('none', or the default path absent: said once)."""
    if value.lower() == "none":
        return None
    if not os.path.isdir(value):
        if value != DEFAULT_MTEB_LITE:
            raise FileNotFoundError(f"--mteb-lite-dir {value} does not exist")
        print(f"[sample-efficiency] {value} not found: checkpoints are not scored on MTEB-lite", flush=True)
        return None
    return value


@cli_main
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    import torch

    torch.set_num_threads(args.threads or max(1, os.cpu_count() or 1))
    os.environ.setdefault("TQDM_DISABLE", "1")  # probe progress bars would flood the experiment log
    paths = ExperimentPaths(work_dir=args.work_dir, corpus=args.corpus, glue_dir=args.glue_dir,
                            probe_dir=args.probe_dir, results_md=args.results_md, figures_dir=args.figures_dir,
                            throughput_json=args.throughput_json, mteb_lite_dir=_mteb_lite_dir(args.mteb_lite_dir))
    run_experiment(paths, plan_name=args.plan, stages=args.stages, follow=args.follow)
    return 0


if __name__ == "__main__":
    sys.exit(main())
