"""Sharded preprocessing: which input files a task reads, what it writes, and which outputs are sealed.

A corpus preprocessed by N tasks (``step``) must merge into exactly the bytes one
``crossbert-preprocess`` run over the same files writes. Three rules make that hold, and each has
its home here:

* **Contiguous shards.** Task ``r`` of ``N`` reads a contiguous run of the input files in input order
  (cut where the cumulative size crosses ``r/N`` of the total, so tasks get similar bytes), never
  datatrove's ``files[r::N]``: shard prefixes in sorted order are then the documents in input order.
* **Sortable names.** Task ``r`` writes under ``<dir>/<r:05d>`` (``00000_text_document.bin``, ...), so
  the sorted order of a directory (what Megatron-LM's ``merge_datasets.py`` uses) is task order.
* **Sealed outputs only.** A ``.bin/.idx`` pair counts once its ``.idx`` has its final name; a task
  killed mid-write leaves only temporaries (``<prefix>.tmp-<host>-<pid>-<start>.bin``), which
  :func:`sealed_prefixes` never returns. A task whose report exists finished (the report is renamed
  into place last), and a rerun skips it.

A merge or blend of a shard folder reads :func:`checked_prefixes`: the folder whole or a one-line
refusal, never fewer documents with exit 0. With the run's record (``shard_run``) every task 0..N-1 must
have its report and every output its report lists; a pair no task wrote (an earlier merge's output, a
copy) is refused. Without a record (shards of other tools), a half pair or a gap in the task numbering
is refused.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from pathlib import Path

from megatron_crossbert.data.datatrove.shard_run import RUN_FILE, read_run_record
from megatron_crossbert.data.preprocessing.preprocess import document_prefix, report_path

TASK_DIGITS = 5
_TEMPORARY = re.compile(r"\.tmp-[A-Za-z0-9_.]+-\d+-\d+")
"""The owner tag ``fsutil.temp_sibling`` puts in a temporary name."""
_KEYED = re.compile(r"^(\d+)_(.+)_document$")
"""A task's output name: ``<rank>_<key>_document``."""
_SHOWN = 8
"""Task numbers named in a refusal (then how many more)."""


def task_prefix(output_dir: str | os.PathLike, rank: int) -> str:
    """The ``--output-prefix`` of task ``rank``: ``<dir>/00007``."""
    return os.path.join(str(output_dir), f"{rank:0{TASK_DIGITS}d}")


