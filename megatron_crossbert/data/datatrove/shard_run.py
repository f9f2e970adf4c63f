"""The record of a sharded preprocessing run (``<output_dir>/preprocess_run.json``): what it read, how it
was cut into tasks and how it encodes, so that a rerun into the same folder continues exactly that run.

A rerun skips every task whose report exists. That is right only for the same run: with another task
count the finished tasks' shares overlap the new ones' (documents twice), and after an input file grew or
changed the finished tasks hold its old content (documents lost). So the launcher writes this record
before any task runs (:func:`start_run`), and a rerun whose record differs is refused in one line naming
the folder and what changed; ``--force`` starts over, the earlier run's files moved aside (nothing is
deleted). Inputs are identified by path, size and content (``content_identity.sampled_identity``: at most
1 MiB read per file, so relaunching on a TB corpus costs seconds); inputs behind an fsspec URL by their URL
only. The record also gives a merge the task count, so it can name the tasks a run still lacks
(``shards.checked_prefixes``).
"""

from __future__ import annotations

import fnmatch
import json
import logging
import os
import re
from pathlib import Path

from megatron_crossbert.content_identity import sampled_identity, tree_identity
from megatron_crossbert.fsutil import atomic_write_text, move_aside
from megatron_crossbert.outputs import require_output_dir

logger = logging.getLogger(__name__)

RUN_FILE = "preprocess_run.json"
FORMAT = "crossbert-preprocess-run/1"
ENCODING_FLAGS = {"tokenizer": "--tokenizer", "tokenizer_kind": "--tokenizer-type", "json_keys": "--json-keys",
                  "append_eod": "--append-eod", "split_sentences": "--split-sentences",
                  "max_document_bytes": "--max-document-bytes"}
"""The options that decide the shards' bytes (``PreprocessOptions`` fields), by the flag that sets them."""
_TASK_FILE = re.compile(r"^\d{5}_")
"""What a task writes in the output folder: ``<rank:05d>_...`` (outputs, records, reports, temporaries)."""
_SHOWN = 3
"""Changes named in a refusal (then how many more)."""


def record_path(output_dir: str | os.PathLike) -> Path:
    return Path(output_dir) / RUN_FILE


def read_run_record(output_dir: str | os.PathLike) -> dict | None:
    """The folder's run record, or None when it has none (shards of another tool or an older version)."""
    path = record_path(output_dir)
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a readable run record ({exc})") from None
    if not isinstance(record, dict) or record.get("format") != FORMAT or not isinstance(record.get("tasks"), int):
        raise ValueError(f"{path}: not a {FORMAT} run record (written by crossbert-preprocess-datatrove)")
    return record


def _file_entry(path: str, size: int | None = None) -> dict:
    return {"path": path, "size": os.path.getsize(path) if size is None else int(size),
            "identity": sampled_identity(path)}


def _folder_entries(folder: str, glob_pattern: str | None, skip: list[str]) -> list[dict]:
    """A datatrove reader's local folder: each file it may read (not the run's own output or logs)."""
    root = Path(folder)
    files = sorted(p for p in root.rglob("*") if p.is_file() and not any(p.is_relative_to(s) for s in skip)
                   and fnmatch.fnmatch(str(p.relative_to(root)), glob_pattern or "*"))
    return [_file_entry(str(p)) for p in files]


def input_entries(inputs: list[str], sizes: list[int] | None, glob_pattern: str | None = None,
                  skip: list[str] = ()) -> list[dict]:
    """Path, size and content identity of every input: the files of ``inputs`` (``sizes``: those the tasks
    cut by), or a reader's folder; an fsspec URL (s3://, hf://) by its URL alone."""
    if sizes is not None:
        return [_file_entry(path, size) for path, size in zip(inputs, sizes, strict=True)]
    skip = [Path(s).absolute() for s in skip]
    entries = []
    for source in inputs:
        if "://" in source or not os.path.isdir(source):
            entries.append({"path": source})
        else:
            entries += _folder_entries(os.path.abspath(source), glob_pattern, skip)
    return entries


def run_record(tasks: int, reader: str, encoding: dict, inputs: list[dict]) -> dict:
    """The record of one run: task count, reader, the encoding options (``ENCODING_FLAGS``) and the inputs."""
    tokenizer = encoding.get("tokenizer")
    if tokenizer and os.path.exists(tokenizer):  # by content: the same tokenizer copied elsewhere is the same
        encoding = dict(encoding, tokenizer=tree_identity(tokenizer))
    return {"format": FORMAT, "tasks": int(tasks), "reader": reader,
            "encoding": {key: encoding.get(key) for key in ENCODING_FLAGS}, "inputs": inputs}


