"""Publishing a section (JSON, then its part of the page), rendering the page, and checking it against its JSON."""

from __future__ import annotations

import json

from megatron_crossbert.cli.results import main
from megatron_crossbert.results_page.blocks import Heading, PageOrder, Paragraph, Section, table
from megatron_crossbert.results_page.store import (
    ORDER_FILE, first_difference, json_dir, publish, read_section, write_order, write_page,
)


def _section(name: str, text: str) -> Section:
    return Section(name, Heading(name.title()), f"written by tool-{name}", "2026-12-01 00:00 UTC",
                   [Paragraph(text), table(["n"], [[1.5]])])


def _page(tmp_path):
    page = tmp_path / "docs" / "results.md"
    write_order(page, PageOrder([Heading("Results", 1), Paragraph("Intro.")], []))
    publish(page, _section("first", "one"))
    publish(page, _section("second", "two"))
    return page


def test_publish_writes_the_json_lists_a_new_section_and_renders_the_page(tmp_path):
    page = _page(tmp_path)
    assert json.loads((json_dir(page) / ORDER_FILE).read_text())["sections"] == ["first", "second"]
    assert read_section(json_dir(page) / "first.json") == _section("first", "one")
    assert page.read_text().startswith("# Results\n\nIntro.\n\n<!-- first:start (written by tool-first; ")
    assert first_difference(page) is None and page.read_text() == write_page(page).read_text()


def test_publish_replaces_only_its_own_section_of_the_page(tmp_path):
    page = _page(tmp_path)
    page.write_text(page.read_text() + "\nA line by hand.\n")
    before = page.read_text()
    publish(page, _section("first", "ONE"))
    assert page.read_text() == before.replace("\n\none\n\n", "\n\nONE\n\n")  # the hand line kept, byte for byte


def test_a_page_without_an_order_file_gets_the_section_appended_and_keeps_its_bytes(tmp_path):
    page = tmp_path / "results.md"
    page.write_text("# old page\n\nkept\n")
    publish(page, _section("claims-smoke", "x"))
    assert page.read_text().startswith("# old page\n\nkept\n\n<!-- claims-smoke:start (written by tool-claims-smoke")
    assert (tmp_path / "results" / "claims-smoke.json").is_file()


def test_the_check_names_the_first_section_that_differs_and_render_puts_it_back(tmp_path, capsys):
    page = _page(tmp_path)
    assert main(["--check", "--page", str(page)]) == 0
    page.write_text(page.read_text().replace("| 1.5 |", "| 1.6 |", 1))
    assert first_difference(page) == f"section 'first' ({json_dir(page) / 'first.json'})"
    assert main(["--check", "--page", str(page)]) == 1
    assert "section 'first'" in capsys.readouterr().err
    assert main(["render", "--page", str(page)]) == 0 and first_difference(page) is None
    page.write_text(page.read_text().replace("Intro.", "Intro!"))
    assert first_difference(page).startswith("the preamble")
    write_page(page)
    page.write_text(page.read_text() + "\nappended by hand\n")
    assert first_difference(page).startswith("the section order or the text between sections")


def test_a_section_the_order_names_without_json_is_one_line_naming_the_file(tmp_path, capsys):
    page = _page(tmp_path)
    (json_dir(page) / "second.json").unlink()
    assert main(["render", "--page", str(page)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(json_dir(page) / "second.json") in err
