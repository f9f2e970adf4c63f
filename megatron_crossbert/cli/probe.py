"""``crossbert-probe``: frozen linear probes of an encoder on GLUE and JSONL tasks.

Examples::

    crossbert-probe --model runs/tiny --glue-dir ../shared/data/glue --out results/probe
    crossbert-probe --model path/to/hf_dir --glue-dir glue_data --glue-tasks CoLA,STS-B \\
        --jsonl ../shared/data/probe --layers all --max-train 2000
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import typing

from megatron_crossbert.cli import DefaultsHelpFormatter, add_encoder_arguments, cache_dir_arg
from megatron_crossbert.cli.errors import add_debug_flag, cli_main
from megatron_crossbert.evaluation.encoders import Layers
from megatron_crossbert.evaluation.encoding import HIDDEN_STATES, EncodingOptions
from megatron_crossbert.evaluation.probing.linear_probes import ProbeConfig
from megatron_crossbert.evaluation.recipe import PROBE_MAX_LEN


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="crossbert-probe", description=__doc__.split("\n")[0],
                                formatter_class=DefaultsHelpFormatter)
    add_encoder_arguments(p, max_len=PROBE_MAX_LEN)
    p.add_argument("--glue-dir", help="glue_data directory (<TASK>/train.tsv, dev.tsv)")
    p.add_argument("--glue-tasks", help="comma list, e.g. CoLA,SST-2,MRPC,STS-B,RTE (default: all present)")
    p.add_argument("--jsonl", action="append", default=[],
                   help="JSONL task dir (train.jsonl/test.jsonl) or a dir of them; repeatable")
    p.add_argument("--hf-glue", default="", help="comma list of nyu-mll/glue configs via `datasets` (online)")
    p.add_argument("--layers", choices=typing.get_args(Layers), default="last",
                   help="'all' probes every hidden layer and writes a per-layer table and PNG plot")
    p.add_argument("--max-train", type=int, help="subsample each train split to N rows (seeded)")
    p.add_argument("--max-test", type=int, help="subsample each test split to N rows (seeded)")
    p.add_argument("--cv-folds", type=int, default=3, help="folds for choosing C")
    p.add_argument("--knn", type=int, default=0, metavar="K",
                   help="also a k-NN probe (cosine, K neighbours vote; the paper's second probe) on the same "
                        "features; 0 (default): the linear probe only")
    p.add_argument("--both-readouts", action=argparse.BooleanOptionalAction, default=True,
                   help="also probe the other readout of the same features: raw (the paper's: pooled features as "
                        "they are) and PCA-whitened side by side, linear probe (default: yes)")
    p.add_argument("--visible-fraction", type=float, default=1.0, metavar="F",
                   help="encode a seeded random share F of each text's tokens, kept at their original positions "
                        "(the rest hidden from attention and pooling): CrossBERT's training input; 1.0: all tokens")
    p.add_argument("--hidden-state", choices=HIDDEN_STATES, default="after_final_norm",
                   help="the tensor pooled: the encoder's output after its final norm, the last layer's output "
                        "before it, or the output of layer num_layers // 2")
    p.add_argument("--token-geometry", type=int, nargs="?", const=600, default=0, metavar="N",
                   help="also measure where the token states' variance lies on N test texts (default N: 600): "
                        "their effective rank, the share of it on one direction, and the shares the token id and "
                        "the absolute position explain (evaluation/token_geometry.py); 0: off")
    p.add_argument("--seed", type=int, default=0, help="seed of the subsampling, the probe's folds and the visible "
                                                       "subsets (default: 0)")
    p.add_argument("--out", default="probe_results", help="output directory for JSON, markdown and plot")
    add_debug_flag(p)
    return p


def _split_list(text: str | None) -> list[str]:
    return [item.strip() for item in (text or "").split(",") if item.strip()]


@cli_main
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    from megatron_crossbert.evaluation.probing.report import render_markdown, write_report
    from megatron_crossbert.evaluation.probing.runner import ProbeRunConfig, collect_tasks, probe_embedder, run_probing
    from megatron_crossbert.outputs import require_output_dir

    config = ProbeRunConfig(pooling=args.pooling, layers=args.layers, max_len=args.max_len,
                            batch_size=args.batch_size, max_train=args.max_train, max_test=args.max_test,
                            seed=args.seed, cache_dir=cache_dir_arg(args.cache_dir), device=args.device,
                            tokenizer_dir=args.tokenizer_dir, verify=args.verify, whiten=args.whiten, knn=args.knn,
                            both_readouts=args.both_readouts, token_geometry=args.token_geometry,
                            encoding=EncodingOptions(args.visible_fraction, args.hidden_state, args.seed),
                            probe=ProbeConfig(folds=args.cv_folds, seed=args.seed))  # refuses what cannot run
    require_output_dir(args.out, "--out")  # before any task is read or text encoded
    tasks = collect_tasks(glue_dir=args.glue_dir, glue_tasks=_split_list(args.glue_tasks) or None,
                          jsonl=args.jsonl, hf_glue=_split_list(args.hf_glue))
    if not tasks:
        raise ValueError("no tasks: give --glue-dir, --jsonl or --hf-glue")
    embedder = probe_embedder(args.model, config)
    report = run_probing(embedder, tasks, config)
    paths = write_report(report, args.out, embedder=embedder)
    print(render_markdown(report))
    print("wrote " + ", ".join(str(p) for p in paths.values()))
    return 1 if report["summary"]["failed"] and len(report["summary"]["failed"]) == len(report["tasks"]) else 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
