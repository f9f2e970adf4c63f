"""Reserved words (docs/glossary.md): a module, class or function name carrying one lives in its owner.

Names are read with ``ast`` from megatron_crossbert/ and experiments/; a word matches a whole part of a name
(snake_case or CamelCase), plural included. ``EXCEPTIONS`` is the glossary's list of renames still to do.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.support import REPO_ROOT

RESERVED: dict[str, tuple[str, ...]] = {
    "plan": ("megatron_crossbert/planning/", "megatron_crossbert/cli/plan.py"),
    "pooler": ("megatron_crossbert/evaluation/pooler/", "megatron_crossbert/cli/pooler.py"),
    "suite": ("megatron_crossbert/evaluation/in_training.py",),
}
"""Each reserved word and its owner (path prefixes)."""

EXCEPTIONS: dict[str, tuple[str, ...]] = {
    "plan": ("experiments/claims/",),
    "pooler": ("experiments/claims/",),
}
"""Known exceptions, each with its planned name in docs/glossary.md."""


def name_parts(name: str) -> set[str]:
    """Lower-case parts of a snake_case or CamelCase name, plurals folded (``StartPlans`` -> start, plan)."""
    parts = re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+", name)
    return {part.lower().removesuffix("s") if len(part) > 3 else part.lower() for part in parts}


def defined_names(path: Path) -> list[str]:
    """The module's own name and its package's, then every class and function it defines."""
    names = [path.stem, path.parent.name]
    names += [node.name for node in ast.walk(ast.parse(path.read_text()))
              if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))]
    return names


def misplaced(root: Path = REPO_ROOT) -> list[str]:
    """``path: name (word)`` for each reserved word defined outside its owner and its known exceptions."""
    found = []
    for folder in ("megatron_crossbert", "experiments"):
        for path in sorted((root / folder).rglob("*.py")):
            relative = path.relative_to(root).as_posix()
            for word, owners in RESERVED.items():
                if relative.startswith(owners + EXCEPTIONS.get(word, ())):
                    continue
                found += [f"{relative}: {name} ({word})" for name in defined_names(path) if word in name_parts(name)]
    return found


def test_the_name_parts_match_whole_words_only():
    assert {"plan", "start"} <= name_parts("StartPlan") and "plan" in name_parts("plan_keys")
    assert "plan" in name_parts("seed_plans") and "pooler" in name_parts("PoolerConfig")
    assert "plan" not in name_parts("planning") | name_parts("Planner") | name_parts("explanation")


def test_the_check_finds_a_reserved_word_outside_its_owner(tmp_path):
    module = tmp_path / "megatron_crossbert" / "training" / "warmup.py"
    module.parent.mkdir(parents=True)
    module.write_text("class WarmupPlan:\n    pass\n\n\ndef run_suite():\n    pass\n")
    (tmp_path / "experiments").mkdir()
    assert misplaced(tmp_path) == ["megatron_crossbert/training/warmup.py: WarmupPlan (plan)",
                                   "megatron_crossbert/training/warmup.py: run_suite (suite)"]


def test_reserved_words_stay_with_their_owners():
    assert misplaced() == []


def test_the_glossary_lists_every_word_owner_and_exception():
    text = (REPO_ROOT / "docs" / "glossary.md").read_text()
    for word, owners in RESERVED.items():
        assert f"**{word}**" in text and all(f"`{owner}`" in text for owner in owners)
    assert all(f"`{place}`" in text for places in EXCEPTIONS.values() for place in places)