def contiguous_shard(sizes: Sequence[int], rank: int, world_size: int) -> range:
    """Indices of the files task ``rank`` reads: file ``i`` belongs to the task whose share of the total
    size holds the file's midpoint. Contiguous, disjoint, covering, deterministic; a task may get none."""
    if not 0 <= rank < world_size:
        raise ValueError(f"task rank {rank} is outside 0..{world_size - 1}")
    total = sum(max(int(s), 1) for s in sizes)
    owners, start = [], 0
    for size in sizes:
        size = max(int(size), 1)
        owners.append(min(world_size - 1, (2 * start + size) * world_size // (2 * total)))
        start += size
    mine = [i for i, owner in enumerate(owners) if owner == rank]
    return range(mine[0], mine[-1] + 1) if mine else range(0)


def task_files(paths: Sequence[str | os.PathLike], rank: int, world_size: int,
               sizes: Sequence[int] | None = None) -> list[str]:
    """The local files task ``rank`` of ``world_size`` reads, in input order, cut by ``sizes`` (the sizes the
    run recorded at launch, so every task cuts alike); a file whose size is no longer that is refused."""
    if sizes is None:
        return [str(paths[i]) for i in contiguous_shard([os.path.getsize(p) for p in paths], rank, world_size)]
    if len(sizes) != len(paths):
        raise ValueError(f"{len(paths)} input files, but the run recorded the sizes of {len(sizes)}")
    mine = [(str(paths[i]), int(sizes[i])) for i in contiguous_shard(sizes, rank, world_size)]
    for path, size in mine:
        if os.path.getsize(path) != size:
            raise ValueError(f"{path}: {os.path.getsize(path)} bytes now, {size} when the run was launched; the "
                             "input changed under the run (relaunch: the launcher refuses it or starts over)")
    return [path for path, _ in mine]


def is_temporary(name: str) -> bool:
    """A name written under a temporary owner tag (a writer is, or was, still at work on it)."""
    return _TEMPORARY.search(name) is not None


def sealed_prefixes(directory: str | os.PathLike, key: str | None = None) -> list[str]:
    """Prefixes in ``directory`` with both a ``.bin`` and an ``.idx`` under their final names, sorted
    (Megatron-LM's ``merge_datasets.py`` order); temporaries of unfinished writers are left out. With
    ``key``, only that JSON key's (``*_<key>_document``); without, a folder holding the shards of several
    keys (``--json-keys text title``) is refused: merging them together would interleave the keys."""
    root = Path(directory)
    if not root.is_dir():
        raise NotADirectoryError(f"{directory}: not a directory")
    names = {p.name for p in root.iterdir() if p.is_file()}
    stems = sorted(n[:-4] for n in names if n.endswith(".idx") and not is_temporary(n))
    stems = [stem for stem in stems if f"{stem}.bin" in names]
    keys = {match[2]: stem for stem in stems if (match := _KEYED.search(stem))}
    if key is not None:
        return [str(root / stem) for stem in stems if stem.endswith(f"_{key}_document")]
    if len(keys) > 1:
        raise ValueError(f"{directory}: holds the shards of several JSON keys ({', '.join(sorted(keys))}); "
                         "merge one at a time with --json-key KEY")
    return [str(root / stem) for stem in stems]


def _ranks(ranks: list[int]) -> str:
    more = f" and {len(ranks) - _SHOWN} more" if len(ranks) > _SHOWN else ""
    return ", ".join(str(rank) for rank in ranks[:_SHOWN]) + more


def _refuse_half_pairs(root: Path) -> None:
    """A ``.bin`` without its ``.idx`` or the reverse (a task killed between its renames, a cut copy)."""
    names = {p.name for p in root.iterdir() if p.is_file() and not is_temporary(p.name)}
    for name in sorted(names):
        stem, ext = name[:-4], name[-4:]
        other = {".bin": ".idx", ".idx": ".bin"}.get(ext)
        if other and f"{stem}{other}" not in names:
            raise ValueError(f"{root / stem}{other}: missing beside its {ext} (half a .bin/.idx pair: an unfinished "
                             "task or a cut copy); a merge would drop its documents. Rerun the task that writes it")


def _keys_here(root: Path) -> str:
    keys = sorted({m[2] for p in root.glob("*.idx") if (m := _KEYED.search(p.name[:-4]))})
    return ", ".join(keys) or "none"


def _refuse_gaps(root: Path, prefixes: list[str]) -> None:
    """Without a run record: task-numbered shards must run 0, 1, 2, ... (a rank with a report wrote nothing)."""
    ranks = sorted({int(m[1]) for p in prefixes if (m := _KEYED.search(Path(p).name))})
    lost = [r for r in range(ranks[-1] + 1) if r not in ranks and not os.path.exists(
        report_path(task_prefix(root, r)))] if ranks else []
    if lost:
        raise ValueError(f"{root}: no shard of task(s) {_ranks(lost)} (it has the shards of tasks {ranks[0]}.."
                         f"{ranks[-1]}, and no report says the task wrote nothing): a lost or unfinished task; a "
                         "merge would drop its documents")


def _refuse_missing_tasks(root: Path, tasks: int) -> None:
    missing = [r for r in range(tasks) if not os.path.exists(report_path(task_prefix(root, r)))]
    if missing:
        raise ValueError(f"{root}: the run is incomplete: task(s) {_ranks(missing)} of {tasks} have no report "
                         "(still running, failed or killed); rerun crossbert-preprocess-datatrove with the same "
                         "arguments to finish them")


def _read_report(path: str) -> dict:
    try:
        report = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a readable task report ({exc})") from None
    if not isinstance(report, dict):
        raise ValueError(f"{path}: not a task report (a JSON object)")
    return report


def run_totals(directory: str | os.PathLike, tasks: int) -> dict:
    """Documents read, written and skipped, and skips per kind (with the first place of each), summed over the
    reports of tasks 0..``tasks``-1 that exist: a sharded run's account, as one run's report gives it."""
    totals = {"reports": 0, "documents_read": 0, "documents_written": 0, "documents_skipped": 0,
              "skipped_by_kind": {}, "first_skip_location": {}}
    for rank in range(tasks):
        path = report_path(task_prefix(directory, rank))
        if not os.path.exists(path):
            continue
        report = _read_report(path)
        totals["reports"] += 1
        for key in ("documents_read", "documents_written", "documents_skipped"):
            totals[key] += int(report.get(key) or 0)
        for kind, count in (report.get("skipped_by_kind") or {}).items():
            totals["skipped_by_kind"][kind] = totals["skipped_by_kind"].get(kind, 0) + count
            totals["first_skip_location"].setdefault(kind, (report.get("first_skip_location") or {}).get(kind))
    return totals


def _run_prefixes(root: Path, record: dict, found: list[str], key: str | None) -> list[str]:
    """The outputs of the recorded run's tasks, in task order: all tasks reported, every listed output sealed."""
    tasks, keys = record["tasks"], list((record.get("encoding") or {}).get("json_keys") or ["text"])
    if key is not None and key not in keys:
        raise ValueError(f"--json-key {key}: the run in {root} tokenized {', '.join(keys)} only ({RUN_FILE})")
    key = key or keys[0]
    expected = []
    for rank in range(tasks):
        if key in (_read_report(report_path(task_prefix(root, rank))).get("outputs") or {}):
            expected.append(str(root / Path(document_prefix(task_prefix(root, rank), key)).name))
    absent = sorted(set(expected) - set(found))
    stray = sorted(set(found) - set(expected))
    if absent:
        raise ValueError(f"{absent[0]}.bin/.idx: its task's report lists it, but the pair is gone; rerun the task")
    if stray:
        raise ValueError(f"{stray[0]}: not an output of the run's tasks (an earlier merge's output, or another "
                         f"run's?); move it out of {root}, a merge would read it as a shard")
    return expected


def checked_prefixes(directory: str | os.PathLike, key: str | None = None) -> list[str]:
    """The shard prefixes a merge or blend of ``directory`` reads (``key``: that JSON key's), in task order;
    an incomplete run, a half pair, a gap or a stray pair is refused in one line."""
    root = Path(directory)
    if not root.is_dir():
        raise NotADirectoryError(f"{directory}: not a directory")
    record = read_run_record(root)
    if record is not None:
        _refuse_missing_tasks(root, record["tasks"])
    _refuse_half_pairs(root)
    found = sealed_prefixes(root, key)
    if record is not None:
        prefixes = _run_prefixes(root, record, found, key)
    else:
        _refuse_gaps(root, found)
        prefixes = found
    if not prefixes and key is not None:
        raise FileNotFoundError(f"{directory}: no .bin/.idx pairs of --json-key {key} (the keys here: "
                                f"{_keys_here(root)})")
    if not prefixes:
        raise FileNotFoundError(f"{directory}: no .bin/.idx pairs to merge")
    return prefixes
