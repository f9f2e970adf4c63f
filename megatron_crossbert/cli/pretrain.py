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

from megatron_crossbert.cli.config_flags import ConfigFlag, add_config_flags, as_overrides, flag_values
from megatron_crossbert.cli.errors import add_debug_flag, cli_main
from megatron_crossbert.config import RunConfig, load_run_config

SHORTHANDS: tuple[ConfigFlag, ...] = (
    ConfigFlag("--model", ("model.arch",), "architecture"),
    ConfigFlag("--encoder", ("model.encoder",), "encoder family"),
    ConfigFlag("--train-iters", ("training.train_iters",), "optimizer steps"),
    ConfigFlag("--micro-batch-size", ("training.micro_batch_size",), "sequences per micro-batch per DP rank"),
    ConfigFlag("--global-batch-size", ("training.global_batch_size",), "sequences per optimizer step"),
    ConfigFlag("--lr", ("training.lr",), "peak learning rate"),
    ConfigFlag("--lr-decay-style", ("training.lr_decay_style",), "decay after warmup; WSD = warmup-stable-decay"),
    ConfigFlag("--lr-wsd-decay-iters", ("training.lr_wsd_decay_iters",), "WSD: steps of the decay phase"),
    ConfigFlag("--lr-wsd-decay-style", ("training.lr_wsd_decay_style",), "WSD: shape of the decay"),
    ConfigFlag("--rampup-batch-size", ("training.rampup_batch_size",),
               "batch-size warmup as Megatron-LM's: START INCREMENT RAMP_SAMPLES", metavar="N"),
    ConfigFlag("--step-batch-size-schedule", ("training.step_batch_size_schedule",),
               "batch-size warmup as Megatron-LM's: 'THRESHOLD:BATCH ...', thresholds in tokens",
               metavar="SCHEDULE"),
    ConfigFlag("--precision", ("training.precision",)),
    ConfigFlag("--tensor-parallel", ("parallel.tensor_model_parallel_size",)),
    ConfigFlag("--pipeline-parallel", ("parallel.pipeline_model_parallel_size",)),
    ConfigFlag("--distributed-timeout-minutes", ("parallel.distributed_timeout_minutes",),
               "timeout of every collective (Megatron-LM's flag)"),
    ConfigFlag("--save", ("checkpoint.save_dir",), "checkpoint root to write"),
    ConfigFlag("--load", ("checkpoint.load_dir",), "checkpoint root to resume from"),
    ConfigFlag("--init-from", ("checkpoint.init_from",), "model-only checkpoint to initialise weights from"),
    ConfigFlag("--resume-from", ("checkpoint.resume_from",),
               "resume from this iter_* checkpoint (a name in --load/--save, or a path) instead of the one "
               "'latest' names", metavar="ITER_DIR"),
    ConfigFlag("--overwrite", ("checkpoint.overwrite",),
               "start over in a --save dir holding complete checkpoints: they are moved into "
               "<save>/replaced_<time>/ first, never deleted"),
    ConfigFlag("--allow-tokenizer-change", ("checkpoint.allow_tokenizer_change",),
               "warn instead of refusing when the tokenizer fingerprint differs from the checkpoint's or the "
               "dataset's"),
    ConfigFlag("--allow-data-change", ("checkpoint.allow_data_change",),
               "resume on other data than the checkpoint's (datasets, weights, split, seq_length): logged with where "
               "the new sample stream starts, instead of refused"),
    ConfigFlag("--lr-schedule-on-resume", ("checkpoint.lr_schedule_on_resume",),
               "when a schedule (LR incl. WSD, batch-size warmup, masking rate) differs from the resumed "
               "checkpoint's: refuse (default), keep the checkpoint's schedule, or apply this run's config from the "
               "resumed step on (logged either way)"),
    ConfigFlag("--checkpoint-verify", ("checkpoint.verify",),
               "check the resumed (or init_from) checkpoint's files against the hashes recorded when it was saved; "
               "'off' skips it, and a flipped bit then trains on a changed weight"),
    ConfigFlag("--data-path", ("data.data_path",), "indexed-dataset prefix(es), optionally weighted"),
    ConfigFlag("--tokenizer", ("data.tokenizer",), "tokenizer directory"),
)
"""The shorthand flags: each sets RunConfig keys (type and choices from the config's fields)."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="crossbert-pretrain", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", help="YAML run config (sections: model, masking, data, parallel, training, checkpoint)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="override one config value (YAML-parsed), repeatable, e.g. --set training.lr=3e-4")
    add_config_flags(parser, SHORTHANDS)
    parser.add_argument("--exit-at-iteration", type=int,
                        help="stop with a checkpoint after this many total steps (schedule unchanged)")
    parser.add_argument("--print-config", action="store_true", help="print the resolved config as JSON and exit")
    add_debug_flag(parser)
    return parser


def resolve_config(args: argparse.Namespace) -> RunConfig:
    """YAML, then --set overrides, then shorthand flags (the most specific wins)."""
    return load_run_config(args.config, list(args.overrides) + as_overrides(flag_values(args, SHORTHANDS)))


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
    from megatron_crossbert.platform import distributed as platform
    from megatron_crossbert.training import train

    probe_fn = None
    if run_cfg.training.probe_interval and run_cfg.training.probe_tasks:  # evaluation's extras load only then
        from megatron_crossbert.evaluation.in_training import prepare_probes
        from megatron_crossbert.evaluation.in_training import probe_in_training as probe_fn

        prepare_probes(run_cfg)  # before the run lock and the first step: a missing task is refused now
    try:
        summary = train(run_cfg, exit_at_iteration=exit_at_iteration, probe_fn=probe_fn)
        rank_zero = platform.is_rank_zero()
    finally:
        platform.destroy()
    if rank_zero:
        keys = ("iteration", "consumed_samples", "final_loss", "skipped_steps", "checkpoint", "stopped_by_signal")
        print("summary " + json.dumps({k: summary[k] for k in keys}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
