"""Helpers of the tests (no tests here): generated data, tiny models and runs, spawned ranks, CLI cases.

``REPO_ROOT`` is the checkout the tests run from: the one definition, imported by every test that reads
a file of the repository or starts a process in it.
"""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
