"""Reading JSON-lines corpora (plain or gzip) with explicit accounting of every bad line.

The preprocessor's promise is "documents in = documents written + documents skipped", so nothing
here raises on bad input: each physical line becomes either texts or a skip *kind*, and the
caller decides whether to count it or (under ``--strict``) fail with ``file:line``.

Skip kinds: ``invalid_utf8``, ``invalid_json``, ``not_object`` (valid JSON that is not an object),
``missing_key``, ``not_string``, ``empty_text`` (empty or whitespace only), ``blank_line``, ``no_tokens`` (the tokenizer produced nothing) and
``truncated_gzip`` (a .gz stream that ends early or is corrupt; the rest of that file is lost and
counted as one skipped document at the line where reading stopped).
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
              "blank_line", "no_tokens", "truncated_gzip")


class BadInputError(ValueError):
    """Raised under --strict for the first bad line; the message starts with ``file:line:``."""


def expand_inputs(patterns: Sequence[str]) -> list[Path]:
    """Files and globs -> de-duplicated paths in argument order (each glob sorted, for determinism)."""
    paths: list[Path] = []
    for pattern in patterns:
        matches = sorted(glob.glob(pattern, recursive=True)) if glob.has_magic(pattern) else [pattern]
        if not matches:
            raise FileNotFoundError(f"input pattern matched no files: {pattern}")
        for match in matches:
            if not os.path.isfile(match):
                raise FileNotFoundError(f"input file not found: {match}")
            if Path(match) not in paths:
                paths.append(Path(match))
    return paths


@dataclass(frozen=True)
class RawLine:
    """One physical line (bytes), or a read error standing in for the unreadable rest of a file."""

    path: str
    line_no: int
    data: bytes | None
    error: str | None = None


def _open(path: Path):
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def iter_raw_lines(paths: Iterable[Path]) -> Iterator[RawLine]:
    """Yield every line of every file; a truncated/corrupt gzip yields one ``truncated_gzip`` entry."""
    for path in paths:
        line_no = 0
        with _open(path) as handle:
            try:
                for line_no, data in enumerate(handle, start=1):
                    yield RawLine(str(path), line_no, data)
            except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
                yield RawLine(str(path), line_no + 1, None, error=f"truncated_gzip: {exc}")


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
    for raw in iter_raw_lines(expand_inputs(patterns)):
        if raw.data is None:
            continue
        texts, _ = parse_line(raw.data, [key])
        if texts is None:
            continue
        yield texts[key]
        count += 1
        if max_docs is not None and count >= max_docs:
            return
