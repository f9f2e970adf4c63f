"""Encode very long documents in pieces with the same ids, so memory follows the piece, not the document.

HF ``tokenizers`` keeps, per document, the normalized string with an alignment per byte, every
pre-token's own copy and per-token offsets, strings and masks: measured, ~120 bytes of peak memory per
input byte, so one 50 MB line uncut takes 5.9 GiB (gigatoken needs ~8). A document longer
than :data:`PIECE_CHARS` is therefore cut into pieces, each cut placed just before a whitespace
character followed by a non-whitespace one (where byte-level BPE, WordPiece and Unigram
pre-tokenizers split anyway); the pieces are encoded a few at a time and their ids concatenated.

Identity is verified, not assumed: :func:`pieces_are_exact` encodes sample texts whole and in tiny
pieces and compares, and only a tokenizer that passes gets pieces (``encoding.choose_encoder``). For
any other the encoder is used as is, memory then bounded by ``--max-document-bytes`` alone, and the
log says so. The sample the backends are checked on is cut to :data:`SAMPLE_CHARS` per text first
(:func:`cap_sample`): a check needs variety, not length, and a huge first document cost the whole
5.9 GiB in that check alone.
"""

from __future__ import annotations

import logging
import re

import numpy as np

logger = logging.getLogger(__name__)

PIECE_CHARS = 1 << 20
"""Characters per piece: one piece's encode stays well under 200 MiB with either backend."""
SAMPLE_CHARS = 1 << 16
"""Sample texts a backend is verified on are cut to this length."""
PROBE_CHARS, PROBE_TEXTS, PROBE_TEXT_CHARS = 64, 64, 4096
"""The identity check cuts up to 64 sample texts of up to 4 Ki characters into 64-character pieces."""
_CUT = re.compile(r"\s(?=\S)")


def split_pieces(text: str, piece_chars: int = PIECE_CHARS) -> list[str]:
    """``text`` as consecutive pieces of at most ``piece_chars`` (longer only where no cut is possible)."""
    pieces, start = [], 0
    while len(text) - start > piece_chars:
        cuts = [m.start() for m in _CUT.finditer(text, start + 1, start + piece_chars + 1)]
        if cuts:
            cut = cuts[-1]
        else:  # no whitespace in the window: cut at the next possible place after it
            match = _CUT.search(text, start + piece_chars)
            if match is None:
                break
            cut = match.start()
        pieces.append(text[start:cut])
        start = cut
    pieces.append(text[start:])
    return pieces


def cap_sample(texts: list[str], limit: int = SAMPLE_CHARS) -> list[str]:
    """Sample texts cut to ``limit`` characters at a whitespace cut (a backend check's input)."""
    return [t if len(t) <= limit else split_pieces(t, limit)[0] for t in texts]


class PiecewiseEncoder:
    """An encoder whose texts longer than ``piece_chars`` are encoded piece by piece (same ids)."""

    def __init__(self, inner, piece_chars: int = PIECE_CHARS, batch: int = 4) -> None:
        self.inner, self.name, self.piece_chars, self.batch = inner, inner.name, piece_chars, batch

    def _encode_long(self, text: str) -> np.ndarray:
        pieces = split_pieces(text, self.piece_chars)
        parts = [self.inner.encode(pieces[i:i + self.batch])[0] for i in range(0, len(pieces), self.batch)]
        return np.concatenate(parts).astype(np.int64, copy=False)

    def encode(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        long = [i for i, text in enumerate(texts) if len(text) > self.piece_chars]
        if not long:
            return self.inner.encode(texts)
        short = [i for i, text in enumerate(texts) if len(text) <= self.piece_chars]
        per_doc: list[np.ndarray | None] = [None] * len(texts)
        if short:
            flat, lengths = self.inner.encode([texts[i] for i in short])
            for i, ids in zip(short, np.split(flat, np.cumsum(lengths)[:-1])):
                per_doc[i] = ids
        for i in long:
            per_doc[i] = self._encode_long(texts[i])
        lengths = np.fromiter((ids.size for ids in per_doc), dtype=np.int64, count=len(per_doc))
        return np.concatenate(per_doc).astype(np.int64, copy=False), lengths


def pieces_are_exact(encoder, sample: list[str]) -> bool:
    """True when encoding in pieces (cut every ~64 characters) gives exactly the whole-text ids."""
    texts = [t[:PROBE_TEXT_CHARS] for t in sample if len(t) > PROBE_CHARS][:PROBE_TEXTS]
    texts = texts or ["a b  c\td\n\ne  " * 40]
    whole_flat, whole_len = encoder.encode(texts)
    part_flat, part_len = PiecewiseEncoder(encoder, PROBE_CHARS, batch=256).encode(texts)
    return np.array_equal(whole_len, part_len) and np.array_equal(whole_flat, part_flat)


def with_pieces(encoder, sample: list[str]):
    """The encoder to use: piecewise when verified exact on ``sample``, else the encoder itself."""
    if pieces_are_exact(encoder, sample):
        return PiecewiseEncoder(encoder)
    logger.warning("encoding long documents in pieces changes this tokenizer's ids, so documents are encoded whole: "
                   "memory is bounded by --max-document-bytes only")
    return encoder
