"""device_check: prepare the carry folder here, run the stages on the device, render the results.

    prepare   (CPU machine) wheels + data into the git-ignored carry folder, size guard, prints the
              device program's arithmetic and the exact device `run` arguments (command, carry, timeout_s)
    program   the device program alone: start-ups, a failed start, idle, close, compiles, stage budgets and
              overruns, call totals, the rerun reserve, what falls outside the window (--measured: with
              the compile time call 1 measured, and the later calls' `run` arguments)
    run       (device, or --toy on the CPU) the stages, each under its budget; JSON + markdown in $OUT
    render    the docs/results.md GPU section from one or more device_check.json files
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

from .program import (
    CARRY_LIMIT_BYTES,
    COMPILE_S_PER_SHAPE,
    DEFAULT_CARRY_DIR,
    DEFAULT_WORK_DIR,
    STAGE_NAMES,
    ClaimsSettings,
    DeviceCheckConfig,
)


def _add_prepare(sub) -> None:
    p = sub.add_parser("prepare", help="fill the carry folder (wheels, corpus, GLUE, MTEB-lite) and print the device "
                                       "calls")
    p.add_argument("--repo", default=".", help="checkout that travels (default: current directory)")
    p.add_argument("--carry-dir", default=DEFAULT_CARRY_DIR, help="git-ignored folder inside the repo")
    p.add_argument("--shared-data", default=None,
                   help="folder with corpus/, glue/ and mteb_lite/ (default: $CROSSBERT_DATA_DIR, else ../shared/data "
                        "beside the repository)")
    p.add_argument("--no-wheels", action="store_true", help="skip pip download (no package index reachable)")
    p.add_argument("--limit-mib", type=float, default=CARRY_LIMIT_BYTES / 2**20,
                   help="refuse if checkout + carry folder exceed this (device limit: 64)")


def _add_compile_s(parser) -> None:
    parser.add_argument("--compile-s", type=float, default=COMPILE_S_PER_SHAPE,
                        help="seconds each compiled flex shape adds to a stage's budget (default: the estimate, "
                             f"{COMPILE_S_PER_SHAPE:g}; call 1's gpu_check measures it)")


def _add_program(sub) -> None:
    p = sub.add_parser("program", help="print the device program's arithmetic, what falls outside the window, and "
                                    "whether it fits (exit 1 if not)")
    _add_compile_s(p)
    p.add_argument("--measured", default=None, metavar="DEVICE_CHECK_JSON",
                   help="call 1's device_check.json: count compiles at the seconds its gpu_check measured, and "
                        "print the later calls with them")


def _add_run(sub) -> None:
    p = sub.add_parser("run", help="run the stages (on the device; --toy for the CPU dry run)")
    p.add_argument("--stages", nargs="+", default=list(STAGE_NAMES), choices=STAGE_NAMES,
                   help="stages to run, e.g. only the ones that failed")
    p.add_argument("--toy", action="store_true", help="toy sizes on the CPU (the dry run of the test suite)")
    p.add_argument("--out", default=None, help="results folder (default: $OUT, else benchmarks/out/device_check)")
    p.add_argument("--work-dir", default=DEFAULT_WORK_DIR, help="scratch folder for checkpoints and data (an existing one is resumed, never cleared)")
    p.add_argument("--corpus", default=f"{DEFAULT_CARRY_DIR}/data/corpus", help="corpus folder (JSONL.gz)")
    p.add_argument("--glue-dir", default=f"{DEFAULT_CARRY_DIR}/data/glue", help="GLUE TSV folder")
    p.add_argument("--mteb-lite-dir", default=f"{DEFAULT_CARRY_DIR}/data/mteb_lite",
                   help="MTEB-lite folders (STS12-16, Banking77) the claims checkpoints are scored on")
    p.add_argument("--train-seconds", type=float, default=ClaimsSettings.train_seconds,
                   help="claims run: wall time of all arms' training together (sets the FLOPs budget)")
    p.add_argument("--seeds", type=int, nargs="+", default=None,
                   help="claims run seeds (default: the h200 plan's); later ones run only if time is left")
    p.add_argument("--probe-max-train", type=int, default=None,
                   help="claims run: train rows per probe task (default: the h200 plan's)")
    p.add_argument("--command", default="", help="the exact command line to record (set by the shell script)")
    _add_compile_s(p)


def _add_render(sub) -> None:
    p = sub.add_parser("render", help="docs/results.md GPU section from device_check.json files")
    p.add_argument("json", nargs="+", help="device_check.json of each call, in call order")
    p.add_argument("--results-md", default=None, help="write the section into this file (else print it)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="scripts/device_check.sh", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(dest="command_name", required=True)
    _add_prepare(sub)
    _add_program(sub)
    _add_run(sub)
    _add_render(sub)
    return parser


def prepare_command(args) -> int:
    from .carry import PrepareOptions, prepare, prepare_summary

    result = prepare(PrepareOptions(repo=args.repo, carry_dir=args.carry_dir, shared_data=args.shared_data,
                                    wheels=not args.no_wheels, limit_bytes=int(args.limit_mib * 2**20)))
    print(prepare_summary(result))
    return 0


def program_command(args) -> int:
    from .budget import device_program, measured_compile_s, program_lines
    from .carry import calls_lines, device_calls

    compile_s = args.compile_s
    if args.measured:
        compile_s = measured_compile_s(json.loads(Path(args.measured).read_text()), args.measured)
    program = device_program(compile_s=compile_s)
    print("\n".join(program_lines(program) + ([""] + calls_lines(device_calls(compile_s=compile_s)) if args.measured
                                       else [])))
    return 0 if program.fits else 1


def run_command(args) -> int:
    from .runner import run_device_check

    claims = ClaimsSettings(train_seconds=args.train_seconds, seeds=args.seeds, probe_max_train=args.probe_max_train)
    config = DeviceCheckConfig(toy=args.toy, stages=args.stages, work_dir=args.work_dir, corpus=args.corpus,
                               glue_dir=args.glue_dir, mteb_lite_dir=args.mteb_lite_dir, command=args.command or " ".join(sys.argv), claims=claims,
                               compile_s_per_shape=args.compile_s,
                               **({"out_dir": args.out} if args.out else {}))
    print(json.dumps(asdict(config)), flush=True)
    payload = run_device_check(config)
    return 0 if all(record["ok"] for record in payload["stages"].values()) else 1


def render_command(args) -> int:
    from .report import gpu_section, write_gpu_section

    payloads = [json.loads(Path(path).read_text()) for path in args.json]
    if args.results_md:
        print(f"GPU section written to {write_gpu_section(Path(args.results_md), payloads)}")
    else:
        print(gpu_section(payloads))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handlers = {"prepare": prepare_command, "program": program_command, "run": run_command, "render": render_command}
    try:
        return handlers[args.command_name](args)
    except (OSError, ValueError, subprocess.CalledProcessError) as err:
        if args.debug:
            raise
        print(f"error: {err}", file=sys.stderr)
        return 2

