"""The two entry layers: every console script exists and points at a callable ``main``, and the one kept
alias, ``python tools/preprocess_data.py``, works from a checkout. The dependency direction and a
non-editable install are the repository's rules (``tests/repository/test_dependencies.py``).
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import tomllib

from tests.support import REPO_ROOT

SCRIPTS = ("crossbert-train-tokenizer", "crossbert-preprocess", "crossbert-preprocess-datatrove", "crossbert-merge",
           "crossbert-pretrain", "crossbert-convert-hf", "crossbert-probe", "crossbert-mteb", "crossbert-pooler",
           "crossbert-finetune", "crossbert-bench", "crossbert-plan", "crossbert-results", "crossbert-demo")


def test_console_scripts_point_at_callable_mains():
    declared = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert set(SCRIPTS) == set(declared)
    for name in SCRIPTS:
        module, _, attr = declared[name].partition(":")
        assert callable(getattr(importlib.import_module(module), attr)), name


def test_repository_entry_points_are_console_scripts_scripts_and_one_alias():
    """No shim layers: tools/ holds only Megatron-LM's preprocess command, and there is no root launcher."""
    assert sorted(p.name for p in (REPO_ROOT / "tools").iterdir()) == ["preprocess_data.py"]
    # benchmarks/out/ is crossbert-bench's (git-ignored) default output folder; the old shims were scripts in it
    assert not list((REPO_ROOT / "benchmarks").glob("*.py")) and not (REPO_ROOT / "pretrain_crossbert.py").exists()
    done = subprocess.run([sys.executable, str(REPO_ROOT / "tools" / "preprocess_data.py"), "--help"],
                          capture_output=True, text=True, timeout=300, cwd=REPO_ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("usage: crossbert-preprocess") and "--tokenizer-type" in done.stdout
