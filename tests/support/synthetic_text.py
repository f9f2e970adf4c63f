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
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from megatron_crossbert.data.tokenizers.tokenizer import SPECIAL_TOKENS

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


def write_sized_corpus(path: Path, megabytes: float, seed: int = 0) -> Path:
    """A gzip JSONL corpus of about ``megabytes`` MB: half of each document's words random letter strings, so
    the number of distinct words grows with the size (unlike natural text)."""
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


def train_byte_bpe(root: Path) -> Path:
    """An 800-token byte-level BPE ``tokenizer.json`` in ``root/tok`` (the project's special tokens first)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(synthetic_documents(300, seed=1), trainers.BpeTrainer(
        vocab_size=800, special_tokens=list(SPECIAL_TOKENS.values()),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    (root / "tok").mkdir()
    tok.save(str(root / "tok" / "tokenizer.json"))
    return root / "tok"
