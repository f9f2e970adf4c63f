"""Blocks to markdown: the only place the results page's markdown is made.

Every tool that reports on the page, and the console tables that show the same rows (``crossbert-bench``'s
markdown), go through :func:`render_blocks`, so a table looks the same wherever it is printed: a header row,
a separator row saying each column's alignment (``| --- |``, ``| ---: |``), and one line per row; blocks are
separated by one blank line, and a block that renders to nothing (an empty list) leaves no gap.
"""

from __future__ import annotations

from functools import singledispatch

from megatron_crossbert.outputs import section_block
from megatron_crossbert.results_page.blocks import (
    ALIGNS, Block, Bullets, Cell, Code, Column, Figure, Heading, PageOrder, Paragraph, Section, Table, table,
)

ALIGNMENT = dict(zip(ALIGNS, ("---", ":---", "---:", ":---:")))
"""Each column alignment's separator cell."""


def number_text(value: int | float, column: Column) -> str:
    """One number as its column shows it (scaled, formatted, suffixed)."""
    scaled = value * column.scale if column.scale != 1 else value
    return f"{format(scaled, column.format)}{column.suffix}"


def cell_text(cell: Cell, column: Column) -> str:
    """A cell's text: ``None`` is the column's missing mark, a list its numbers joined, a string itself."""
    if cell is None:
        return column.missing
    if isinstance(cell, bool) or isinstance(cell, str):
        return str(cell)
    if isinstance(cell, list):
        return column.join.join(cell_text(item, column) for item in cell)
    return number_text(cell, column)


def table_lines(block: Table) -> list[str]:
    if any(column.align not in ALIGNMENT for column in block.columns):
        bad = next(column for column in block.columns if column.align not in ALIGNMENT)
        raise ValueError(f"column {bad.name!r}: align {bad.align!r} is not one of {', '.join(map(repr, ALIGNMENT))}")
    lines = [_row([column.name for column in block.columns]), _row([ALIGNMENT[c.align] for c in block.columns])]
    return lines + [_row([cell_text(cell, column) for cell, column in zip(row, block.columns)]) for row in block.rows]


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


@singledispatch
def render_block(block: Block) -> str:
    raise TypeError(f"not a results-page block: {type(block).__name__}")


@render_block.register
def _(block: Heading) -> str:
    return f"{'#' * block.level} {block.text}"


@render_block.register
def _(block: Paragraph) -> str:
    return block.text


@render_block.register
def _(block: Code) -> str:
    return f"```{block.language}\n{block.text}\n```"


@render_block.register
def _(block: Figure) -> str:
    return f"![{block.caption}]({block.path})"


@render_block.register
def _(block: Bullets) -> str:
    return "\n".join("- " + item.replace("\n", "\n  ") for item in block.items)


@render_block.register
def _(block: Table) -> str:
    return "\n".join(table_lines(block))


def render_blocks(blocks: list[Block]) -> str:
    """The blocks' markdown, one blank line between two blocks."""
    return "\n\n".join(text for text in map(render_block, blocks) if text)


def render_section(section: Section) -> str:
    """The section with its marks, as it stands on the page."""
    return section_block(section.name, render_blocks([section.title, *section.blocks]), section.note)


def render_page(order: PageOrder, sections: dict[str, Section]) -> str:
    """The whole page: the preamble, then each section of ``order`` (``sections`` holds every one of them)."""
    parts = [render_blocks(order.preamble)] if order.preamble else []
    parts += [render_section(sections[name]) for name in order.sections]
    return "\n\n".join(parts) + "\n"


def markdown_table(headers: list[str | Column], rows: list[list[Cell]]) -> str:
    """A table's markdown from headers and rows (console output and reports outside the page)."""
    return render_block(table(headers, rows))
