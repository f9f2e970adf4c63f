"""Every console script from DESIGN.md exists, and every ``tools/*.py`` shim answers ``--help``."""

from __future__ import annotations

import importlib
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = ("crossbert-train-tokenizer", "crossbert-preprocess", "crossbert-pretrain", "crossbert-convert-hf",
           "crossbert-probe", "crossbert-mteb", "crossbert-bench", "crossbert-demo")


def test_console_scripts_point_at_callable_mains():
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert set(SCRIPTS) <= set(declared)
    for name in SCRIPTS:
        module, _, attr = declared[name].partition(":")
        assert callable(getattr(importlib.import_module(module), attr)), name


@pytest.mark.parametrize("shim", sorted(p.name for p in (REPO / "tools").glob("*.py")))
def test_tool_shim_help(shim):
    done = subprocess.run([sys.executable, str(REPO / "tools" / shim), "--help"], capture_output=True,
                          text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("usage: crossbert-"), done.stdout[:200]
