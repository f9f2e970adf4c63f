"""Blocks to markdown, and their JSON: numbers stay numbers on disk and print as their column says."""

from __future__ import annotations

import json

import pytest

from megatron_crossbert.results_page.blocks import (
    Bullets, Code, Column, Figure, Heading, Paragraph, Section, Table, table,
)
from megatron_crossbert.results_page.codec import dumps, section_from_json, section_to_json
from megatron_crossbert.results_page.render import cell_text, markdown_table, render_blocks, render_section


def test_a_column_formats_numbers_and_shows_missing_cells_lists_and_text():
    ratio = Column("× sparse", "right", ",.2f", "x")
    assert cell_text(1234.5, ratio) == "1,234.50x" and cell_text(None, ratio) == "—"
    assert cell_text([6.3, 6.12], Column("losses", format=".2f")) == "6.30, 6.12"
    assert cell_text([], Column("losses", format=".2f")) == ""
    assert cell_text(0.425, Column("MFU", format=".1f", suffix="%", scale=100)) == "42.5%"
    assert cell_text(-0.0, Column("Δ", format="+.0f", suffix="%")) == "-0%"  # a rounded negative keeps its sign
    assert cell_text("51.3 (n=1)", ratio) == "51.3 (n=1)" and cell_text(19520, Column("samples")) == "19520"


def test_a_table_has_a_header_an_alignment_row_and_one_line_per_row():
    block = Table([Column("model"), Column("ms", "right", ".0f")], [["bert", 929.4], ["dense", None]])
    assert render_blocks([block]) == "| model | ms |\n| --- | ---: |\n| bert | 929 |\n| dense | — |"
    assert markdown_table(["a", "b"], [[1, ""]]) == "| a | b |\n| --- | --- |\n| 1 |  |"  # console tables alike


def test_blocks_are_one_blank_line_apart_and_an_empty_list_leaves_no_gap():
    blocks = [Heading("Title", 3), Paragraph("Some **text**\non two lines."), Bullets([]),
              Bullets(["one", "two\nwrapped"]), Code("crossbert-bench throughput", "bash"), Figure("f.png", "curve")]
    assert render_blocks(blocks) == ("### Title\n\nSome **text**\non two lines.\n\n- one\n- two\n  wrapped\n\n"
                                     "```bash\ncrossbert-bench throughput\n```\n\n![curve](f.png)")


def test_a_section_round_trips_through_json_with_its_numbers_as_numbers():
    section = Section("throughput", Heading("Training-step throughput"), "written by crossbert-bench throughput",
                      "2026-12-02 04:46 UTC", [Paragraph("p"), table(["model", Column("s", format=".3f")],
                                                                     [["bert", 8.613], ["x", [1, 2]]])])
    raw = json.loads(dumps(section_to_json(section)))
    assert raw["blocks"][1]["rows"] == [["bert", 8.613], ["x", [1, 2]]]  # the measurement, not its text
    assert section_from_json(raw, "f.json") == section
    assert render_section(section).startswith(
        "<!-- throughput:start (written by crossbert-bench throughput; 2026-12-02 04:46 UTC) -->\n\n"
        "## Training-step throughput\n\np\n\n| model | s |")
    assert "\n    [\"bert\", 8.613],\n" in dumps(section_to_json(section))  # one line per row: one-line diffs


@pytest.mark.parametrize("edit, message", [
    (lambda raw: raw["blocks"][0].update(kind="tabel"), "f.json: blocks[0].kind: 'tabel' is not one of"),
    (lambda raw: raw["blocks"][1]["rows"].append([1]), "f.json: blocks[1].rows[1]: 1 cells for 2 columns"),
    (lambda raw: raw["blocks"][1]["columns"][0].update(width=3), "f.json: blocks[1].columns[0]: "),
    (lambda raw: raw["blocks"][1]["columns"][0].update(align="middle"), "f.json: blocks[1].columns[0].align: 'middle'"),
    (lambda raw: raw["blocks"][1]["rows"][0].__setitem__(1, {"x": 1}), "f.json: blocks[1].rows[0][1]: {'x': 1} is not"),
    (lambda raw: raw.pop("written"), "f.json: missing written"),
    (lambda raw: raw.update(name="Claims!"), "f.json: section name 'Claims!'"),
])
def test_a_bad_section_file_is_one_error_naming_the_file_and_key(edit, message):
    section = Section("s", Heading("T"), "hand-kept: measured with X on 2026-12-01", "2026-12-01",
                      [Paragraph("p"), table(["a", "b"], [[1, 2]])])
    raw = section_to_json(section)
    edit(raw)
    with pytest.raises(ValueError) as err:
        section_from_json(raw, "f.json")
    assert str(err.value).startswith(message) and "\n" not in str(err.value)
