"""Encoding backends for preprocessing: gigatoken where it is exact, HF ``tokenizers`` otherwise.

Both turn a batch of texts into ``(flat_ids, lengths)`` numpy arrays, with the ids HF
``tokenizers`` gives for ``encode(text, add_special_tokens=False)``. That is the contract, so the
``.bin`` files are the same bytes whichever backend ran and for any thread count.

- ``gigatoken`` (byte-level BPE, SentencePiece-style BPE with byte fallback) is several times
  faster. It is trusted only after :func:`verify` found the same ids as ``tokenizers`` on a
  probe set plus a sample of the real input; otherwise :func:`choose_encoder` falls back, saying
  why. Its encode caches grow with the distinct words of the input seen so far, so the encoder is
  rebuilt when RSS has grown by a budget (bounded RSS, output unchanged).
- ``tokenizers`` uses ``encode_batch_fast`` (no offsets) on Rust threads in this process.

Threads: both Rust libraries size their global pool from ``RAYON_NUM_THREADS`` when first used;
:func:`set_threads` sets it (``--workers``) before anything encodes.
"""

from __future__ import annotations

import logging
import os
from itertools import chain
from typing import Protocol

import numpy as np

from megatron_crossbert.data.preprocessing.pieces import PiecewiseEncoder, cap_sample, with_pieces
from megatron_crossbert.data.tokenizers.tokenizer import Tokenizer

logger = logging.getLogger(__name__)

BACKENDS = ("auto", "gigatoken", "tokenizers")

PROBE_TEXTS = (
    "Hello, world! The quick brown fox jumps over the lazy dog.",
    "  leading and trailing spaces  ", "tabs\tand\nnew\r\nlines\n\n", "Ünïcödé façade naïve — “quotes” …",
    "日本語のテキスト、中文文本，한국어 텍스트", "emoji 😀🎉👩‍👩‍👧 and symbols ∑∫√∞ ©®™", "numbers 1234567890 3.14159 1e-10",
    "don't won't I'm they're y'all", "[CLS] [SEP] [MASK] [PAD] [UNK] [EOD] <s></s><|endoftext|>",
    "a" * 3000, "x", " ", "\u200b\u00a0\ufeffzero width", "Ελληνικά Русский עברית العربية हिन्दी",
)
"""Edge cases checked before gigatoken is trusted (the sample of the real input is checked too)."""


