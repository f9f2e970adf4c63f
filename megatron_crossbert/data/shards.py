"""Sharded preprocessing: which input files a task reads, what it writes, and which outputs are sealed.

A corpus preprocessed by N tasks (``datatrove_step``) must merge into exactly the bytes one
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
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

TASK_DIGITS = 5
_TEMPORARY = re.compile(r"\.tmp-[A-Za-z0-9_.]+-\d+-\d+")
"""The owner tag ``fsutil.temp_sibling`` puts in a temporary name."""
_KEYED = re.compile(r"^\d+_(.+)_document$")
"""A task's output name: ``<rank>_<key>_document``."""


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


def task_files(paths: Sequence[str | os.PathLike], rank: int, world_size: int) -> list[str]:
    """The local files task ``rank`` of ``world_size`` reads, in input order."""
    sizes = [os.path.getsize(p) for p in paths]
    return [str(paths[i]) for i in contiguous_shard(sizes, rank, world_size)]


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
    keys = {match[1]: stem for stem in stems if (match := _KEYED.search(stem))}
    if key is not None:
        return [str(root / stem) for stem in stems if stem.endswith(f"_{key}_document")]
    if len(keys) > 1:
        raise ValueError(f"{directory}: holds the shards of several JSON keys ({', '.join(sorted(keys))}); "
                         "merge one at a time with --json-key KEY")
    return [str(root / stem) for stem in stems]
