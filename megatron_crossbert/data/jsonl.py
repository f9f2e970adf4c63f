"""Reading JSON-lines corpora (plain or gzip) with explicit accounting of every bad line.

The preprocessor's promise is "documents in = documents written + documents skipped", so nothing
here raises on bad input: each physical line becomes either texts or a skip *kind*, and the
caller decides whether to count it or (under ``--strict``) fail with ``file:line``.

Skip kinds: ``invalid_utf8``, ``invalid_json``, ``not_object`` (valid JSON that is not an object),
``missing_key``, ``not_string``, ``empty_text`` (empty or whitespace only), ``blank_line``,
``too_deep`` (JSON nested deeper than Python's recursion limit), ``invalid_unicode`` (a ``\\ud800``-style
escape of a lone surrogate: valid JSON, but no UTF-8 text, and both encoders fail the whole batch on
it), ``too_long`` (a line longer than ``max_document_bytes``), ``no_tokens`` (the tokenizer produced
nothing), ``truncated_gzip`` (a .gz stream that ends early or is corrupt; the rest of that file is
lost and counted as one skipped document at the line where reading stopped), ``not_gzip`` (a ``.gz``
file that is not gzip at all) and ``empty_file`` (a file of 0 bytes); each of the last two counts as
one skipped document at line 1 of that file.

Memory per line is bounded: a line is read with ``readline(max_document_bytes + 1)``, and a longer
one is consumed in 1 MiB blocks and stands in its chunk as an :class:`OversizedLine` (its size only),
so line numbers and byte counts stay right and no line above the limit is ever held. The default,
:data:`MAX_DOCUMENT_BYTES` (64 MiB), is far above real documents (all of Moby-Dick is ~1.2 MB) and
is raised with ``--max-document-bytes``. Chunks end at ``size`` lines or :data:`CHUNK_BYTES` of text,
whichever comes first.

A UTF-8 byte-order mark (Windows editors write one) at the start of a line is dropped before the line is
parsed: at the start of a file, or where ``cat`` joined files. It used to cost the first document
(``invalid_json``, and silently for the tokenizer trainer).

Files are read in chunks of lines (:func:`iter_line_chunks`), so reading costs little more than
gzip's own decompression.
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
              "blank_line", "too_deep", "invalid_unicode", "too_long", "no_tokens", "truncated_gzip", "not_gzip",
              "empty_file")
GZIP_MAGIC = b"\x1f\x8b"
UTF8_BOM = b"\xef\xbb\xbf"
"""A byte-order mark some editors write at the start of a UTF-8 file: not part of the first document."""
MAX_DOCUMENT_BYTES = 64 << 20
"""Default per-line limit (all keys of one document together), ``--max-document-bytes``."""
CHUNK_BYTES = 64 << 20
"""A chunk ends once its lines hold this many bytes, even before its line count is reached."""
_BLOCK = 1 << 20


class OversizedLine:
    """Stands in a chunk for a line longer than the limit; ``len()`` is its size (for byte counts)."""

    __slots__ = ("size",)

    def __init__(self, size: int) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size


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
    lines: list[bytes | OversizedLine]
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


def bounded_lines(handle, max_bytes: int) -> Iterator[bytes | OversizedLine]:
    """Lines of a binary stream, none held longer than ``max_bytes`` (plus its newline): longer ones
    are read past in blocks and yielded as :class:`OversizedLine`."""
    readline = handle.readline
    while line := readline(max_bytes + 1):
        if len(line) <= max_bytes or line.endswith(b"\n"):
            yield line
            continue
        size = len(line)
        while not line.endswith(b"\n") and (line := readline(_BLOCK)):
            size += len(line)
        yield OversizedLine(size)


def _file_chunks(path: Path, size: int, max_bytes: int) -> Iterator[LineChunk]:
    if os.path.getsize(path) == 0:
        yield LineChunk(str(path), 1, [], "empty_file", "the file is empty (0 bytes)")
        return
    handle = _open(path)
    if handle is None:
        yield LineChunk(str(path), 1, [], "not_gzip", "named .gz but does not start with the gzip magic bytes")
        return
    first, lines, nbytes = 1, [], 0
    with handle:
        try:
            for line in bounded_lines(handle, max_bytes):
                lines.append(line)
                nbytes += len(line)
                if len(lines) >= size or nbytes >= CHUNK_BYTES:
                    yield LineChunk(str(path), first, lines)
                    first, lines, nbytes = first + len(lines), [], 0
        except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
            yield LineChunk(str(path), first, lines, "truncated_gzip", f"{type(exc).__name__}: {exc}")
            return
    if lines:
        yield LineChunk(str(path), first, lines)


def iter_line_chunks(paths: Iterable[Path], size: int = 4096,
                     max_bytes: int = MAX_DOCUMENT_BYTES) -> Iterator[LineChunk]:
    """Every line of every file, at most ``size`` lines per chunk; chunks never span files."""
    for path in paths:
        yield from _file_chunks(path, size, max_bytes)


def _has_lone_surrogate(data: bytes, texts: dict[str, str]) -> bool:
    """Only a line with a ``\\ud8..``-``\\udf..`` escape can decode to a lone surrogate: one byte search first."""
    if b"\\ud" not in data and b"\\uD" not in data:
        return False
    try:
        for text in texts.values():
            text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def parse_line(data: bytes | OversizedLine, keys: Sequence[str]) -> tuple[dict[str, str] | None, str | None]:
    """Bytes of one line -> ``({key: text}, None)`` or ``(None, skip_kind)``; never raises.

    A line is one document for all keys together: if any key is bad the whole line is skipped, so
    the per-key outputs stay aligned document for document.
    """
    if isinstance(data, OversizedLine):
        return None, "too_long"
    if data.startswith(UTF8_BOM):  # a file's first line, or the first of a file appended with cat
        data = data[len(UTF8_BOM):]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None, "invalid_utf8"
    if not text.strip():
        return None, "blank_line"
    try:
        record = json.loads(text)
    except RecursionError:
        return None, "too_deep"
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
    if _has_lone_surrogate(data, out):
        return None, "invalid_unicode"
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
