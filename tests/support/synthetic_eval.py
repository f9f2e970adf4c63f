"""Tiny generated evaluation data and a tiny random encoder, for the tests (a test helper, not library code).

Third-party text may not be committed, so tests build their fixtures here at run time:
- ``write_glue_fixture(dir)``: every GLUE task in the exact glue_data layouts and quirks
  (header-less CoLA, BOM + unbalanced quotes in MRPC, 10-column STS-B with float scores, a
  malformed QQP row, MNLI train / dev_matched / dev_mismatched with annotator columns).
- ``write_jsonl_task(dir, ...)``: a ``{text, label}`` task whose label is planted in the words, so a
  working probe must beat chance and a probe on shuffled labels must not.
- ``write_sts_jsonl(path)``: ``{text, text_pair, score}`` pairs for local MTEB STS.
- ``write_mteb_lite_fixture(dir)``: a benchmark directory in the MTEB-lite layout (STS folders
  ``{sentence1, sentence2, score}``, a classification folder ``{text, label}`` with train and test).
- ``build_tiny_hf_encoder(dir)``: a randomly initialised 2-layer BERT with a word-level vocab, saved
  with its tokenizer so ``AutoModel``/``AutoTokenizer`` load it offline.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Sequence

POSITIVE = ("good", "great", "fine", "lovely", "superb", "happy", "bright", "warm")
NEGATIVE = ("bad", "awful", "poor", "dull", "grim", "sad", "dark", "cold")
NEUTRAL = ("the", "a", "film", "day", "story", "was", "very", "and", "it", "of", "this", "one", "really", "quite")
SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


Vocab = tuple[Sequence[str], Sequence[str], Sequence[str]]  # (negative, positive, neutral) words


def planted_sentence(rng: random.Random, label: int, length: int = 8, words: Vocab | None = None) -> str:
    """Neutral filler plus two words from the label's word list (the planted signal)."""
    negative, positive, neutral = words or (NEGATIVE, POSITIVE, NEUTRAL)
    words = [rng.choice(neutral) for _ in range(length - 2)]
    words += [rng.choice(positive if label else negative) for _ in range(2)]
    rng.shuffle(words)
    return " ".join(words)