class Encoder(Protocol):
    name: str

    def encode(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """``(flat int64 ids, int64 length per text)``."""


def set_threads(threads: int) -> None:
    """Size the Rust thread pools (must run before the first encode in this process)."""
    os.environ["RAYON_NUM_THREADS"] = str(max(1, threads))
    os.environ["TOKENIZERS_PARALLELISM"] = "true" if threads > 1 else "false"


class TokenizersEncoder:
    """HF ``tokenizers`` ``encode_batch_fast``: the reference ids."""

    name = "tokenizers"

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.backend = tokenizer.backend

    def encode(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        ids = [enc.ids for enc in self.backend.encode_batch_fast(texts, add_special_tokens=False)]
        lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        flat = np.fromiter(chain.from_iterable(ids), dtype=np.int64, count=int(lengths.sum()))
        return flat, lengths


def _rss_mb() -> float | None:
    """Current resident set of this process (Linux ``/proc``); None where unavailable."""
    try:
        with open("/proc/self/statm", "rb") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return None


class GigatokenEncoder:
    """gigatoken's batch encode, rebuilt when its caches have grown (ids are unchanged by a rebuild).

    gigatoken caches every distinct pre-token it has encoded, without bound. The encoder is rebuilt
    when this process's RSS is ``budget_mb`` above its level when the encoder was made, or (where RSS
    cannot be read) after ``refresh_chars`` characters. A rebuild costs ~0.1 CPU-s for a 32k vocabulary.
    """

    name = "gigatoken"

    def __init__(self, tokenizer: Tokenizer, threads: int, budget_mb: float = 128,
                 min_gap_chars: int = 16 << 20, refresh_chars: int = 256 << 20) -> None:
        import gigatoken

        self._json = tokenizer.backend.to_str()
        self._make = gigatoken.Tokenizer.from_json
        self.parallel = threads > 1
        self.budget_mb, self.min_gap_chars, self.refresh_chars = budget_mb, min_gap_chars, refresh_chars
        self.rebuilds = 0
        self._tok = self._make(self._json)
        self._since, self._base = 0, _rss_mb()

    def _maybe_rebuild(self) -> None:
        """Rebuild when RSS is ``budget_mb`` over its level at creation (not ratcheted up, so memory
        stays bounded), at most once per ``min_gap_chars`` characters (a rebuild that frees little
        cannot make every batch pay for one)."""
        if self._since < min(self.min_gap_chars, self.refresh_chars):
            return
        rss = _rss_mb() if self._base is not None else None
        if (rss - self._base >= self.budget_mb) if rss is not None else self._since >= self.refresh_chars:
            self._tok = None  # free the old caches before building the new encoder
            self._tok, self._since, self.rebuilds = self._make(self._json), 0, self.rebuilds + 1

    def encode(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        import awkward as ak

        self._maybe_rebuild()
        self._since += sum(map(len, texts))
        out = self._tok.encode_batch(texts, parallel=self.parallel)
        lengths = np.asarray(ak.num(out, axis=1), dtype=np.int64)
        flat = np.asarray(ak.flatten(out), dtype=np.int64)
        return flat, lengths


def _mismatch(reference: Encoder, candidate: Encoder, texts: list[str]) -> str | None:
    """First text on which the two encoders disagree, described in one line; None if none."""
    ref_flat, ref_len = reference.encode(texts)
    got_flat, got_len = candidate.encode(texts)
    if np.array_equal(ref_len, got_len) and np.array_equal(ref_flat, got_flat):
        return None
    ref_ends, got_ends = np.cumsum(ref_len), np.cumsum(got_len)
    for i, text in enumerate(texts):
        a = ref_flat[ref_ends[i] - ref_len[i]:ref_ends[i]]
        b = got_flat[got_ends[i] - got_len[i]:got_ends[i]]
        if not np.array_equal(a, b):
            return f"text {i} ({text[:40]!r}...): tokenizers {a[:8].tolist()}..., gigatoken {b[:8].tolist()}..."
    return "batch outputs differ"


def verify(reference: Encoder, candidate: Encoder, sample: list[str]) -> str | None:
    """None when ``candidate`` gives ``reference``'s ids on the probe texts and ``sample``."""
    return _mismatch(reference, candidate, list(PROBE_TEXTS) + list(sample))


def _first_line(exc: Exception) -> str:
    return f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:120]}"


def _try_gigatoken(tokenizer: Tokenizer, threads: int, sample: list[str]) -> tuple[Encoder | None, str]:
    try:
        candidate = GigatokenEncoder(tokenizer, threads)
    except ImportError:
        return None, "gigatoken is not installed"
    except Exception as exc:  # noqa: BLE001 (gigatoken refuses unsupported models with various errors)
        return None, f"gigatoken does not support this tokenizer ({_first_line(exc)})"
    try:
        problem = verify(TokenizersEncoder(tokenizer), candidate, sample)
    except Exception as exc:  # noqa: BLE001 (an encode that fails on the sample is a refusal too)
        problem = f"the sample ({_first_line(exc)})"
    if problem is not None:
        return None, f"gigatoken ids differ from tokenizers on {problem}"
    return candidate, f"gigatoken matches tokenizers on {len(PROBE_TEXTS) + len(sample)} probe/sample texts"


def choose_encoder(tokenizer: Tokenizer, backend: str, threads: int, sample: list[str]) -> Encoder:
    """The one place a backend is picked. ``auto``: gigatoken if it loads and verifies, else
    tokenizers. ``gigatoken``: the same check, but a failure is an error. Either way very long
    documents are then encoded in pieces where that is verified to give the same ids (``pieces``);
    the sample is cut to ``pieces.SAMPLE_CHARS`` per text first."""
    sample = cap_sample(sample)
    return with_pieces(_pick(tokenizer, backend, threads, sample), sample)


def _pick(tokenizer: Tokenizer, backend: str, threads: int, sample: list[str]) -> Encoder:
    if backend not in BACKENDS:
        raise ValueError(f"--backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    set_threads(threads)
    if backend == "tokenizers":
        logger.info("encoding backend: tokenizers (requested), %d thread(s)", threads)
        return make_encoder(tokenizer, "tokenizers", threads)
    encoder, why = _try_gigatoken(tokenizer, threads, sample)
    if encoder is None and backend == "gigatoken":
        raise ValueError(f"--backend gigatoken: {why}")
    if encoder is None:
        logger.warning("encoding backend: tokenizers, %d thread(s) (%s)", threads, why)
        return TokenizersEncoder(tokenizer)
    logger.info("encoding backend: gigatoken, %d thread(s) (%s)", threads, why)
    return encoder


def make_encoder(tokenizer: Tokenizer, backend: str, threads: int, pieces: bool = False) -> Encoder:
    """An encoder by name, without verification (pool workers rebuild the parent's verified choice,
    ``pieces`` included)."""
    encoder = GigatokenEncoder(tokenizer, threads) if backend == "gigatoken" else TokenizersEncoder(tokenizer)
    return PiecewiseEncoder(encoder) if pieces else encoder
