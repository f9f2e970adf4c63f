"""The README is the front page: the idea, the two commands, the pipeline and one table of every command, short
enough to read in one sitting; everything else lives in docs/ pages it links. Links between the pages must land
on a file (and, into a markdown page, on one of its headings)."""

from __future__ import annotations

import re
import tomllib

from tests.support import REPO_ROOT

MAX_README_LINES = 300
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"`[^`\n]*`")


def _pages():
    return [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]


def _links(text: str) -> list[str]:
    """Markdown link targets outside code blocks and code spans."""
    return LINK.findall(CODE_SPAN.sub("", FENCE.sub("", text)))


def _anchors(text: str) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces as hyphens."""
    headings = re.findall(r"^#+\s+(.*?)\s*$", FENCE.sub("", text), re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-") for heading in headings}


def test_links_name_a_slug_the_way_github_does():
    assert _anchors("# Sizing a run: `crossbert-plan`\n## Fine-tuned GLUE\n") == {
        "sizing-a-run-crossbert-plan", "fine-tuned-glue"}
    assert _links("[a](x.md) `[b](y.md)` ![c](f.png)\n```\n[d](z.md)\n```\n") == ["x.md", "f.png"]


def test_readme_is_under_the_line_budget():
    lines = len((REPO_ROOT / "README.md").read_text().splitlines())
    assert lines < MAX_README_LINES, f"README.md has {lines} lines: move a topic into a docs/ page and link it"


def test_every_relative_link_of_the_readme_and_docs_lands():
    broken = []
    for page in _pages():
        for target in _links(page.read_text()):
            if re.match(r"^[a-z]+:", target):  # https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            if not file.exists():
                broken.append(f"{page.relative_to(REPO_ROOT)}: {target} (no such file)")
            elif anchor and file.suffix == ".md" and anchor not in _anchors(file.read_text()):
                broken.append(f"{page.relative_to(REPO_ROOT)}: {target} (no such heading)")
    assert broken == []


def test_the_readme_table_names_every_console_script():
    scripts = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    rows = set(re.findall(r"^\| `([^`]+)` \|", (REPO_ROOT / "README.md").read_text(), re.MULTILINE))
    assert sorted(set(scripts) - rows) == []


def test_ci_runs_the_readmes_test_command():
    readme, ci = (REPO_ROOT / "README.md").read_text(), (REPO_ROOT / ".ci" / "run").read_text()
    command = re.search(r"^(scripts/with-venv\.sh python -m pytest.*)$", readme, re.MULTILINE).group(1)
    assert command in ci.splitlines()
