"""The process trees of a test's trainers, read from ``/proc`` (Linux): who is alive, who descends from whom,
which process is a save's forked writer. What a batch system or a kill reaches is a set of processes, so the
signal tests name them this way."""

from __future__ import annotations

import os


def alive(pid: int) -> bool:
    """Running and not a zombie (a zombie has exited; only its parent's wait is missing)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _parents() -> dict[int, int]:
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    parents[int(entry)] = int(handle.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
    return parents


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children, their children, ...)."""
    parents = _parents()
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        kids = [child for child, ppid in parents.items() if ppid == parent]
        found += kids
        todo += kids
    return found


def cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read()
    except OSError:
        return b""


def forked_writers(pid: int) -> list[int]:
    """The async-save writers below ``pid``: forks of a trainer, so the same command line as their parent
    (the results server is a spawned interpreter with its own)."""
    parents = _parents()
    return [child for child in descendants(pid) if b"megatron_crossbert.cli.pretrain" in cmdline(child)
            and cmdline(child) == cmdline(parents.get(child, -1))]
