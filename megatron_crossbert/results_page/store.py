"""Where a page's sections live, how a tool publishes one, and whether the page still matches them.

A page ``docs/results.md`` keeps its sections as ``docs/results/<name>.json`` and its preamble and section
order as ``docs/results/_page.json``. :func:`publish` is the one way a tool reports: it writes the section's
JSON (atomically), lists a new section at the end of the order, and replaces that section on the page and
nothing else (``outputs.write_section``), so hand edits and other tools' sections keep every byte. A page in
step with its JSON is exactly :func:`render_page`'s output; :func:`first_difference` names the first section
where it is not (``crossbert-results --check``, and the repository's test).
"""

from __future__ import annotations

from pathlib import Path

from megatron_crossbert.fsutil import atomic_write_text
from megatron_crossbert.outputs import section_marks, write_section, writing
from megatron_crossbert.results_page.blocks import PageOrder, Section, check_section_name
from megatron_crossbert.results_page.codec import (
    dumps, loads, order_from_json, order_to_json, section_from_json, section_to_json,
)
from megatron_crossbert.results_page.render import render_blocks, render_page, render_section

ORDER_FILE = "_page.json"
"""The preamble and the section order, beside the sections (no section name starts with '_')."""


def json_dir(page: str | Path) -> Path:
    """The folder of ``page``'s section JSON: ``docs/results.md`` -> ``docs/results/``."""
    return Path(page).with_suffix("")


def section_path(page: str | Path, name: str) -> Path:
    return json_dir(page) / f"{check_section_name(name)}.json"


def _write_json(path: Path, payload: dict, what: str) -> Path:
    with writing(path, what):
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, dumps(payload) + "\n")
    return path


def write_section_json(page: str | Path, section: Section) -> Path:
    return _write_json(section_path(page, section.name), section_to_json(section), f"the {section.name} section")


def write_order(page: str | Path, order: PageOrder) -> Path:
    return _write_json(json_dir(page) / ORDER_FILE, order_to_json(order), "the page's section order")


def read_section(path: Path) -> Section:
    section = section_from_json(loads(path.read_text(), str(path)), str(path))
    if section.name != path.stem:
        raise ValueError(f"{path}: name {section.name!r} is not the file's name {path.stem!r}")
    return section


def read_order(page: str | Path) -> PageOrder | None:
    """The page's order file, or None when the page has none (a page only tools write into)."""
    path = json_dir(page) / ORDER_FILE
    return order_from_json(loads(path.read_text(), str(path)), str(path)) if path.is_file() else None


def read_sections(page: str | Path, order: PageOrder) -> dict[str, Section]:
    """Every section the order names; one missing is a FileNotFoundError naming its file."""
    sections = {}
    for name in order.sections:
        path = section_path(page, name)
        if not path.is_file():
            raise FileNotFoundError(f"{path}: section {name!r} is in {json_dir(page) / ORDER_FILE} but has no JSON")
        sections[name] = read_section(path)
    return sections


def publish(page: str | Path, section: Section) -> Path:
    """Write ``section``'s JSON, add it to the page's order when the order lacks it, and replace it on the page
    (appended when new; every other byte kept; a missing page is rendered whole). Returns the page."""
    write_section_json(page, section)
    order = read_order(page)
    if order is not None and section.name not in order.sections:
        write_order(page, PageOrder(order.preamble, [*order.sections, section.name]))
    if order is not None and not Path(page).exists():
        return write_page(page)
    body = render_blocks([section.title, *section.blocks])
    return write_section(page, section.name, body, section.note)


def rendered(page: str | Path) -> str:
    """The page as its order file and section JSON make it."""
    order = read_order(page)
    if order is None:
        raise FileNotFoundError(f"{json_dir(page) / ORDER_FILE}: no order file, so {page} cannot be rendered")
    return render_page(order, read_sections(page, order))


def write_page(page: str | Path) -> Path:
    """Rewrite ``page`` from its JSON (atomic)."""
    page, text = Path(page), rendered(page)
    with writing(page, f"the page {page}"):
        atomic_write_text(page, text)
    return page


def _region(text: str, name: str) -> str | None:
    """Section ``name`` as it stands in ``text``, marks included, or None when it is not there."""
    start = text.find(f"<!-- {name}:start")
    end_mark = section_marks(name)[1]
    end = text.find(end_mark, start)
    return None if start < 0 or end < 0 else text[start:end + len(end_mark)]


def first_difference(page: str | Path) -> str | None:
    """None when ``page`` is exactly its render; otherwise what differs first: 'the preamble', 'section NAME'
    (its JSON file named), or the order and text between sections."""
    page = Path(page)
    current, order = page.read_text() if page.is_file() else "", read_order(page)
    expected = rendered(page)
    if current == expected:
        return None
    if order.preamble and not current.startswith(render_blocks(order.preamble) + "\n\n"):
        return f"the preamble ({json_dir(page) / ORDER_FILE})"
    for name, section in read_sections(page, order).items():
        if _region(current, name) != render_section(section):
            return f"section {name!r} ({section_path(page, name)})"
    return f"the section order or the text between sections ({json_dir(page) / ORDER_FILE})"
