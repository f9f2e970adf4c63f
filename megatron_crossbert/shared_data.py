"""Where the shared data lives (corpora, GLUE, probe tasks, MTEB-lite): the one owner of that answer.

Third-party text is never committed. It sits in a folder beside the checkout, ``../shared/data``
relative to the repository, or wherever ``$CROSSBERT_DATA_DIR`` points. A flag whose default is a
folder in there asks here at run time, so no default names one machine's absolute path: where the
folder is not found, the flag is required, and :func:`default_or_error` says in one line what to pass.

Candidates, first found wins: ``$CROSSBERT_DATA_DIR`` (taken as given, even if absent, so a typo is
named rather than passed over); ``../shared/data`` beside the checkout this package was imported from;
``../shared/data`` beside the current directory (an installed package run from a checkout).
Torch-free and imports nothing of the project, so every CLI and experiment may use it.
"""

from __future__ import annotations

import os
from pathlib import Path

DATA_DIR_ENV = "CROSSBERT_DATA_DIR"
_BESIDE = Path("..") / "shared" / "data"


def shared_data_dir() -> Path | None:
    """The shared data folder (see the module docstring), or None where there is none."""
    if os.environ.get(DATA_DIR_ENV):
        return Path(os.environ[DATA_DIR_ENV])
    for base in (Path(__file__).resolve().parents[1], Path.cwd()):
        candidate = (base / _BESIDE).resolve()
        if candidate.is_dir():
            return candidate
    return None


def find_shared(*parts: str) -> Path | None:
    """``parts`` under the shared data folder if that folder (for a glob: its parent) exists, else None."""
    root = shared_data_dir()
    if root is None:
        return None
    path = root.joinpath(*parts)
    folder = path.parent if any(char in path.name for char in "*?[") else path
    return path if folder.exists() else None


def default_or_error(flag: str, what: str, *parts: str) -> str:
    """A flag's default under the shared data folder; a ValueError naming what to pass where there is none.

    The CLIs print a ValueError as one ``error:`` line with exit status 2 (``cli.errors.cli_main``).
    """
    path = find_shared(*parts)
    if path is None:
        root = shared_data_dir()
        looked = root.joinpath(*parts) if root else f"{_BESIDE.joinpath(*parts)} beside the repository"
        raise ValueError(f"{flag}: no default {what} found (no {looked}); set {DATA_DIR_ENV} or pass {flag}")
    return str(path)
