"""Check the carried wheels right after they are installed on the device: ``python -m ...wheel_check WHEEL...``.

The wheels travel with ``--no-deps`` beside the image's own packages, so a carried package may need a version
of an image package (typing_extensions, pyarrow, fsspec, ...) that the image does not have, or the image's copy
of a package may shadow the carried one. Such a clash would otherwise show up minutes later, deep inside the
claims run or MTEB; here it fails at once, in one line naming the package and both versions. Then the modules
the stages import are imported once.
"""

from __future__ import annotations

import importlib
import importlib.metadata as metadata
import sys
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

LEFT_BEHIND_ON_PURPOSE = frozenset({"polars-runtime-32"})
"""Requirements deliberately not carried: polars' 54 MB runtime (mteb imports polars only for leaderboard
tables, which the device check never builds; ``carry`` says why)."""
IMPORT_CHECK = ("megatron.core", "nltk", "mteb", "datasets", "accelerate", "xxhash", "sacremoses")
"""Modules the stages import from carried wheels, imported once after the install."""


def carried(wheels: list[Path]) -> dict[str, str]:
    """Canonical name -> version of each wheel file."""
    return {canonicalize_name(name): str(version)
            for name, version, *_ in (parse_wheel_filename(Path(w).name) for w in wheels)}


def _installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def requirement_clashes(name: str, version: str) -> list[str]:
    """One line per unmet requirement of the installed ``name`` (extras left out), or its shadowing."""
    found = _installed(name)
    if found != version:
        return [f"carried {name} {version}, but {name} {found or 'nothing'} is what imports"]
    problems = []
    for line in metadata.distribution(name).requires or []:
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        if canonicalize_name(req.name) in LEFT_BEHIND_ON_PURPOSE:
            continue
        have = _installed(req.name)
        if have is None:
            problems.append(f"{name} {version} needs {req}; the device has no {req.name}")
        elif not req.specifier.contains(have, prereleases=True):
            problems.append(f"{name} {version} needs {req}; the device has {req.name} {have}")
    return problems


def clashes(wheels: list[Path]) -> list[str]:
    """Every clash of the carried wheels with what the device has, then every failed import."""
    problems = [line for name, version in carried(wheels).items() for line in requirement_clashes(name, version)]
    if problems:
        return problems
    for module in IMPORT_CHECK:
        try:
            importlib.import_module(module)
        except Exception as err:  # any import failure is the clash to report
            problems.append(f"import {module} failed: {type(err).__name__}: {err}")
    return problems


def main(argv: list[str]) -> int:
    problems = clashes([Path(arg) for arg in argv])
    if problems:
        print(f"error: carried wheels: {problems[0]}" + (f" (and {len(problems) - 1} more)" if problems[1:] else ""),
              file=sys.stderr)
        return 2
    print(f"carried wheels: {len(argv)} installed, their requirements met, {', '.join(IMPORT_CHECK)} import")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
