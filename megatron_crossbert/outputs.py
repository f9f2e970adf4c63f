"""Outputs written outside training (exports, imports, tokenizers, datasets, evaluation reports and caches):
whole or not at all, a full disk said in one line naming the output, a path that cannot be one refused first.

- :func:`require_output_dir`: before any work, a directory output is a directory or can be made one (a
  file in its place, or a file among its parents, is one line instead of ``[Errno 17] File exists`` after
  minutes of work).
- :func:`staged_dir`: a directory output is written into a hidden stage beside it, named with its owner
  (``.<name>.tmp-<host>-<pid>-<start>-<random>``, ``fsutil``'s temporary names), and renamed into place
  only when complete; a stage a killed run left behind is removed by the next run into the same place.
- :func:`writing`: around a write phase, a full disk (``ENOSPC``/``EDQUOT``, however the library reports it:
  :func:`no_space_in_chain`) or any other ``OSError`` becomes one :class:`OutputError` naming the output,
  and the directories the phase created are removed again when it leaves them empty.
- :func:`write_section`: one tool's section of a page that several tools fill (``docs/results.md``), between
  ``<!-- NAME:start ... -->`` and ``<!-- NAME:end -->``, replaced in place or appended; every other byte of the
  page stays as it was, so no tool rewrites another's numbers.

Training's checkpoint saves have their own rules (``checkpoint/save_errors.py``), built on the same
recogniser. This module imports nothing but ``fsutil``, so every layer may use it.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from megatron_crossbert.fsutil import (
    apply_umask_modes, atomic_write_text, move_aside, remove_stale_temporaries, temp_sibling,
)

NO_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
_NO_SPACE_TEXT = ("no space left on device", "disk quota exceeded", "[errno 28]", "[errno 122]", "os error 28")


class OutputError(Exception):
    """An output could not be written: one line naming it (``cli_main`` prints it, exit status 2)."""


def iter_causes(err: BaseException) -> Iterator[BaseException]:
    """``err`` and everything behind it: ``__cause__``, ``__context__`` and DCP's per-rank failures."""
    seen: set[int] = set()
    todo = [err]
    while todo:
        current = todo.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        todo += [current.__cause__, current.__context__]
        failures = getattr(current, "failures", None)
        if isinstance(failures, dict):  # torch.distributed.checkpoint.api.CheckpointException
            todo += [pair[0] if isinstance(pair, tuple) else pair for pair in failures.values()]


def no_space_in_chain(err: BaseException) -> bool:
    """True when some exception behind ``err`` is ENOSPC/EDQUOT, by errno or by its text (safetensors and
    tokenizers raise their own types whose message says ``No space left on device (os error 28)``)."""
    for cause in iter_causes(err):
        if isinstance(cause, OSError) and cause.errno in NO_SPACE_ERRNOS:
            return True
        if any(marker in str(cause).lower() for marker in _NO_SPACE_TEXT):
            return True
    return False


