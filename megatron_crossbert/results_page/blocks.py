"""What a section of the results page holds: typed blocks, so its numbers stay numbers on disk.

A :class:`Section` is one tool's part of ``docs/results.md`` (or a hand-kept part, saying so): its name (the
page's ``<!-- NAME:start -->`` mark), its title line, who wrote it and when, and an ordered list of blocks.
A :class:`Table` keeps each cell as the value it is (an int, a float, a list of numbers, a string, or ``None``
for "not measured") and each column says how its numbers are shown, so a reader of the JSON gets the
measurement and the page gets the same text the tool always printed. Markdown is made in one place only
(``results_page.render``); this module holds data and its JSON form.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, fields
from typing import Any, Union

Number = Union[int, float]
Cell = Union[Number, str, None, list]
"""A table cell: a number, a list of numbers (shown joined), a string (text or markdown), or ``None``."""

ALIGNS = ("", "left", "right", "center")
"""A column's alignments (``''``: the renderer's default, left)."""

SECTION_NAME = re.compile(r"[a-z0-9][a-z0-9-]*\Z")
"""A section's name: its mark on the page and its file name under the page's JSON folder."""


@dataclass(frozen=True)
class Column:
    """One table column: its header and how its numeric cells are shown."""

    name: str
    """The header cell (markdown)."""
    align: str = ""
    """'' (the renderer's default), 'left', 'right' or 'center'."""
    format: str = ""
    """Python format spec for numbers (``',.2f'``, ``'+.0f'``); '' shows ``str(value)``."""
    suffix: str = ""
    """Text after every number (``'x'``, ``'%'``)."""
    scale: float = 1.0
    """Numbers are multiplied by this before formatting (a fraction shown as a percentage: 100)."""
    missing: str = "—"
    """What a ``None`` cell shows."""
    join: str = ", "
    """What separates the numbers of a list cell."""


@dataclass(frozen=True)
class Heading:
    """A markdown heading: ``level`` hashes, then its text."""

    text: str
    """The heading's text (markdown)."""
    level: int = 2
    """1 for ``#``, 2 for ``##`` ..."""


@dataclass(frozen=True)
class Paragraph:
    """Prose as markdown, line breaks kept (a sentence may carry numbers the tool computed)."""

    text: str
    """The paragraph's markdown, shown as is."""


@dataclass(frozen=True)
class Code:
    """A fenced code block: commands to reproduce a measurement."""

    text: str
    """The lines inside the fence."""
    language: str = ""
    """The fence's info string (``'bash'``), or ''."""


@dataclass(frozen=True)
class Figure:
    """An image on the page."""

    path: str
    """The image's path relative to the page."""
    caption: str
    """Its alt text."""


@dataclass(frozen=True)
class Bullets:
    """A bulleted list; an item's further lines are indented under it."""

    items: list[str]
    """Each item's markdown (may hold line breaks)."""


@dataclass(frozen=True)
class Table:
    """Columns, then rows of cells (one cell per column)."""

    columns: list[Column]
    """The columns, in order."""
    rows: list[list[Any]] = field(default_factory=list)
    """Each row's cells (see :data:`Cell`)."""


Block = Union[Heading, Paragraph, Code, Figure, Bullets, Table]
KINDS: dict[str, type] = {"heading": Heading, "paragraph": Paragraph, "code": Code, "figure": Figure,
                          "list": Bullets, "table": Table}
"""Each block's ``kind`` in the JSON."""
KIND_OF = {cls: kind for kind, cls in KINDS.items()}


@dataclass(frozen=True)
class Section:
    """One section of the page: what is between its two marks."""

    name: str
    """Its mark (``claims``, ``throughput``) and its JSON's file name."""
    title: Heading
    """The title line the section starts with."""
    source: str
    """Who wrote it: ``'written by <the exact command>'``, or ``'hand-kept: measured with <tool> on <date>'``
    where no tool writes it."""
    written: str
    """When it was written (UTC; a date for a hand-kept section: its last edit)."""
    blocks: list[Block] = field(default_factory=list)
    """Its content under the title, in order."""

    @property
    def note(self) -> str:
        """What the page's start mark says about the section."""
        return f"{self.source}; {self.written}"


@dataclass(frozen=True)
class PageOrder:
    """The page around its sections: its preamble, then the sections in order."""

    preamble: list[Block]
    """The blocks above the first section (the page's title and how to read it)."""
    sections: list[str]
    """Section names, top to bottom."""


def measured(value: Any) -> Any:
    """A cell from a measurement: NaN (nothing measured; JSON has no NaN) becomes ``None``."""
    return None if isinstance(value, float) and math.isnan(value) else value


def table(headers: list[str | Column], rows: list[list[Any]]) -> Table:
    """A table from header names (plain text columns) or columns, and its rows."""
    return Table([h if isinstance(h, Column) else Column(h) for h in headers], [list(row) for row in rows])


def check_section_name(name: str) -> str:
    """``name`` when it can be a mark and a file name; otherwise a ValueError naming it."""
    if not SECTION_NAME.match(name):
        raise ValueError(f"section name {name!r}: use lower-case letters, digits and '-'")
    return name


def block_fields(block: Block) -> dict[str, Any]:
    """The block's fields that differ from their defaults (what its JSON keeps)."""
    out = {}
    for f in fields(block):
        value = getattr(block, f.name)
        if f.default is not value and f.default != value:
            out[f.name] = value
    return out
