"""Sections and the page's order as JSON: one file per section, a table row per line, read back checked.

A file that does not parse, or a block that is not one of ``blocks.KINDS``, is one ``ValueError`` naming the
file and the key (``docs/results/claims.json: blocks[3].kind: 'tabel' is not one of ...``), so a hand edit that
breaks the page is found before anything is rendered.
"""

from __future__ import annotations

import json
from typing import Any

from megatron_crossbert.results_page.blocks import (
    ALIGNS, KIND_OF, KINDS, Block, Column, Heading, PageOrder, Section, Table, block_fields, check_section_name,
)


def block_to_json(block: Block) -> dict[str, Any]:
    """``{"kind": ..., field: value}``; a table's columns keep only what differs from a plain column."""
    out: dict[str, Any] = {"kind": KIND_OF[type(block)], **block_fields(block)}
    if isinstance(block, Table):
        out["columns"] = [block_fields(column) for column in block.columns]
    return out


def section_to_json(section: Section) -> dict[str, Any]:
    return {"name": section.name, "title": block_fields(section.title), "source": section.source,
            "written": section.written, "blocks": [block_to_json(block) for block in section.blocks]}


def order_to_json(order: PageOrder) -> dict[str, Any]:
    return {"preamble": [block_to_json(block) for block in order.preamble], "sections": list(order.sections)}


def _build(cls: type, raw: Any, where: str):
    """``cls(**raw)``, a bad or missing field said in one line."""
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: expected an object, got {type(raw).__name__}")
    try:
        return cls(**raw)
    except TypeError as err:
        raise ValueError(f"{where}: {err}") from None


def block_from_json(raw: Any, where: str) -> Block:
    kind = raw.get("kind") if isinstance(raw, dict) else None
    if kind not in KINDS:
        raise ValueError(f"{where}.kind: {kind!r} is not one of {', '.join(KINDS)}")
    fields = {key: value for key, value in raw.items() if key != "kind"}
    if kind == "table":
        fields["columns"] = [_build(Column, column, f"{where}.columns[{i}]")
                             for i, column in enumerate(fields.get("columns", []))]
        block = _build(Table, fields, where)
        _check_rows(block, where)
        return block
    return _build(KINDS[kind], fields, where)


def _cell_ok(cell: Any) -> bool:
    """A number, a string, ``None``, or a list of numbers (``None`` among them: not measured)."""
    if isinstance(cell, list):
        return all(item is None or isinstance(item, (int, float)) for item in cell)
    return cell is None or isinstance(cell, (int, float, str))


def _check_rows(block: Table, where: str) -> None:
    for i, column in enumerate(block.columns):
        if column.align not in ALIGNS:
            raise ValueError(f"{where}.columns[{i}].align: {column.align!r} is not one of {ALIGNS}")
    for i, row in enumerate(block.rows):
        if not isinstance(row, list) or len(row) != len(block.columns):
            raise ValueError(f"{where}.rows[{i}]: {len(row) if isinstance(row, list) else 'not a list of'} cells "
                             f"for {len(block.columns)} columns")
        bad = next((j for j, cell in enumerate(row) if not _cell_ok(cell)), None)
        if bad is not None:
            raise ValueError(f"{where}.rows[{i}][{bad}]: {row[bad]!r} is not a number, text, null or a list of numbers")


def section_from_json(raw: Any, where: str) -> Section:
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: expected an object")
    missing = [key for key in ("name", "title", "source", "written", "blocks") if key not in raw]
    if missing:
        raise ValueError(f"{where}: missing {', '.join(missing)}")
    try:
        check_section_name(raw["name"])
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from None
    blocks = [block_from_json(block, f"{where}: blocks[{i}]") for i, block in enumerate(raw["blocks"])]
    return Section(raw["name"], _build(Heading, raw["title"], f"{where}: title"), raw["source"], raw["written"],
                   blocks)


def order_from_json(raw: Any, where: str) -> PageOrder:
    if not isinstance(raw, dict) or not isinstance(raw.get("sections"), list):
        raise ValueError(f"{where}: expected an object with a 'sections' list")
    preamble = [block_from_json(block, f"{where}: preamble[{i}]") for i, block in enumerate(raw.get("preamble", []))]
    return PageOrder(preamble, [check_section_name(name) for name in raw["sections"]])


def dumps(value: Any, indent: str = "") -> str:
    """JSON with one line per table row, column and list item: a changed number is a one-line diff."""
    inner = indent + " "
    if isinstance(value, dict) and value and not all(_scalar(item) for item in value.values()):
        items = [f"{inner}{json.dumps(key)}: "
                 + (_rows(item, inner) if key == "rows" else dumps(item, inner)) for key, item in value.items()]
        return "{\n" + ",\n".join(items) + f"\n{indent}}}"
    if isinstance(value, list) and value:
        return "[\n" + ",\n".join(inner + dumps(item, inner) for item in value) + f"\n{indent}]"
    return json.dumps(value, ensure_ascii=False)


def _rows(rows: list, indent: str) -> str:
    if not rows:
        return "[]"
    inner = indent + " "
    return "[\n" + ",\n".join(inner + json.dumps(row, ensure_ascii=False) for row in rows) + f"\n{indent}]"


def _scalar(value: Any) -> bool:
    return not isinstance(value, (dict, list))


def loads(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"{where}: not JSON ({err})") from None