def require_output_dir(path: str | Path, what: str) -> Path:
    """``path`` is a directory, or one can be created there: refused in one line naming ``what`` (a flag or
    config key) when it, or one of its parents, is a file. Creates nothing."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise OutputError(f"{what} {path}: is a file, not a directory")
    parent = path.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise OutputError(f"{what} {path}: {parent} is a file, so no directory can be created under it")
    return path


def outermost_missing(path: Path) -> Path | None:
    """The outermost directory of ``path`` that does not exist yet (what ``mkdir(parents=True)`` would create)."""
    path, missing = path.absolute(), None
    while not path.exists():
        missing, path = path, path.parent
    return missing


def remove_empty_dirs(created: Path | None, deepest: Path) -> None:
    """Remove ``deepest`` and its parents up to ``created`` while they are empty (what a failed run made)."""
    if created is None:
        return
    for directory in [deepest.absolute(), *deepest.absolute().parents]:
        try:
            directory.rmdir()
        except OSError:
            return
        if directory == created:
            return


@contextmanager
def writing(output: str | Path, what: str, directory: str | Path | None = None) -> Iterator[None]:
    """Around the phase that writes ``output`` (``what`` says what it is: 'the export', 'the preprocessed
    dataset'): a full disk or another ``OSError`` becomes one ``OutputError`` naming ``output``, and the
    directories the phase created on the way to ``directory`` (default: ``output``'s parent) are removed
    if it leaves them empty."""
    directory = Path(directory) if directory is not None else Path(output).parent
    created = outermost_missing(directory)
    try:
        yield
    except OutputError:
        remove_empty_dirs(created, directory)
        raise
    except Exception as err:
        remove_empty_dirs(created, directory)
        if no_space_in_chain(err):
            raise OutputError(f"{output}: no space left on device while writing {what}; nothing was written "
                              "there (free some space and run the command again)") from err
        if isinstance(err, OSError) and not err.filename:
            raise OutputError(f"{output}: writing {what} failed: {err}") from err
        raise


def _stage_target(out_dir: Path) -> Path:
    """The name ``fsutil``'s temporary names are derived from: a hidden sibling of ``out_dir``."""
    return out_dir.with_name(f".{out_dir.name}")


def remove_stale_stages(out_dir: str | Path) -> list[Path]:
    """Stages of ``out_dir`` left by dead processes on this host (a killed export): removed, and said."""
    return remove_stale_temporaries([_stage_target(Path(out_dir))])


@contextmanager
def staged_dir(out_dir: str | Path, force: bool, what: str, *, merge: bool = False) -> Iterator[Path]:
    """Yield a hidden stage beside ``out_dir``; on success it takes ``out_dir``'s place. An existing
    ``out_dir`` needs ``force``: it is then moved aside to ``<out_dir>.replaced-<time>-<id>``, never deleted;
    with ``merge`` (a tokenizer directory, which may sit among other files) it is kept and the stage's
    files replace those of the same name in it. A file at ``out_dir`` is refused even with ``force``. A
    full disk is one ``OutputError`` naming ``out_dir`` (``writing``); the stage never survives a failure."""
    out_dir = Path(out_dir)
    require_output_dir(out_dir, "output directory")
    if out_dir.exists() and not force and not merge:
        raise OutputError(f"output directory {out_dir} already exists; pass --force (force=True) to replace it")
    with writing(out_dir, what):
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_stages(out_dir)
        stage = Path(tempfile.mkdtemp(dir=out_dir.parent, prefix=Path(temp_sibling(_stage_target(out_dir))).name + "-"))
        try:
            yield stage
            apply_umask_modes(stage)  # mkdtemp makes 0700 and safetensors 0600: a shared model must be readable
            _take_place(stage, out_dir, merge)
        finally:
            if stage.exists():
                shutil.rmtree(stage, ignore_errors=True)


def _take_place(stage: Path, out_dir: Path, merge: bool) -> None:
    """Renames only (no space needed): the whole stage, or with ``merge`` each of its entries."""
    if merge and out_dir.is_dir():
        for entry in sorted(stage.iterdir()):
            os.replace(entry, out_dir / entry.name)
        return
    if out_dir.exists():
        move_aside(out_dir)
    stage.rename(out_dir)


def section_marks(name: str, note: str = "") -> tuple[str, str]:
    """The start and end comments of section ``name`` (``note``: who writes it, shown in the start comment)."""
    return f"<!-- {name}:start{f' ({note})' if note else ''} -->", f"<!-- {name}:end -->"


def section_block(name: str, text: str, note: str = "") -> str:
    """Section ``name`` as it stands on the page: its start mark, a blank line, ``text``, a blank line, its end
    mark."""
    start, end = section_marks(name, note)
    return f"{start}\n\n{text.strip()}\n\n{end}"


def write_section(page: str | Path, name: str, text: str, note: str = "") -> Path:
    """Replace section ``name`` of ``page`` with ``text`` (markers included), or append it when the page has
    none; atomic, and the rest of the page is kept byte for byte. A page that does not exist is created."""
    page = Path(page)
    end = section_marks(name, note)[1]
    old = page.read_text() if page.is_file() else ""
    head, found, rest = old.partition(f"<!-- {name}:start")
    block = section_block(name, text, note)
    if found and end in rest:
        new = head + block + rest.split(end, 1)[1]
    else:
        new = old.rstrip("\n") + ("\n\n" if old.strip() else "") + block + "\n"
    with writing(page, f"the {name} section of {page}"):
        page.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(page, new)
    return page
