"""Where a preprocessing tokenizer comes from: our/HF directories, or Megatron-LM's tokenizer flags.

Megatron-LM users name tokenizers with ``--tokenizer-type`` plus ``--tokenizer-model DIR`` or
``--vocab-file vocab.txt``. :func:`resolve_megatron_tokenizer` maps the types we can reproduce
exactly onto a ``(path, kind)`` pair and refuses the rest in one line; :func:`open_tokenizer`
loads such a pair (in the parent and in pool workers alike, so both see the same tokenizer).

``kind`` ``"auto"`` is :func:`~megatron_crossbert.data.tokenizers.tokenizer.load_tokenizer` on ``path``;
``"bert-lower"`` / ``"bert-cased"`` build BERT's WordPiece (BertNormalizer with or without
lowercasing and accent stripping, BertPreTokenizer, ``##`` continuation) from a ``vocab.txt``,
like Megatron-LM's ``BertWordPieceLowerCase`` / ``BertWordPieceCase``.
"""

from __future__ import annotations

from pathlib import Path

TOKENIZER_KINDS = ("auto", "bert-lower", "bert-cased")

MEGATRON_TYPES = {"HuggingFaceTokenizer": "auto", "BertWordPieceLowerCase": "bert-lower",
                  "BertWordPieceCase": "bert-cased"}
"""Megatron-LM ``--tokenizer-type`` values we accept -> our kind."""


def resolve_megatron_tokenizer(tokenizer_type: str | None, tokenizer_model: str | None, vocab_file: str | None,
                               tokenizer: str | None) -> tuple[str, str]:
    """``(path, kind)`` from Megatron-LM-style flags (or our ``--tokenizer``); ValueError in one line."""
    if tokenizer_type is None:
        path = tokenizer or tokenizer_model
        if not path:
            raise ValueError("no tokenizer: pass --tokenizer DIR (or Megatron-LM's --tokenizer-type "
                             "HuggingFaceTokenizer --tokenizer-model DIR)")
        return path, "auto"
    kind = MEGATRON_TYPES.get(tokenizer_type)
    if kind is None:
        raise ValueError(f"--tokenizer-type {tokenizer_type} is not supported (supported: "
                         f"{', '.join(MEGATRON_TYPES)}); convert it to a Hugging Face tokenizer directory with a "
                         "tokenizer.json and pass --tokenizer-type HuggingFaceTokenizer --tokenizer-model DIR")
    path = vocab_file if kind != "auto" else (tokenizer_model or tokenizer)
    if not path:
        needed = "--vocab-file vocab.txt" if kind != "auto" else "--tokenizer-model DIR"
        raise ValueError(f"--tokenizer-type {tokenizer_type} needs {needed}")
    return path, kind


def _bert_wordpiece(vocab_file: Path, lowercase: bool):
    import tokenizers
    from tokenizers import decoders, models, normalizers, pre_tokenizers

    if not vocab_file.is_file():
        raise FileNotFoundError(f"vocab file not found: {vocab_file}")
    backend = tokenizers.Tokenizer(models.WordPiece.from_file(str(vocab_file), unk_token="[UNK]"))
    backend.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                    strip_accents=lowercase, lowercase=lowercase)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.decoder = decoders.WordPiece(prefix="##")
    return backend


def open_tokenizer(path: str | Path, kind: str = "auto"):
    """The project :class:`~megatron_crossbert.data.tokenizers.tokenizer.Tokenizer` for ``(path, kind)``."""
    from megatron_crossbert.data.tokenizers.tokenizer import (
        SPECIAL_TOKENS, Tokenizer, add_bert_post_processor, load_tokenizer, register_special_tokens,
        resolve_special_ids,
    )

    if kind not in TOKENIZER_KINDS:
        raise ValueError(f"tokenizer kind must be one of {', '.join(TOKENIZER_KINDS)}, got {kind!r}")
    if kind == "auto":
        return load_tokenizer(path)
    backend = _bert_wordpiece(Path(path), lowercase=kind == "bert-lower")
    register_special_tokens(backend)
    add_bert_post_processor(backend, SPECIAL_TOKENS["cls"], SPECIAL_TOKENS["sep"])
    return Tokenizer(backend=backend, special_ids=resolve_special_ids(backend, {}, str(path)))