def _input_changes(old: list[dict], new: list[dict]) -> list[str]:
    before, now = {e["path"]: e for e in old}, {e["path"]: e for e in new}
    changes = [f"input {p} added" for p in now if p not in before]
    changes += [f"input {p} gone" for p in before if p not in now]
    for path in (p for p in now if p in before):
        if before[path].get("size") != now[path].get("size"):
            changes.append(f"input {path}: {before[path].get('size')} bytes then, {now[path].get('size')} now")
        elif before[path].get("identity") != now[path].get("identity"):
            changes.append(f"input {path}: other content at the same size")
    if not changes and [e["path"] for e in old] != [e["path"] for e in new]:
        changes.append("the inputs' order")
    return changes


def record_changes(old: dict, new: dict) -> list[str]:
    """What differs between an earlier run's record and this one's, in words (empty: the same run)."""
    changes = [f"--tasks {old.get('tasks')} then, {new['tasks']} now"] if old.get("tasks") != new["tasks"] else []
    if old.get("reader") != new["reader"]:
        changes.append(f"--reader {old.get('reader')} then, {new['reader']} now")
    before = old.get("encoding") or {}
    for key, flag in ENCODING_FLAGS.items():
        if before.get(key) != new["encoding"][key]:
            changes.append(f"{flag}: other content" if key == "tokenizer" else
                           f"{flag} {before.get(key)} then, {new['encoding'][key]} now")
    return changes + _input_changes(old.get("inputs") or [], new["inputs"])


def _earlier_files(output_dir: Path, logging_dir: Path) -> list[Path]:
    """What an earlier run left: its task files and record here, datatrove's completion markers there."""
    found = sorted(p for p in output_dir.iterdir() if _TASK_FILE.match(p.name) or p.name == RUN_FILE) \
        if output_dir.is_dir() else []
    markers = logging_dir / "completions"
    return found + ([markers] if markers.is_dir() and any(markers.iterdir()) else [])


def _move_earlier_run(output_dir: Path, logging_dir: Path, files: list[Path]) -> None:
    """``--force``: the earlier run's files into one folder moved aside in ``output_dir``, its logging folder
    moved aside; the folder's other files stay. Nothing is deleted."""
    if logging_dir.is_dir():
        move_aside(logging_dir)
    files = [p for p in files if p.exists() and p.parent == output_dir]
    if files:
        earlier = output_dir / "earlier-run"
        if earlier.exists():  # left by a --force that was interrupted: kept, under its own name
            move_aside(earlier)
        earlier.mkdir()
        for path in files:
            os.rename(path, earlier / path.name)
        move_aside(earlier)


def start_run(output_dir: str, logging_dir: str, record: dict, force: bool = False) -> None:
    """Before any task runs: continue the same run, start a new one, or refuse (one line); ``force`` starts
    over with the earlier run moved aside. Writes the record."""
    out, logs = require_output_dir(output_dir, "--output-dir").absolute(), Path(logging_dir).absolute()
    earlier, old = _earlier_files(out, logs), read_run_record(out)
    if earlier and not force:
        if old is None:
            raise FileExistsError(
                f"{output_dir}: holds an earlier run ({earlier[0]}) but no {RUN_FILE} saying what it read: "
                "finishing it could mix two runs' documents. Use another --output-dir, or pass --force to start "
                "over (the earlier run is moved aside, nothing deleted)")
        changes = record_changes(old, record)
        if changes:
            more = f" and {len(changes) - _SHOWN} more" if len(changes) > _SHOWN else ""
            raise ValueError(
                f"{output_dir}: holds a run that differs from this one ({'; '.join(changes[:_SHOWN])}{more}): "
                "finishing it would mix the two runs' documents. Rerun with its settings, use another --output-dir, "
                "or pass --force to start over (the earlier run is moved aside, nothing deleted)")
        logger.info("%s: continuing the run recorded in %s (finished tasks are skipped)", output_dir, RUN_FILE)
        return
    if earlier:
        logger.warning("%s: --force: starting over; the earlier run is moved aside", output_dir)
        _move_earlier_run(out, logs, earlier)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(record_path(out), json.dumps(record, indent=1) + "\n")
