"""The results page (``docs/results.md``) as data: typed sections stored as JSON, one renderer, one publisher.

- ``blocks``: the section and its blocks (heading, paragraph, table with numeric cells, code, figure, list).
- ``codec``: their JSON form, checked on reading (one line naming the file and key).
- ``render``: blocks to markdown, the only module that writes the page's markdown.
- ``store``: ``docs/results/<name>.json`` and ``_page.json`` (preamble, section order); ``publish`` for tools,
  ``write_page`` and ``first_difference`` for ``crossbert-results``.
"""

from megatron_crossbert.results_page.blocks import (
    Bullets, Code, Column, Figure, Heading, PageOrder, Paragraph, Section, Table, table,
)
from megatron_crossbert.results_page.render import markdown_table, render_blocks
from megatron_crossbert.results_page.store import first_difference, publish, write_page

__all__ = ["Bullets", "Code", "Column", "Figure", "Heading", "PageOrder", "Paragraph", "Section", "Table",
           "first_difference", "markdown_table", "publish", "render_blocks", "table", "write_page"]
