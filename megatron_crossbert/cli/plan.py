"""``crossbert-plan``: size a run before renting it: memory per GPU, layouts, step time and days to a token budget.

    crossbert-plan --config examples/crossbert_large.yaml --gpu h100 --nodes 8 --tokens 1e12

The run is the same YAML plus ``--set`` overrides (and shorthand flags) that ``crossbert-pretrain`` reads.
Nothing is built or allocated: parameters, memory and FLOPs come from the planning model
(``megatron_crossbert.planning``), which the tests check against the built model, the distributed
optimizer's buffers and the bytes autograd saves. Step time assumes an MFU: ``--mfu``, or the one a GPU measured
(``--mfu-from`` a device check's JSON), else 0.40.

``--gpu cpu`` plans for this machine, so the plan can be checked where it is made (``--check``). Two terms
differ from a GPU's: a dropout mask is a float of the activation dtype on the CPU (a bool on CUDA), and
attention dropout makes the CPU's SDPA run its unfused math kernel, which keeps the attention probabilities,
their dropout mask and the dropped probabilities (three fp32 [b, heads, q, k] tensors per layer) where CUDA's
fused kernels keep none. A CPU check vouches for every other term, not for those two on a GPU.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from megatron_crossbert.cli import DefaultsHelpFormatter
from megatron_crossbert.cli.config_flags import add_config_flags, as_overrides, flag_values
from megatron_crossbert.cli.errors import add_debug_flag, cli_main
from megatron_crossbert.cli.pretrain import SHORTHANDS

TOKEN_BUDGET = 1e12
PLAN_SHORTHANDS = tuple(flag for flag in SHORTHANDS if flag.flag in (
    "--model", "--encoder", "--micro-batch-size", "--global-batch-size", "--precision", "--tensor-parallel",
    "--pipeline-parallel"))
"""crossbert-pretrain's shorthands that change a plan (the others name files and schedules)."""
CPU_TERMS = __doc__.split("\n\n")[3].replace("\n", " ").replace("``", "")
"""The terms a CPU plan and a GPU plan count differently (--help's epilog)."""


def build_parser() -> argparse.ArgumentParser:
    from megatron_crossbert.planning.device import CPU, GPUS
    from megatron_crossbert.planning.layouts import ASSUMED_MFU

    parser = argparse.ArgumentParser(prog="crossbert-plan", description=__doc__.split("\n\n")[0],
                                     epilog=CPU_TERMS, formatter_class=DefaultsHelpFormatter)
    parser.add_argument("--config", help="YAML run config, as crossbert-pretrain reads it")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="override one config value (YAML-parsed), repeatable")
    add_config_flags(parser.add_argument_group("run shorthands (as crossbert-pretrain)"), PLAN_SHORTHANDS)
    cluster = parser.add_argument_group("cluster")
    cluster.add_argument("--gpu", choices=sorted(GPUS) + [CPU], default="h100",
                         help="named GPU (memory, bf16 peak, NVLink and network bandwidth), or cpu: this machine "
                              "(its RAM and cores shared by the ranks; dropout's terms differ, see below)")
    cluster.add_argument("--gpus-per-node", type=int, default=None,
                         help="GPUs per node, or ranks on the machine with --gpu cpu (default: 8, 1 with --gpu cpu)")
    cluster.add_argument("--nodes", type=int, default=1, help="nodes")
    cluster.add_argument("--gpu-memory", type=float, metavar="GIB", help="device memory in GiB (default: the GPU's)")
    cluster.add_argument("--peak-tflops", type=float, help="dense bf16 peak TFLOP/s (default: the GPU's)")
    mfu = parser.add_mutually_exclusive_group()
    mfu.add_argument("--mfu", type=float, default=None,
                     help=f"model FLOPs utilisation the step time assumes (default: {ASSUMED_MFU}, not measured)")
    mfu.add_argument("--mfu-from", metavar="JSON",
                     help="take the MFU a GPU measured: a device check's device_check.json or a gpu-check JSON "
                          "(bf16 rows of this architecture and family)")
    parser.add_argument("--tokens", type=float, default=TOKEN_BUDGET, help="token budget for the days estimate")
    parser.add_argument("--json", action="store_true", help="print the plan as JSON on stdout")
    parser.add_argument("--check", action="store_true",
                        help="measure instead of plan: the bytes autograd saves for a few tiny runs on this CPU "
                             "against the planner's prediction, as a markdown table (no --config needed)")
    add_debug_flag(parser)
    return parser


def cluster_from_args(args: argparse.Namespace):
    from megatron_crossbert.planning.device import Cluster, device_spec

    for name in ("gpus_per_node", "nodes", "gpu_memory", "peak_tflops", "mfu", "tokens"):
        value = getattr(args, name)
        if value is not None and value <= 0:
            raise ValueError(f"--{name.replace('_', '-')}: must be > 0, got {value}")
    if args.mfu is not None and args.mfu > 1:
        raise ValueError(f"--mfu: a fraction of the peak, at most 1, got {args.mfu}")
    gpu = device_spec(args.gpu)
    per_node = args.gpus_per_node or (8 if gpu.cuda else 1)
    shared = 1 if gpu.cuda else per_node  # the CPU's ranks share its memory and cores
    gpu = dataclasses.replace(gpu, memory_gib=args.gpu_memory or gpu.memory_gib / shared,
                              peak_tflops=args.peak_tflops or gpu.peak_tflops / shared)
    return Cluster(gpu, gpus_per_node=per_node, nodes=args.nodes)


@cli_main
def main(argv: list[str] | None = None) -> int:
    from megatron_crossbert.cli import quiet_library_warnings
    from megatron_crossbert.config import load_run_config

    quiet_library_warnings()
    args = build_parser().parse_args(argv)
    if args.check:
        from megatron_crossbert.planning.check import table_rows

        print("\n".join(table_rows()))
        return 0
    cluster = cluster_from_args(args)
    try:
        run_cfg = load_run_config(args.config, list(args.overrides)
                                  + as_overrides(flag_values(args, PLAN_SHORTHANDS)))
    except (ValueError, TypeError) as err:
        raise ValueError(f"{args.config or '--set'}: invalid config: {err}") from err
    from megatron_crossbert.planning.layouts import ASSUMED_MFU, Planner
    from megatron_crossbert.planning.report import build_plan, render_text

    mfu, source = (args.mfu, "given with --mfu") if args.mfu is not None else (ASSUMED_MFU, "assumed, not measured")
    if args.mfu_from:
        from megatron_crossbert.planning.mfu import measured_mfu

        mfu, source = measured_mfu(args.mfu_from, run_cfg, cluster.gpu)
    plan = build_plan(Planner(run_cfg, cluster, mfu=mfu), args.tokens, source)
    print(json.dumps(plan, indent=2) if args.json else render_text(plan))
    return 0


if __name__ == "__main__":
    sys.exit(main())
