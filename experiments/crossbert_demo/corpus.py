"""The embedded default corpus: English prose harvested from installed Python packages' docstrings.

Why: the demo must run on a machine with no network and we may not ship third-party text, but every
machine that can run us already has several megabytes of English in the docstrings of the standard
library, torch, numpy and friends. Sources are parsed with ``ast`` (never imported, so no side
effects), walked in sorted order, and filtered to prose paragraphs; the result is deterministic for a
given set of installed packages.

Each record is ``{"text": ..., "source": <top-level package>}``; ``source`` doubles as a label for the
demo's frozen-probe task ("which package wrote this docstring?").
"""

from __future__ import annotations

import ast
import gzip
import json
import re
import sysconfig
import warnings
from collections.abc import Iterator
from pathlib import Path

DEFAULT_PACKAGES = ("stdlib", "torch", "numpy", "scipy", "sklearn", "transformers", "megatron")
_CODE_LINE = re.compile(r"^\s*(>>>|\.\.\.|\$ |[-=~^*]{3,}|[:\w.]+\s*:\s*$|\|)")
_MIN_WORDS = 12


def package_roots(packages: tuple[str, ...] = DEFAULT_PACKAGES) -> list[tuple[str, Path]]:
    """(label, directory) for each requested package that is installed; 'stdlib' is the standard library."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    site = Path(sysconfig.get_paths()["purelib"])
    roots = []
    for name in packages:
        path = stdlib if name == "stdlib" else site / name
        if path.is_dir():
            roots.append((name, path))
    return roots


def _source_files(label: str, root: Path) -> Iterator[Path]:
    skip = {"site-packages", "test", "tests", "idlelib", "lib2to3", "__pycache__"}
    for path in sorted(root.rglob("*.py")):
        parts = set(path.relative_to(root).parts[:-1])
        if not parts & skip:
            yield path


def _docstrings(path: Path) -> Iterator[str]:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (SyntaxError, UnicodeDecodeError, ValueError, OSError):
        return
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node)
            if doc:
                yield doc


def prose_paragraphs(docstring: str) -> Iterator[str]:
    """Paragraphs that read like English: no doctest/code/table lines, at least a dozen words."""
    for block in re.split(r"\n\s*\n", docstring):
        lines = [line.strip() for line in block.splitlines()]
        if not lines or any(_CODE_LINE.match(line) for line in lines):
            continue
        text = " ".join(lines)
        words = text.split()
        letters = sum(ch.isalpha() or ch.isspace() for ch in text)
        if len(words) >= _MIN_WORDS and letters >= 0.85 * len(text):
            yield text


def iter_package_records(label: str, root: Path, seen: set[str]) -> Iterator[dict[str, str]]:
    """One record per docstring of one package (its prose paragraphs joined), skipping texts in ``seen``."""
    for path in _source_files(label, root):
        for doc in _docstrings(path):
            text = "\n".join(prose_paragraphs(doc))
            if text and text not in seen:
                seen.add(text)
                yield {"text": text, "source": label}


def write_corpus(out_path: str | Path, max_bytes: int = 8_000_000,
                 packages: tuple[str, ...] = DEFAULT_PACKAGES, per_package_share: bool = True) -> dict:
    """Write JSONL(.gz) of docstring records up to ``max_bytes`` of text; returns counts per source.

    With ``per_package_share`` every installed package gets an equal byte share, so the corpus (and
    the probe labels drawn from it) is not swamped by the largest package.
    """
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    roots = package_roots(packages)
    if not roots:
        raise ValueError(f"none of the packages {packages} is installed; pass a corpus file instead")
    share = max_bytes // len(roots) if per_package_share else max_bytes
    counts: dict[str, dict[str, int]] = {}
    seen: set[str] = set()
    opener = gzip.open if out_path.suffix == ".gz" else open
    with opener(out_path, "wt", encoding="utf-8") as handle:
        for label, root in roots:
            budget = min(share, max_bytes - sum(c["bytes"] for c in counts.values()))
            counts[label] = _write_package(handle, iter_package_records(label, root, seen), budget)
    return counts


def _write_package(handle, records: Iterator[dict[str, str]], budget: int) -> dict[str, int]:
    stats = {"docs": 0, "bytes": 0}
    for record in records:
        if stats["bytes"] >= budget:
            break
        handle.write(json.dumps(record, ensure_ascii=False) + "\n")
        stats["docs"] += 1
        stats["bytes"] += len(record["text"].encode("utf-8"))
    return stats
