"""Peak RSS of a preprocessing run stays bounded and does not grow with the corpus.

The corpus is generated at test time: ``CROSSBERT_PREPROCESS_MEM_MB`` MB (default 6, for CI; the
issue's 200 MB measurement is ``CROSSBERT_PREPROCESS_MEM_MB=200``), and a quarter of that for the
comparison. Half of each document's words are random letter strings, so the number of distinct
words (what gigatoken's caches grow with) rises with the size, unlike natural text.
"""

from __future__ import annotations

import gzip
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from megatron_crossbert.benchmarking.preprocess import measure
from megatron_crossbert.data.tokenizer import SPECIAL_TOKENS
from synthetic_text import synthetic_documents

ROOT = Path(__file__).resolve().parents[1]
SIZE_MB = float(os.environ.get("CROSSBERT_PREPROCESS_MEM_MB", "6"))
PEAK_BOUND_MB = 450
"""Whole-run peak RSS bound (interpreter + tokenizers + gigatoken/awkward + chunk buffers)."""
GROWTH_BOUND_MB = 128 + 40
"""Allowed peak difference between the full corpus and a quarter of it: gigatoken's cache budget
(``GigatokenEncoder.budget_mb``, after which the encoder is rebuilt) plus slack."""


def write_corpus(path: Path, megabytes: float, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    base = np.array(" ".join(synthetic_documents(200, seed=seed)).split())
    target, written = int(megabytes * 1e6), 0
    with gzip.open(path, "wt", encoding="utf-8", compresslevel=1) as handle:
        while written < target:  # 1,000 documents per round, built with numpy
            codes = rng.integers(97, 123, size=(100_000, 8), dtype=np.uint8)
            rand = codes.view("S8").ravel().astype(str)
            words = np.where(rng.random(100_000) < 0.5, rand, base[rng.integers(0, base.size, size=100_000)])
            lines = "".join(json.dumps({"text": " ".join(doc)}) + "\n" for doc in words.reshape(1000, 100))
            handle.write(lines)
            written += len(lines)
    return path


def _tokenizer(root: Path) -> Path:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(synthetic_documents(300, seed=1), trainers.BpeTrainer(
        vocab_size=800, special_tokens=list(SPECIAL_TOKENS.values()), initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    (root / "tok").mkdir()
    tok.save(str(root / "tok" / "tokenizer.json"))
    return root / "tok"


def _peak_rss_mb(corpus: Path, tok: Path, prefix: Path) -> float:
    cmd = [sys.executable, "-m", "megatron_crossbert.cli.preprocess", "--input", str(corpus), "--output-prefix",
           str(prefix), "--tokenizer", str(tok), "--workers", "2", "--append-eod", "--no-progress"]
    result = measure("preprocess", cmd, corpus.stat().st_size, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert result.rc == 0, result.note
    return result.peak_rss_mb


@pytest.mark.timeout(1800)
def test_peak_rss_bounded_and_flat(tmp_path):
    tok = _tokenizer(tmp_path)
    small = _peak_rss_mb(write_corpus(tmp_path / "small.jsonl.gz", SIZE_MB / 4), tok, tmp_path / "small")
    full = _peak_rss_mb(write_corpus(tmp_path / "full.jsonl.gz", SIZE_MB, seed=1), tok, tmp_path / "full")
    print(f"peak RSS: {SIZE_MB / 4:g} MB corpus {small:.0f} MB, {SIZE_MB:g} MB corpus {full:.0f} MB")
    assert full < PEAK_BOUND_MB
    assert full - small < GROWTH_BOUND_MB
