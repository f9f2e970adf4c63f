"""The command-line pieces the study's commands share: ``python -m experiments.claims`` and its two side
commands, ``.sweep`` and ``.ablations``.

A side command reads a study's work dir (its tokenizer and indexed dataset; the ablations also its seed-1
checkpoints), rewrites its own section of the results page after every row, can seal its rows in a records
folder so that it spans working sessions, and ends on a stop signal with 128 + the signal's number after saying
in one line how to resume. Its parser and the checks of its arguments live here once.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from megatron_crossbert.cli.errors import add_debug_flag
from megatron_crossbert.platform.threads import limit_threads, thread_count
from megatron_crossbert.shared_data import find_shared

from .study.data_stage import has_dataset
from .study.stopping import StudyStopped, duration_minutes, exit_after

SHARED = "of the shared data folder ($CROSSBERT_DATA_DIR, else ../shared/data beside the repository)"


def mteb_lite_dir(value: str | None) -> str | None:
    """The MTEB-lite directory to use, or None ('none', or no default folder: said once)."""
    if value is None:
        found = find_shared("mteb_lite")
        if found is None:
            print("[claims] no mteb_lite/ in the shared data folder: checkpoints are not scored on "
                  "MTEB-lite", flush=True)
        return None if found is None else str(found)
    if value.lower() == "none":
        return None
    if not os.path.isdir(value):
        raise FileNotFoundError(f"--mteb-lite-dir {value} does not exist")
    return value


def side_parser(prog: str, doc: str | None) -> argparse.ArgumentParser:
    """A side command's parser: its module docstring as the description, kept as written."""
    return argparse.ArgumentParser(prog=prog, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)


def add_side_flags(p: argparse.ArgumentParser, work_help: str, section: str) -> None:
    """The flags every side command has: the study's work dir it reads, the page whose ``section`` it rewrites,
    its records, its threads, ``--debug``."""
    p.add_argument("--work-dir", required=True, help=work_help)
    p.add_argument("--results-md", default="docs/results.md",
                   help=f"page whose {section} section is rewritten after every row ('none': no page)")
    p.add_argument("--records", default=None, metavar="DIR",
                   help="records of the rows (small JSON, meant to be committed): each finished row is sealed there "
                        "and a fresh --work-dir is seeded from it, so the command spans sessions whose machines do "
                        "not keep the work dir; rows sealed there are never run again (default: none)")
    p.add_argument("--threads", type=thread_count, default=None, help="CPU threads of this process and its runs")
    add_exit_duration_flag(p)
    add_debug_flag(p)


def add_exit_duration_flag(p: argparse.ArgumentParser) -> None:
    """``--exit-duration-in-mins`` (Megatron-LM's name), for every command of the study (``stopping.exit_after``)."""
    p.add_argument("--exit-duration-in-mins", type=duration_minutes, default=None, metavar="MINUTES",
                   help="stop as on SIGTERM after this many minutes (the running trainer saves its checkpoint; the "
                        "same command resumes): end before a working session's or a job's hard limit")


@dataclass(frozen=True)
class SideArgs:
    """A side command's checked arguments."""

    work: Path
    """The study's work dir, holding the data stage's indexed dataset."""
    page: Path | None
    """The results page to rewrite; None: no page."""
    records: Path | None
    """The records folder; None: the work dir is the only record."""


def side_args(args: argparse.Namespace, data_command: str) -> SideArgs:
    """Threads limited, progress bars off, and the work dir checked for the data stage's dataset (both files);
    ``data_command`` is the command that builds it, named in the error."""
    limit_threads(args.threads)
    exit_after(args.exit_duration_in_mins)
    os.environ.setdefault("TQDM_DISABLE", "1")
    work = Path(args.work_dir)
    if not has_dataset(work):
        raise FileNotFoundError(f"--work-dir {work}: no indexed dataset (.bin and .idx); run {data_command} first")
    return SideArgs(work, None if args.results_md.lower() == "none" else Path(args.results_md),
                    Path(args.records) if args.records else None)


def exit_status(tag: str, work: Callable[[], object]) -> int:
    """0 once ``work`` returns; 128 + the signal's number when a stop signal ended it (said in one line)."""
    try:
        work()
    except StudyStopped as stop:
        print(f"[{tag}] {stop}: rerun the same command to resume", file=sys.stderr, flush=True)
        return 128 + stop.signum
    return 0