def _write(path: Path, lines: list[str], bom: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(("\ufeff" if bom else "") + "\n".join(lines) + "\n", encoding="utf-8")


def _glue_rows(rng: random.Random, n: int) -> list[tuple[str, str, int]]:
    return [(planted_sentence(rng, i % 2), planted_sentence(rng, i % 2), i % 2) for i in range(n)]


def _write_pair_tasks(root: Path, rng: random.Random, n: int) -> None:
    nli = ("not_entailment", "entailment")
    for split in ("train", "dev"):
        rows = _glue_rows(rng, n)
        _write(root / "MRPC" / f"{split}.tsv", ["Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"] +
               [f"{y}\t{100 + i}\t{200 + i}\t\"{a}\t{b}" for i, (a, b, y) in enumerate(rows)], bom=True)
        _write(root / "STS-B" / f"{split}.tsv",
               ["index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore"] +
               [f"{i}\tmain-captions\tMSRvid\t2012test\t{i:04d}\tnone\tnone\t{a}\t{b}\t{y * 4 + 0.25 * (i % 4):.3f}"
                for i, (a, b, y) in enumerate(rows)])
        _write(root / "QQP" / f"{split}.tsv", ["id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate"] +
               [f"{i}\t{2 * i}\t{2 * i + 1}\t{a}\t{b}\t{y}" for i, (a, b, y) in enumerate(rows)] + ["999\tbroken row"])
        for task, header in (("QNLI", "index\tquestion\tsentence\tlabel"), ("RTE", "index\tsentence1\tsentence2\tlabel")):
            _write(root / task / f"{split}.tsv", [header] + [f"{i}\t{a}\t{b}\t{nli[y]}" for i, (a, b, y) in enumerate(rows)])
        _write(root / "WNLI" / f"{split}.tsv", ["index\tsentence1\tsentence2\tlabel"] +
               [f"{i}\t{a}\t{b}\t{y}" for i, (a, b, y) in enumerate(rows)])


def _write_mnli(root: Path, rng: random.Random, n: int) -> None:
    labels = ("contradiction", "entailment", "neutral")
    base = "index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\tsentence1_parse\tsentence2_parse"
    for name, annot in (("train", ["label1"]), ("dev_matched", [f"label{k}" for k in range(1, 6)]),
                        ("dev_mismatched", [f"label{k}" for k in range(1, 6)])):
        lines = [base + "\tsentence1\tsentence2\t" + "\t".join(annot) + "\tgold_label"]
        for i, (a, b, _) in enumerate(_glue_rows(rng, n)):
            gold = labels[i % 3]
            lines.append(f"{i}\t{i}\t{i}n\tfiction\t( {a} )\t( {b} )\t(ROOT {a})\t(ROOT {b})\t{a}\t{b}\t"
                         + "\t".join([gold] * len(annot)) + f"\t{gold}")
        _write(root / "MNLI" / f"{name}.tsv", lines)


def write_glue_fixture(root: str | Path, n: int = 24, seed: int = 0) -> Path:
    """Write every GLUE task (train + dev) with ``n`` rows each in the original layouts; returns root."""
    root, rng = Path(root), random.Random(seed)
    for split in ("train", "dev"):
        rows = _glue_rows(rng, n)
        _write(root / "CoLA" / f"{split}.tsv", [f"gj04\t{y}\t\t{a}" for a, _, y in rows])
        _write(root / "SST-2" / f"{split}.tsv", ["sentence\tlabel"] + [f"{a} \t{y}" for a, _, y in rows])
    _write_pair_tasks(root, rng, n)
    _write_mnli(root, rng, n)
    return root


def write_jsonl_task(task_dir: str | Path, n_train: int = 120, n_test: int = 80, *, shuffle_labels: bool = False,
                     seed: int = 0, words: Vocab | None = None) -> Path:
    """A binary ``{text, label}`` task with planted signal (or with labels shuffled, i.e. no signal).

    ``words`` swaps in another vocabulary (e.g. a test tokenizer's ``w0..wN``) so no word is [UNK].
    """
    task_dir, rng = Path(task_dir), random.Random(seed)
    task_dir.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", n_train), ("test", n_test)):
        labels = [i % 2 for i in range(n)]
        texts = [planted_sentence(rng, y, words=words) for y in labels]
        if shuffle_labels:
            rng.shuffle(labels)
        _write(task_dir / f"{split}.jsonl", [json.dumps({"text": t, "label": y}) for t, y in zip(texts, labels)])
    return task_dir


def _sts_rows(n: int, seed: int) -> list[tuple[str, str, float]]:
    """Pairs scored 0-5: identical sentences get 5, same-polarity 2.5, opposite polarity 0."""
    rng, rows = random.Random(seed), []
    for i in range(n):
        a = planted_sentence(rng, i % 2)
        b, score = ((a, 5.0) if i % 3 == 0 else (planted_sentence(rng, (i // 3) % 2), None))
        rows.append((a, b, score if score is not None else (2.5 if (i // 3) % 2 == i % 2 else 0.0)))
    return rows


def write_sts_jsonl(path: str | Path, n: int = 40, seed: int = 0) -> Path:
    """``{text, text_pair, score}`` rows of ``_sts_rows``."""
    path = Path(path)
    _write(path, [json.dumps({"text": a, "text_pair": b, "score": y}) for a, b, y in _sts_rows(n, seed)])
    return path


def write_mteb_lite_fixture(root: str | Path, *, pairs: int = 30, per_label: int = 12, seed: int = 0) -> Path:
    """Two STS folders (MTEB's column names, and the older ``text``/``text_pair``) and a three-class
    ``{text, label}`` folder with train and test splits, in the MTEB-lite layout; returns ``root``."""
    root, rng = Path(root), random.Random(seed)
    for offset, (name, first, second) in enumerate((("ToySTSA", "sentence1", "sentence2"),
                                                    ("ToySTSB", "text", "text_pair"))):
        _write(root / name / "test.jsonl", [json.dumps({first: a, second: b, "score": y})
                                            for a, b, y in _sts_rows(pairs, seed + offset)])
    words = {"pos": POSITIVE, "neg": NEGATIVE, "mid": ("film", "story", "day", "one")}
    for split, n in (("train", per_label), ("test", per_label // 2)):
        rows = [{"text": " ".join(rng.choice(NEUTRAL) for _ in range(4)) + " " + " ".join(rng.sample(vocab, 2)),
                 "label": label} for _ in range(n) for label, vocab in words.items()]
        _write(root / "ToyIntents" / f"{split}.jsonl", [json.dumps(r) for r in rows])
    return root


def _save_word_tokenizer(vocab: list[str], out_dir: Path) -> None:
    """transformers 5 takes the vocab as a dict (``vocab=``); 4.x took a ``vocab_file`` path."""
    from transformers import BertTokenizerFast

    (out_dir / "vocab.txt").write_text("\n".join(vocab) + "\n")
    try:
        tokenizer = BertTokenizerFast(vocab={tok: i for i, tok in enumerate(vocab)}, do_lower_case=True)
    except TypeError:
        tokenizer = BertTokenizerFast(vocab_file=str(out_dir / "vocab.txt"), do_lower_case=True)
    tokenizer.save_pretrained(out_dir)


def build_tiny_hf_encoder(out_dir: str | Path, *, hidden: int = 32, layers: int = 2, seed: int = 0) -> Path:
    """Save a random tiny ``BertModel`` + word-level WordPiece tokenizer loadable offline by AutoModel."""
    import torch
    from transformers import BertConfig, BertModel

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    vocab = [*SPECIALS, *sorted(set(POSITIVE + NEGATIVE + NEUTRAL))]
    _save_word_tokenizer(vocab, out_dir)
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=len(vocab), hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=2,
                        intermediate_size=2 * hidden, max_position_embeddings=64)
    BertModel(config).eval().save_pretrained(out_dir)
    return out_dir
