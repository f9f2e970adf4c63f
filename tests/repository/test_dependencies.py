"""Dependencies that run one way (experiments -> library, never between experiments, never back), and a
non-editable ``pip install`` (no source checkout behind it) that still gives a working ``crossbert-demo``.
"""

from __future__ import annotations

import ast
import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import REPO_ROOT


def _imported_modules(path: Path) -> set[str]:
    """Absolute module names a file imports (relative imports stay inside its own package)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def test_dependencies_run_one_way():
    """The library imports no experiment; an experiment imports the library and itself, never another."""
    experiments = sorted(p.name for p in (REPO_ROOT / "experiments").iterdir() if (p / "__init__.py").is_file())
    assert experiments == ["claims", "crossbert_demo", "device_check"]
    tops = {*experiments, "experiments"}
    library = {f"{path.relative_to(REPO_ROOT)}: {name}" for path in (REPO_ROOT / "megatron_crossbert").rglob("*.py")
               for name in _imported_modules(path) if name.split(".")[0] in tops}
    assert library == set()
    for experiment in experiments:
        others = tops - {experiment}
        crossing = {f"{path.relative_to(REPO_ROOT)}: {name}"
                    for path in (REPO_ROOT / "experiments" / experiment).rglob("*.py")
                    for name in _imported_modules(path) if name.split(".")[0] in others}
        assert crossing == set(), experiment


@pytest.mark.e2e
def test_plain_pip_install_gives_a_working_crossbert_demo(tmp_path):
    """Build and install a copy of the project, non-editable and without its dependencies, into a scratch
    venv that sees this venv's site-packages (torch, megatron-core, ...) but not its editable install."""
    source = tmp_path / "src"
    for name in ("megatron_crossbert", "experiments"):
        shutil.copytree(REPO_ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO_ROOT / name, source / name)
    venv = tmp_path / "venv"
    subprocess.run([sys._base_executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    purelib = Path(subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; "
                                   "print(sysconfig.get_paths()['purelib'])"],
                                  capture_output=True, text=True, check=True).stdout.strip())
    (purelib / "reuse_test_venv.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    install = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
                              "--no-deps", "--no-build-isolation", "--no-index", "-q", str(source)],
                             capture_output=True, text=True, timeout=600)
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
    assert (purelib / "crossbert_demo" / "cli.py").is_file() and not (purelib / "experiments").exists()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # a checkout on it would win over the install
    done = subprocess.run([str(venv / "bin" / "crossbert-demo"), "--help"], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("usage: crossbert-demo") and "--seq-length" in done.stdout
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import crossbert_demo, megatron_crossbert; "
                            "print(crossbert_demo.__file__, megatron_crossbert.__file__)"],
                           capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert where.stdout.split() == [str(purelib / "crossbert_demo" / "__init__.py"),
                                    str(purelib / "megatron_crossbert" / "__init__.py")], where.stderr
