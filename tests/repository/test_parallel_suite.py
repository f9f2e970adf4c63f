"""The suite uses every core: README's test command (the one CI runs) spreads whole files over pytest-xdist
workers, and each worker computes with one thread, its children too, so N workers never ask for more than N
cores. Every test starts at the suite's thread count, whatever the test before it set."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib

import pytest

from tests.support import REPO_ROOT

WORKER_FILE = """
import os, torch

def test_a_worker_computes_with_one_thread_and_tells_its_children():
    assert os.environ["PYTEST_XDIST_WORKER"].startswith("gw")
    assert torch.get_num_threads() == 1 and os.environ["OMP_NUM_THREADS"] == "1"
    torch.set_num_threads(2)  # what an in-process CLI without --threads does

def test_the_next_test_starts_at_one_thread_again():
    assert torch.get_num_threads() == 1
"""


def test_readmes_test_command_runs_on_every_core_with_whole_files_per_worker():
    command = re.search(r"^scripts/with-venv\.sh python -m (pytest.*)$", (REPO_ROOT / "README.md").read_text(),
                        re.MULTILINE).group(1).split()
    assert command[command.index("-n") + 1] == "auto" and command[command.index("--dist") + 1] == "loadfile"
    dev = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["dev"]
    assert any(dep.startswith("pytest-xdist") for dep in dev)  # what with-venv.sh installs


@pytest.mark.slow
def test_each_worker_computes_with_one_thread(tmp_path):
    """Two workers run a file with the suite's conftest as a plugin (one file: one worker, in order), in an
    environment without this run's own worker name and thread counts."""
    from megatron_crossbert.platform.threads import POOL_VARIABLES

    (tmp_path / "test_worker.py").write_text(WORKER_FILE)
    env = {k: v for k, v in os.environ.items() if k not in POOL_VARIABLES and not k.startswith("PYTEST_")}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.conftest",
                           "-n", "2", "--dist", "loadfile", "--rootdir", str(tmp_path), "-c", "/dev/null",
                           str(tmp_path)], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and "2 passed" in done.stdout, done.stdout[-3000:] + done.stderr[-2000:]
