"""Training a vocabulary from JSONL: sentencepiece (BPE / unigram) or HF ``tokenizers`` WordPiece.

All three produce the same kind of artefact, a :class:`~megatron_crossbert.data.tokenizers.tokenizer.Tokenizer`
whose backend is a ``tokenizers.Tokenizer`` (saved as ``tokenizer.json``). Special tokens take ids
0..5 in the order of ``SPECIAL_TOKENS`` ([PAD], [UNK], [CLS], [SEP], [MASK], [EOD]).

Sentencepiece models are converted with transformers' ``SpmConverter.build_tokenizer_from_spm_proto``,
which reproduces sentencepiece's normalizer spec (NFKC charsmap, whitespace handling, dummy
prefix), so ``tokenizer.json`` gives the same ids as ``SentencePieceProcessor.encode`` on ordinary
text; tests check this. Known difference: a literal special-token string such as ``"[CLS]"``
inside text next to spaces: the fast tokenizer isolates it before normalising whitespace.

Sentencepiece trains on lines rather than whole documents: it silently drops training sentences
longer than ``max_sentence_length`` bytes, which would drop most long documents.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Iterator, Sequence
from itertools import islice
from pathlib import Path

import tokenizers
from tokenizers import decoders, models, normalizers, pre_tokenizers, trainers

from megatron_crossbert.data.jsonl import iter_texts
from megatron_crossbert.data.tokenizers.tokenizer import (
    SPECIAL_TOKENS, Tokenizer, add_bert_post_processor, register_special_tokens, resolve_special_ids,
    tokenizer_from_spm,
)
from megatron_crossbert.outputs import staged_dir

MODEL_TYPES = ("wordpiece", "bpe", "unigram")
_SPM_MAX_SENTENCE_BYTES = 16384


def _spm_lines(texts: Iterable[str]) -> Iterator[str]:
    for text in texts:
        for line in text.splitlines():
            if line.strip():
                yield line[:_SPM_MAX_SENTENCE_BYTES // 4]


def train_sentencepiece(texts: Iterable[str], vocab_size: int, model_type: str, workdir: Path,
                        max_sentences: int = 5_000_000) -> Path:
    """Train a sentencepiece model; returns the ``.model`` path. ``hard_vocab_limit`` is off so a
    small corpus yields a smaller vocabulary instead of an error."""
    import sentencepiece as spm

    specials = list(SPECIAL_TOKENS.values())
    prefix = workdir / "spm"
    spm.SentencePieceTrainer.train(
        sentence_iterator=islice(_spm_lines(texts), max_sentences), model_prefix=str(prefix),
        vocab_size=vocab_size, model_type=model_type, character_coverage=0.9999,
        pad_id=0, pad_piece=specials[0], unk_id=1, unk_piece=specials[1], bos_id=-1, eos_id=-1,
        user_defined_symbols=specials[2:], hard_vocab_limit=False, max_sentence_length=_SPM_MAX_SENTENCE_BYTES,
        num_threads=2, minloglevel=2, shuffle_input_sentence=False)
    return prefix.with_suffix(".model")


def train_wordpiece(texts: Iterable[str], vocab_size: int, lowercase: bool = False) -> tokenizers.Tokenizer:
    """BERT-style WordPiece (BertNormalizer + BertPreTokenizer), special tokens first."""
    backend = tokenizers.Tokenizer(models.WordPiece(unk_token=SPECIAL_TOKENS["unk"], max_input_chars_per_word=100))
    backend.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                    strip_accents=None if lowercase else False, lowercase=lowercase)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.decoder = decoders.WordPiece(prefix="##")
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS.values()),
                                        min_frequency=2, show_progress=False)
    backend.train_from_iterator(texts, trainer=trainer)
    return backend


def train_tokenizer(inputs: Sequence[str], output_dir: str | Path, *, model_type: str = "unigram",
                    vocab_size: int = 32768, json_key: str = "text", max_docs: int | None = None,
                    lowercase: bool = False) -> Tokenizer:
    """Train on the ``json_key`` texts of JSONL(.gz) ``inputs`` and save to ``output_dir``. The files are
    written into a hidden stage first (``outputs.staged_dir``): a full disk leaves ``output_dir`` as it
    was, never a 0-byte ``tokenizer.json`` that looks whole."""
    if model_type not in MODEL_TYPES:
        raise ValueError(f"model_type must be one of {MODEL_TYPES}, got {model_type!r}")
    if vocab_size <= len(SPECIAL_TOKENS):
        raise ValueError(f"vocab_size must exceed the {len(SPECIAL_TOKENS)} special tokens, got {vocab_size}")
    if lowercase and model_type != "wordpiece":
        raise ValueError("--lowercase is only supported for wordpiece (sentencepiece normalises with NFKC)")
    texts = iter_texts(inputs, key=json_key, max_docs=max_docs)
    with tempfile.TemporaryDirectory() as tmp:
        if model_type == "wordpiece":
            backend = train_wordpiece(texts, vocab_size, lowercase=lowercase)
            register_special_tokens(backend)
            add_bert_post_processor(backend, SPECIAL_TOKENS["cls"], SPECIAL_TOKENS["sep"])
            tokenizer = Tokenizer(backend=backend, special_ids=resolve_special_ids(backend, {}, "wordpiece"))
        else:
            tokenizer = tokenizer_from_spm(train_sentencepiece(texts, vocab_size, model_type, Path(tmp)))
        with staged_dir(output_dir, force=True, what="the tokenizer", merge=True) as stage:
            tokenizer.save(stage)
    if model_type != "wordpiece":
        tokenizer.spm_model = Path(output_dir) / "sentencepiece.model"
    return tokenizer
