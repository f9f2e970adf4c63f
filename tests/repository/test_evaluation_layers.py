"""evaluation/ has one direction: its tasks (``probing/``, ``mteb/``, ``pooler/``, ``finetune/``) are peers over the
shared modules (its own files and ``tasks/``). A shared module imports no task, and no task imports another (the
pooler scores through the scorer its CLI gives it). ``in_training.py`` is the suite the training loop calls: it runs
the tasks' in-training probes, so it stands above them all.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support import REPO_ROOT

EVALUATION = REPO_ROOT / "megatron_crossbert" / "evaluation"
PACKAGE = "megatron_crossbert.evaluation"
TASKS = ("probing", "mteb", "pooler", "finetune")
ABOVE_THE_TASKS = ("in_training.py",)


def imported(path: Path) -> set[str]:
    """Every module ``path`` imports, inside functions too, relative imports made absolute."""
    package = ".".join(path.relative_to(REPO_ROOT).with_suffix("").parts[:-1])
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(part for part in (base, node.module or "") if part)
            names.update([module] + [f"{module}.{alias.name}" for alias in node.names])
    return names


def task_of(module: str) -> str | None:
    """The task subpackage ``module`` lies in, or None."""
    parts = module.split(".")
    return parts[2] if module.startswith(f"{PACKAGE}.") and len(parts) > 2 and parts[2] in TASKS else None


def crossings(paths, allowed) -> list[str]:
    """``file: module`` for each import of a task other than ``allowed(file)``."""
    return sorted(f"{path.relative_to(REPO_ROOT)}: {name}" for path in paths for name in imported(path)
                  if task_of(name) not in (None, allowed(path)))


def test_shared_modules_import_no_task():
    shared = [p for p in EVALUATION.glob("*.py") if p.name not in ABOVE_THE_TASKS]
    shared += sorted((EVALUATION / "tasks").rglob("*.py"))
    assert crossings(shared, lambda path: None) == []


def test_no_task_imports_another():
    """The pooler above all imports nothing from mteb/, though it is scored with it."""
    paths = [p for task in TASKS for p in sorted((EVALUATION / task).rglob("*.py"))]
    assert crossings(paths, lambda path: path.relative_to(EVALUATION).parts[0]) == []
