"""``crossbert-pretrain``: pretrain CrossBERT (or the BERT baseline) on megatron-core.

Run one process per device under torchrun, e.g.::

    torchrun --nproc_per_node 8 -m megatron_crossbert.cli.pretrain --config examples/crossbert_base.yaml \\
        --data-path /data/corpus_text_document --tokenizer /data/tokenizer --save /ckpt/base

A YAML config plus ``--set section.key=value`` overrides define the run; the convenience flags
below are shorthands for common overrides (applied after ``--set``). The resolved config is saved
as run_config.json inside every checkpoint. SIGTERM/SIGINT save a checkpoint and exit 0; rerunning
the same command resumes from ``--save`` (or ``--load``).
"""

from __future__ import annotations

import argparse
import json
import sys

from megatron_crossbert.cli.errors import add_debug_flag, cli_main
from megatron_crossbert.config import RunConfig, load_run_config

# flag -> (config key, how to turn the parsed value into an override string)
_SHORTHANDS = {
    "model": "model.arch", "train_iters": "training.train_iters", "save": "checkpoint.save_dir",
    "load": "checkpoint.load_dir", "init_from": "checkpoint.init_from", "tokenizer": "data.tokenizer",
    "data_path": "data.data_path", "micro_batch_size": "training.micro_batch_size",
    "global_batch_size": "training.global_batch_size", "lr": "training.lr", "precision": "training.precision",
    "tensor_parallel": "parallel.tensor_model_parallel_size",
    "pipeline_parallel": "parallel.pipeline_model_parallel_size",
    "resume_from": "checkpoint.resume_from", "overwrite": "checkpoint.overwrite",
    "allow_tokenizer_change": "checkpoint.allow_tokenizer_change",
    "lr_schedule_on_resume": "checkpoint.lr_schedule_on_resume",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="crossbert-pretrain", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", help="YAML run config (sections: model, masking, data, parallel, training, checkpoint)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="override one config value (YAML-parsed), repeatable, e.g. --set training.lr=3e-4")
    parser.add_argument("--model", choices=["crossbert", "bert"], help="architecture (model.arch)")
    parser.add_argument("--train-iters", type=int, help="optimizer steps (training.train_iters)")
    parser.add_argument("--micro-batch-size", type=int, help="sequences per micro-batch per DP rank")
    parser.add_argument("--global-batch-size", type=int, help="sequences per optimizer step")
    parser.add_argument("--lr", type=float, help="peak learning rate")
    parser.add_argument("--precision", choices=["fp32", "bf16", "fp8"], help="training.precision")
    parser.add_argument("--tensor-parallel", type=int, help="parallel.tensor_model_parallel_size")
    parser.add_argument("--pipeline-parallel", type=int, help="parallel.pipeline_model_parallel_size")
    parser.add_argument("--save", help="checkpoint root to write (checkpoint.save_dir)")
    parser.add_argument("--load", help="checkpoint root to resume from (checkpoint.load_dir)")
    parser.add_argument("--init-from", help="model-only checkpoint to initialise weights from")
    parser.add_argument("--resume-from", metavar="ITER_DIR",
                        help="resume from this iter_* checkpoint (a name in --load/--save, or a path) "
                             "instead of the one 'latest' names")
    parser.add_argument("--overwrite", action="store_true", default=None,
                        help="start over in a --save dir holding complete checkpoints: they are moved "
                             "into <save>/replaced_<time>/ first, never deleted")
    parser.add_argument("--allow-tokenizer-change", action="store_true", default=None,
                        help="warn instead of refusing when the tokenizer fingerprint differs from the "
                             "checkpoint's or the dataset's")
    parser.add_argument("--lr-schedule-on-resume", choices=["refuse", "checkpoint", "config"],
                        help="when --train-iters, warmup, decay style, lr or min_lr differ from the resumed "
                             "checkpoint: refuse (default), keep the checkpoint's schedule, or apply this "
                             "run's config from the resumed step on (logged either way)")
    parser.add_argument("--data-path", nargs="+", help="indexed-dataset prefix(es), optionally weighted")
    parser.add_argument("--tokenizer", help="tokenizer directory (data.tokenizer)")
    parser.add_argument("--exit-at-iteration", type=int,
                        help="stop with a checkpoint after this many total steps (schedule unchanged)")
    parser.add_argument("--print-config", action="store_true", help="print the resolved config as JSON and exit")
    add_debug_flag(parser)
    return parser


def _override(key: str, value) -> str:
    return f"{key}={json.dumps(value)}"


def resolve_config(args: argparse.Namespace) -> RunConfig:
    """YAML, then --set overrides, then shorthand flags (the most specific wins)."""
    overrides = list(args.overrides)  # config.py turns YAML-1.1 strings like 3e-4 into numbers
    for flag, key in _SHORTHANDS.items():
        value = getattr(args, flag)
        if value is not None:
            overrides.append(_override(key, value))
    return load_run_config(args.config, overrides)


@cli_main
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        run_cfg = resolve_config(args)
    except (ValueError, TypeError) as err:
        raise ValueError(f"invalid config: {err}") from err
    if args.print_config:
        print(json.dumps(run_cfg.to_dict(), indent=2, sort_keys=True))
        return 0
    return run(run_cfg, args.exit_at_iteration)


def run(run_cfg: RunConfig, exit_at_iteration: int | None = None) -> int:
    """Train, print a one-line summary on rank 0, tear down the process group.

    Errors (bad checkpoint, data, tokenizer, non-finite loss) propagate to ``cli_main``, which
    prints them once as one line."""
    from megatron_crossbert import platform
    from megatron_crossbert.training import train

    try:
        summary = train(run_cfg, exit_at_iteration=exit_at_iteration)
        rank_zero = platform.is_rank_zero()
    finally:
        platform.destroy()
    if rank_zero:
        keys = ("iteration", "consumed_samples", "final_loss", "skipped_steps", "checkpoint", "stopped_by_signal")
        print("summary " + json.dumps({k: summary[k] for k in keys}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
