"""Stage 1: a fixed corpus subset, the tokenizer, and the Megatron indexed dataset.

The subset takes documents round-robin from every source file (so all 11 sources are in it) until
``plan.corpus_bytes`` of text, which is more tokens than the longest run consumes: no run repeats
data. Tokenizer and indexed dataset come from the project's own CLIs. Each step is skipped when
its output already exists.
"""

from __future__ import annotations

import json
from itertools import zip_longest
from pathlib import Path

from .commands import module_argv, run_logged
from .plan import Plan

SUBSET_NAME = "corpus_subset.jsonl"
TOKENIZER_DIR = "tokenizer"
DATA_PREFIX = "data/corpus"


def corpus_files(corpus: str | Path) -> list[Path]:
    corpus = Path(corpus)
    if corpus.is_file():
        return [corpus]
    files = sorted(list(corpus.glob("*.jsonl.gz")) + list(corpus.glob("*.jsonl")))
    if not files:
        raise FileNotFoundError(f"no *.jsonl(.gz) files under {corpus}")
    return files


def write_subset(corpus: str | Path, out: Path, max_bytes: int) -> dict:
    """Round-robin documents from each source until ``max_bytes`` of text; returns counts per source."""
    from megatron_crossbert.data.jsonl import iter_texts

    files = corpus_files(corpus)
    streams = [iter_texts([str(f)]) for f in files]
    counts = {f.name: 0 for f in files}
    written = 0
    tmp = out.with_suffix(".tmp")
    with tmp.open("w") as handle:
        for row in zip_longest(*streams):
            for file, text in zip(files, row):
                if text and written < max_bytes:
                    handle.write(json.dumps({"text": text}) + "\n")
                    written += len(text.encode())
                    counts[file.name] += 1
            if written >= max_bytes:
                break
    tmp.replace(out)
    return {"bytes": written, "documents": counts}


def tokenizer_dir(work_dir: Path) -> Path:
    return work_dir / TOKENIZER_DIR


def data_prefix(work_dir: Path) -> str:
    """The indexed-dataset prefix training reads (the preprocessor appends ``_text_document``)."""
    return str(work_dir / f"{DATA_PREFIX}_text_document")


def _has_tokenizer(work_dir: Path) -> bool:
    return (tokenizer_dir(work_dir) / "tokenizer.json").is_file()


def has_dataset(work_dir: Path) -> bool:
    """Whether the data stage's indexed dataset (both files) is in ``work_dir``."""
    prefix = data_prefix(work_dir)
    return Path(prefix + ".bin").is_file() and Path(prefix + ".idx").is_file()


def run_data_stage(plan: Plan, work_dir: Path, corpus: str | Path) -> dict:
    """Subset, tokenizer, preprocess; returns what exists (skipping finished steps)."""
    subset = work_dir / SUBSET_NAME
    info_path = work_dir / "corpus_subset.json"
    if not subset.is_file():
        info_path.write_text(json.dumps(write_subset(corpus, subset, plan.corpus_bytes), indent=2))
    if not _has_tokenizer(work_dir):
        run_logged(module_argv("megatron_crossbert.cli.train_tokenizer", "--input", str(subset),
                               "--output-dir", str(tokenizer_dir(work_dir)), "--vocab-size", str(plan.vocab_size),
                               "--max-docs", str(plan.tokenizer_docs), "--force"), work_dir, "tokenizer")
    if not has_dataset(work_dir):
        (work_dir / "data").mkdir(exist_ok=True)
        run_logged(module_argv("megatron_crossbert.cli.preprocess", "--input", str(subset),
                               "--tokenizer", str(tokenizer_dir(work_dir)),
                               "--output-prefix", str(work_dir / DATA_PREFIX),
                               "--workers", str(plan.preprocess_workers)),
                   work_dir, "preprocess")
    return {"subset": json.loads(info_path.read_text()), "tokenizer": str(tokenizer_dir(work_dir)),
            "data_prefix": data_prefix(work_dir)}
