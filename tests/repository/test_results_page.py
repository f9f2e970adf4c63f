"""docs/results.md is exactly what ``crossbert-results render`` makes from docs/results/*.json: a number changed
on the page by hand, or a section a tool wrote as markdown only, fails here with the section named."""

from __future__ import annotations

from megatron_crossbert.results_page.store import ORDER_FILE, first_difference, json_dir, read_order
from tests.support import REPO_ROOT

PAGE = REPO_ROOT / "docs" / "results.md"


def test_the_results_page_is_its_render():
    assert first_difference(PAGE) is None, "run: crossbert-results render"


def test_every_section_json_is_on_the_page():
    listed = set(read_order(PAGE).sections)
    stored = {path.stem for path in json_dir(PAGE).glob("*.json") if path.name != ORDER_FILE}
    assert stored == listed
