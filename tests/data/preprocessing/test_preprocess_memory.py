"""Peak RSS of a preprocessing run stays bounded and does not grow with the corpus.

The corpus is generated at test time: ``CROSSBERT_PREPROCESS_MEM_MB`` MB (default 6, for CI; a
200 MB measurement is ``CROSSBERT_PREPROCESS_MEM_MB=200``), and a quarter of that for the
comparison. Half of each document's words are random letter strings, so the number of distinct
words (what gigatoken's caches grow with) rises with the size, unlike natural text.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from megatron_crossbert.benchmarking.preprocess import measure
from tests.support import REPO_ROOT
from tests.support.synthetic_text import train_byte_bpe, write_sized_corpus

SIZE_MB = float(os.environ.get("CROSSBERT_PREPROCESS_MEM_MB", "6"))
PEAK_BOUND_MB = 450
"""Whole-run peak RSS bound (interpreter + tokenizers + gigatoken/awkward + chunk buffers)."""
GROWTH_BOUND_MB = 128 + 40
"""Allowed peak difference between the full corpus and a quarter of it: gigatoken's cache budget
(``GigatokenEncoder.budget_mb``, after which the encoder is rebuilt) plus slack."""


def _peak_rss_mb(corpus: Path, tok: Path, prefix: Path) -> float:
    cmd = [sys.executable, "-m", "megatron_crossbert.cli.preprocess", "--input", str(corpus), "--output-prefix",
           str(prefix), "--tokenizer", str(tok), "--workers", "2", "--append-eod", "--no-progress"]
    result = measure("preprocess", cmd, corpus.stat().st_size, env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)))
    assert result.rc == 0, result.note
    return result.peak_rss_mb


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_peak_rss_bounded_and_flat(tmp_path):
    tok = train_byte_bpe(tmp_path)
    small = _peak_rss_mb(write_sized_corpus(tmp_path / "small.jsonl.gz", SIZE_MB / 4), tok, tmp_path / "small")
    full = _peak_rss_mb(write_sized_corpus(tmp_path / "full.jsonl.gz", SIZE_MB, seed=1), tok, tmp_path / "full")
    print(f"peak RSS: {SIZE_MB / 4:g} MB corpus {small:.0f} MB, {SIZE_MB:g} MB corpus {full:.0f} MB")
    assert full < PEAK_BOUND_MB
    assert full - small < GROWTH_BOUND_MB
