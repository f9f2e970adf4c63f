"""Text pairs to train a pooler on: a JSONL file of positives, or spans cut from the same document of a corpus.

The default source is a corpus, not a labelled set: two spans cut independently from one document are a
positive pair, every other document's span in the batch a negative (Contriever, Izacard et al. 2022,
"independent cropping"). A labelled paraphrase set works too (MRPC's train paraphrases as JSONL), but the
obvious one, STSBenchmark's train split, holds test pairs of every STS12-16 set, so pairs are always checked
against the test sets first (``leaks.py``).
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

PAIR_COLUMNS = (("anchor", "positive"), ("sentence1", "sentence2"), ("text", "text_pair"), ("query", "document"))
"""Accepted (first, second) column names of a pairs JSONL file, sentence-transformers' first."""


@dataclass(frozen=True)
class TextPairs:
    """Positive pairs; row i of ``anchors`` and of ``positives`` belong together."""

    anchors: list[str]
    positives: list[str]
    source: str
    """Where they came from, for the report (a file, or ``spans of N documents of FILES``)."""

    def __post_init__(self) -> None:
        if len(self.anchors) != len(self.positives):
            raise ValueError(f"{self.source}: {len(self.anchors)} anchors but {len(self.positives)} positives")
        if len(self.anchors) < 2:
            raise ValueError(f"{self.source}: an in-batch contrastive loss needs at least 2 pairs, "
                             f"got {len(self.anchors)}")

    def __len__(self) -> int:
        return len(self.anchors)


def read_pairs(path: str | Path) -> TextPairs:
    """A JSONL file with one pair per line under one of ``PAIR_COLUMNS``; a line without it is an error."""
    path = Path(path)
    anchors, positives = [], []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            row = json.loads(line)
            names = next((pair for pair in PAIR_COLUMNS if isinstance(row, dict) and all(n in row for n in pair)),
                         None)
            if names is None:
                raise ValueError(f"{path}:{number}: needs one of the column pairs {PAIR_COLUMNS}")
            anchors.append(str(row[names[0]]))
            positives.append(str(row[names[1]]))
    return TextPairs(anchors, positives, str(path))


def corpus_documents(files: Sequence[str | Path]) -> Iterator[str]:
    """The ``text`` of every line of JSONL(.gz) corpus files (Megatron preprocess input)."""
    for file in files:
        opener = gzip.open if str(file).endswith(".gz") else open
        with opener(file, "rt", encoding="utf-8") as handle:
            for line in handle:
                if line.strip():
                    yield str(json.loads(line).get("text") or "")


def crop(words: list[str], rng: np.random.Generator, span: tuple[int, int]) -> str:
    """A random run of ``span[0]..span[1]`` words of ``words`` (all of them when shorter)."""
    length = min(len(words), int(rng.integers(span[0], span[1] + 1)))
    start = int(rng.integers(0, len(words) - length + 1))
    return " ".join(words[start:start + length])


def span_pairs(files: Sequence[str | Path], n_pairs: int, *, seed: int = 0,
               span: tuple[int, int] = (8, 32)) -> TextPairs:
    """``n_pairs`` pairs of two spans cut independently from one document each; documents drawn at random
    among those with at least ``2 * span[0]`` words (one pair per document)."""
    if n_pairs < 2 or not 1 <= span[0] <= span[1]:
        raise ValueError(f"span pairs: need n_pairs >= 2 and 1 <= min <= max words, got {n_pairs}, {span}")
    docs = [words for text in corpus_documents(files) if len(words := text.split()) >= 2 * span[0]]
    if len(docs) < 2:
        raise ValueError(f"{', '.join(map(str, files))}: fewer than 2 documents of {2 * span[0]}+ words")
    rng = np.random.default_rng(seed)
    chosen = rng.choice(len(docs), size=min(n_pairs, len(docs)), replace=False)
    anchors = [crop(docs[i], rng, span) for i in chosen]
    positives = [crop(docs[i], rng, span) for i in chosen]
    return TextPairs(anchors, positives, f"spans ({span[0]}-{span[1]} words) of {len(chosen)} documents of "
                                         f"{', '.join(Path(f).name for f in files)}")
