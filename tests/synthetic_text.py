"""Small generated corpora for the tests (a test helper, not library code; no third-party text needed).

Documents are sentences of pseudo-English built from a fixed word list, with varied lengths
(some longer than a typical packed sample, so packing across samples is exercised), punctuation
and capitalisation. Deterministic in ``seed``.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np

_WORDS = (
    "the of and to in is was he for it with as his on be at by had not are but from or have an they "
    "which one you were her all she there would their we him been has when who will more no if out so "
    "said what up its about into than them can only other new some could time these two may then do "
    "first any my now such like our over man me even most made after also did many before must through "
    "years where much your way well down should because each just those people how too little state good "
    "very make world still own see men work long get here between both life being under never day same "
    "another know while last might us great old year off come since against go came right used take three "
    "river mountain engine window garden teacher question number system program market history language"
).split()


def synthetic_sentence(rng: np.random.Generator) -> str:
    words = rng.choice(_WORDS, size=int(rng.integers(4, 18))).tolist()
    words[0] = words[0].capitalize()
    if rng.random() < 0.3:
        words.insert(int(rng.integers(1, len(words))), f"{int(rng.integers(1, 2000))},")
    return " ".join(words) + str(rng.choice([".", ".", ".", "?", "!"]))


def synthetic_documents(num_docs: int, seed: int = 0, max_sentences: int = 30) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(synthetic_sentence(rng) for _ in range(int(rng.integers(1, max_sentences + 1))))
            for _ in range(num_docs)]


def write_jsonl(path: str | Path, texts: list[str], key: str = "text") -> Path:
    """Write ``{"key": text}`` lines; ``.gz`` suffix means gzip."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wt", encoding="utf-8") as handle:
        for text in texts:
            handle.write(json.dumps({key: text}) + "\n")
    return path

