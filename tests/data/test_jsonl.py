"""Pathological JSON lines are counted skips, never an aborted run; one huge line has bounded memory.

Unguarded, a line nested deeper than Python's recursion limit aborted ``crossbert-preprocess``
with a RecursionError traceback (the good lines around it lost), a lone-surrogate escape made both
encoders fail the whole batch, and one 50 MB line peaked at 5.9-6.3 GiB (HF tokenizers holds ~120
bytes per input byte; the backend check alone paid it when the line was in its sample).
"""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from megatron_crossbert.data.jsonl import OversizedLine, bounded_lines, parse_line
from megatron_crossbert.data.preprocessing import preprocess as pp
from megatron_crossbert.data.preprocessing.pieces import PiecewiseEncoder, pieces_are_exact, split_pieces
from tests.support import REPO_ROOT

HUGE_LINE_MB = float(os.environ.get("CROSSBERT_HUGE_LINE_MB", "10"))
"""The huge line's size (the measured case is ``CROSSBERT_HUGE_LINE_MB=50``: 7.3 GiB uncut, 0.7 cut)."""
HUGE_LINE_PEAK_MB = 768 * max(1.0, HUGE_LINE_MB / 20)
"""Peak RSS bound of the whole preprocessing run with one such line (before: ~145 bytes per byte, 1.5 GiB at 10 MB)."""


def test_deep_nesting_is_too_deep_not_a_crash():
    line = ('{"text": ' + "[" * 100_000 + "]" * 100_000 + "}\n").encode()
    assert parse_line(line, ["text"]) == (None, "too_deep")


def test_a_lone_surrogate_escape_is_invalid_unicode_and_a_pair_is_fine():
    assert parse_line(b'{"text": "ok \\ud800 bad"}\n', ["text"]) == (None, "invalid_unicode")
    assert parse_line(b'{"text": "pair \\ud83d\\ude00 fine"}\n', ["text"]) == ({"text": "pair \U0001F600 fine"}, None)


def test_long_lines_are_skipped_without_being_held():
    lines = [b'{"text": "a"}\n', b'{"text": "' + b"x" * 5000 + b'"}\n', b'{"text": "b"}\n', b"y" * 300]
    out = list(bounded_lines(io.BytesIO(b"".join(lines)), max_bytes=100))
    assert out[0] == lines[0] and out[2] == lines[2]
    assert isinstance(out[1], OversizedLine) and len(out[1]) == len(lines[1])
    assert isinstance(out[3], OversizedLine) and len(out[3]) == 300
    assert parse_line(out[1], ["text"]) == (None, "too_long")
    exact = b"z" * 99 + b"\n"
    assert list(bounded_lines(io.BytesIO(exact + b"q\n"), max_bytes=99)) == [exact, b"q\n"]


def test_pieces_are_cut_before_whitespace_and_rejoin():
    text = "alpha beta  gamma\tdelta\n\nepsilon " * 50
    pieces = split_pieces(text, 64)
    assert "".join(pieces) == text and max(map(len, pieces)) <= 64 and all(p[0].isspace() for p in pieces[1:])
    assert split_pieces("x" * 500, 64) == ["x" * 500]  # no whitespace: one piece


@pytest.fixture(scope="module")
def byte_bpe(tmp_path_factory) -> Path:
    """A byte-level BPE tokenizer (both backends load it), as test_preprocess_memory trains it."""
    from tests.support.synthetic_text import train_byte_bpe

    return train_byte_bpe(tmp_path_factory.mktemp("byte_bpe"))


@pytest.mark.parametrize("backend", ["tokenizers", "gigatoken"])
def test_ids_of_pieces_equal_the_whole_documents_ids(byte_bpe, text_corpus, backend):
    from megatron_crossbert.data.preprocessing.encoding import make_encoder
    from megatron_crossbert.data.tokenizers.sources import open_tokenizer

    encoder = make_encoder(open_tokenizer(str(byte_bpe), "auto"), backend, 1)
    batch = [text_corpus.texts[0], "  ".join(text_corpus.texts) + "\n\n tail", text_corpus.texts[1]]
    whole, pieces = encoder.encode(batch), PiecewiseEncoder(encoder, piece_chars=500).encode(batch)
    assert np.array_equal(whole[0], pieces[0]) and np.array_equal(whole[1], pieces[1])
    assert pieces_are_exact(encoder, text_corpus.texts)


def test_an_encoder_whose_ids_depend_on_the_whole_text_gets_no_pieces():
    class Glued:
        name = "glued"

        def encode(self, texts):
            return np.array([len(t) for t in texts], dtype=np.int64), np.ones(len(texts), dtype=np.int64)

    assert not pieces_are_exact(Glued(), ["word " * 100])


def test_bad_lines_between_good_ones_are_counted_and_the_good_ones_written(tmp_path, bpe_tokenizer, text_corpus):
    good = [json.dumps({"text": t[:300]}) for t in text_corpus.texts[:6]]
    bad = {"too_deep": '{"text": ' + "[" * 5_000 + "]" * 5_000 + "}", "invalid_unicode": '{"text": "a \\ud800"}',
           "too_long": json.dumps({"text": "word " * 5_000})}
    lines = [good[0], bad["too_deep"], good[1], good[2], bad["invalid_unicode"], good[3], bad["too_long"], *good[4:]]
    (tmp_path / "in.jsonl").write_text("\n".join(lines) + "\n")
    opts = pp.PreprocessOptions(inputs=[str(tmp_path / "in.jsonl")], output_prefix=str(tmp_path / "out"),
                                tokenizer=str(bpe_tokenizer), progress=False, max_document_bytes=20_000)
    report = pp.preprocess(opts)
    assert report["documents_written"] == 6 and report["documents_read"] == 9
    assert report["skipped_by_kind"] == {"too_deep": 1, "invalid_unicode": 1, "too_long": 1}
    assert report["first_skip_location"]["too_long"].endswith("in.jsonl:7")


@pytest.mark.slow
def test_one_huge_line_has_bounded_memory(tmp_path, byte_bpe):
    """A HUGE_LINE_MB line of words among normal documents, through the CLI (auto backend): peak RSS of
    the whole run stays under HUGE_LINE_PEAK_MB and the line's tokens are written."""
    from megatron_crossbert.benchmarking.preprocess import measure

    rng = np.random.default_rng(0)
    words = np.array("the quick brown fox jumps over a lazy dog while numbers 12 345 follow".split())
    huge = " ".join(words[rng.integers(0, words.size, int(HUGE_LINE_MB * 1e6 / 5))])
    corpus = tmp_path / "huge.jsonl"
    with open(corpus, "w") as handle:
        for text in ("a normal document", huge, "another one"):
            handle.write(json.dumps({"text": text}) + "\n")
    cmd = [sys.executable, "-m", "megatron_crossbert.cli.preprocess", "--input", str(corpus), "--output-prefix",
           str(tmp_path / "out"), "--tokenizer", str(byte_bpe), "--no-progress"]
    result = measure("huge line", cmd, corpus.stat().st_size, env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)))
    assert result.rc == 0, result.note
    report = json.loads((tmp_path / "out_preprocess_report.json").read_text())
    print(f"{HUGE_LINE_MB:g} MB line: peak RSS {result.peak_rss_mb:.0f} MiB, {result.wall_s:.1f} s, "
          f"backend {report['backend']}, pieces {report['pieces']}")
    assert report["documents_written"] == 3 and report["pieces"] is True
    assert result.peak_rss_mb < HUGE_LINE_PEAK_MB
