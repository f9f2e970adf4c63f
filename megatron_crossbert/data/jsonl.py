"""Reading JSON-lines corpora (plain or gzip) with explicit accounting of every bad line.

The preprocessor's promise is "documents in = documents written + documents skipped", so nothing
here raises on bad input: each physical line becomes either texts or a skip *kind*, and the
caller decides whether to count it or (under ``--strict``) fail with ``file:line``.

Skip kinds: ``invalid_utf8``, ``invalid_json``, ``not_object`` (valid JSON that is not an object),
``missing_key``, ``not_string``, ``empty_text`` (empty or whitespace only), ``blank_line``, ``no_tokens``
(the tokenizer produced nothing), ``truncated_gzip`` (a .gz stream that ends early or is corrupt;
the rest of that file is lost and counted as one skipped document at the line where reading
stopped), ``not_gzip`` (a ``.gz`` file that is not gzip at all) and ``empty_file`` (a file of
0 bytes); each of the last two counts as one skipped document at line 1 of that file.

Files are read in chunks of lines (:func:`iter_line_chunks`), never line objects one by one, so
reading costs little more than gzip's own decompression.
"""

from __future__ import annotations

import glob
import gzip
import json
import os
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

SKIP_KINDS = ("invalid_utf8", "invalid_json", "not_object", "missing_key", "not_string", "empty_text",
              "blank_line", "no_tokens", "truncated_gzip", "not_gzip", "empty_file")
GZIP_MAGIC = b"\x1f\x8b"


class BadInputError(ValueError):
    """Bad input, in one line naming the file: under --strict the first bad line (``file:line:``),
    a directory given as a file, or a run in which every document was skipped."""


def expand_inputs(patterns: Sequence[str]) -> list[Path]:
    """Files and globs -> de-duplicated paths in argument order (each glob sorted, for determinism)."""
    paths: list[Path] = []
    for pattern in patterns:
        matches = sorted(glob.glob(pattern, recursive=True)) if glob.has_magic(pattern) else [pattern]
        if not matches:
            raise FileNotFoundError(f"input pattern matched no files: {pattern}")
        for match in matches:
            if os.path.isdir(match):
                raise BadInputError(f"{match}: is a directory, not a JSONL file; pass the files in it "
                                    f"(e.g. --input '{os.path.join(match, '*.jsonl*')}')")
            if not os.path.isfile(match):
                raise FileNotFoundError(f"input file not found: {match}")
            if Path(match) not in paths:
                paths.append(Path(match))
    return paths


@dataclass(frozen=True)
class LineChunk:
    """Consecutive lines of one file starting at ``first_line``; ``error`` is a skip kind
    (``truncated_gzip``, ``not_gzip``, ``empty_file``) standing in for the unreadable rest of it,
    one line after the last one in ``lines``."""

    path: str
    first_line: int
    lines: list[bytes]
    error: str | None = None
    detail: str = ""


def _open(path: Path):
    """gzip for ``.gz`` files that start with the gzip magic; None for a ``.gz`` that does not."""
    if path.suffix != ".gz":
        return open(path, "rb")
    with open(path, "rb") as handle:
        if handle.read(2) != GZIP_MAGIC:
            return None
    return gzip.open(path, "rb")


def _file_chunks(path: Path, size: int) -> Iterator[LineChunk]:
    if os.path.getsize(path) == 0:
        yield LineChunk(str(path), 1, [], "empty_file", "the file is empty (0 bytes)")
        return
    handle = _open(path)
    if handle is None:
        yield LineChunk(str(path), 1, [], "not_gzip", "named .gz but does not start with the gzip magic bytes")
        return
    first, lines = 1, []
    with handle:
        try:
            for line in handle:
                lines.append(line)
                if len(lines) >= size:
                    yield LineChunk(str(path), first, lines)
                    first, lines = first + len(lines), []
        except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
            yield LineChunk(str(path), first, lines, "truncated_gzip", f"{type(exc).__name__}: {exc}")
            return
    if lines:
        yield LineChunk(str(path), first, lines)


def iter_line_chunks(paths: Iterable[Path], size: int = 4096) -> Iterator[LineChunk]:
    """Every line of every file, at most ``size`` lines per chunk; chunks never span files."""
    for path in paths:
        yield from _file_chunks(path, size)


def parse_line(data: bytes, keys: Sequence[str]) -> tuple[dict[str, str] | None, str | None]:
    """Bytes of one line -> ``({key: text}, None)`` or ``(None, skip_kind)``.

    A line is one document for all keys together: if any key is bad the whole line is skipped, so
    the per-key outputs stay aligned document for document.
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None, "invalid_utf8"
    if not text.strip():
        return None, "blank_line"
    try:
        record = json.loads(text)
    except ValueError:
        return None, "invalid_json"
    if not isinstance(record, dict):
        return None, "not_object"
    out: dict[str, str] = {}
    for key in keys:
        if key not in record:
            return None, "missing_key"
        value = record[key]
        if not isinstance(value, str):
            return None, "not_string"
        if not value.strip():
            return None, "empty_text"
        out[key] = value
    return out, None


def iter_texts(patterns: Sequence[str], key: str = "text", max_docs: int | None = None) -> Iterator[str]:
    """Good texts of one key, bad lines silently dropped (for tokenizer training, not preprocessing)."""
    count = 0
    for chunk in iter_line_chunks(expand_inputs(patterns)):
        for data in chunk.lines:
            texts, _ = parse_line(data, [key])
            if texts is None:
                continue
            yield texts[key]
            count += 1
            if max_docs is not None and count >= max_docs:
                return
