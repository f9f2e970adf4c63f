"""Gold labels and scores: what a usable column is. Every task reader calls these after building its
columns (MTEB folders and ``--local-task`` files: ``tasks/folders.py``; JSONL tasks:
``tasks/data.py``; GLUE TSVs: ``tasks/glue.py``), so a bad file is refused in one line naming the
file and the row, before any text is encoded, and no NaN can reach a metric or an average.

- A score (STS, regression) is a finite real number; a numeric string counts (TSV cells are strings),
  ``true``/``false`` do not. A score column whose values are all equal is refused: a correlation with
  constant gold scores is undefined (scipy returns NaN, and the probes' metrics used to say 0.0).
- A class label is a string, an integer or a boolean; null (which used to become the class ``"None"``),
  NaN, infinity, lists and objects are refused. A train split with one class cannot fit a probe.

``where(i)`` names row ``i`` of a file (``FILE:LINE`` for line-based files, ``FILE: row N`` otherwise).
Torch-free.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path

Where = Callable[[int], str]


class BadGoldError(ValueError):
    """A gold label or score that cannot be scored against, named by file and row."""


def line_numbers(path: str | Path, lines: Sequence[int]) -> Where:
    """``where`` for rows read from ``lines`` of ``path`` (1-based file lines)."""
    return lambda i: f"{path}:{lines[i]}"


def row_numbers(path: str | Path) -> Where:
    """``where`` for rows without line numbers (parquet, datasets): ``FILE: row N`` (1-based)."""
    return lambda i: f"{path}: row {i + 1}"


def _real(value: object) -> float | None:
    """``value`` as a float when it is a real number or a numeric string; None otherwise."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    try:  # numpy scalars
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def check_scores(values: Sequence, where: Where, file: str | Path, what: str = "score", *,
                 spread: bool = True) -> list[float]:
    """The scores as floats: each a finite real number and, with ``spread`` (a split scored by
    correlation), not all equal (else ``BadGoldError``)."""
    scores = []
    for i, value in enumerate(values):
        number = _real(value)
        if number is None:
            raise BadGoldError(f"{where(i)}: {what} {value!r} is not a number")
        if not math.isfinite(number):
            raise BadGoldError(f"{where(i)}: {what} {value!r} is not a finite number")
        scores.append(number)
    if spread and scores and len(set(scores)) < 2:
        raise BadGoldError(f"{file}: every {what} is {scores[0]:g}; a correlation with constant gold {what}s is "
                           "undefined (check the column)")
    return scores


def check_labels(values: Sequence, where: Where) -> None:
    """Each class label a string, an integer or a boolean (else ``BadGoldError`` naming the row)."""
    for i, value in enumerate(values):
        if value is None:
            raise BadGoldError(f"{where(i)}: label is null (missing); every row needs its class")
        if isinstance(value, float) and not math.isfinite(value):
            raise BadGoldError(f"{where(i)}: label {value!r} is neither a class nor a finite number")
        if not isinstance(value, (str, int, float)):
            raise BadGoldError(f"{where(i)}: label {value!r} is not a class (a string or an integer)")


def check_classes(labels: Sequence, file: str | Path) -> None:
    """A train split needs at least two classes to fit a classifier on."""
    classes = {str(label) for label in labels}
    if len(classes) < 2:
        only = next(iter(classes), "none")
        raise BadGoldError(f"{file}: every label is {only}; a probe needs at least two classes to train on")
