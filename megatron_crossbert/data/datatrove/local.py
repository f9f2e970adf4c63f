"""datatrove's local executor, with tasks that die with their launcher and a launcher that notices a dead task.

``LocalPipelineExecutor`` runs its tasks in a ``multiprocess`` pool plus a Manager server. Two faults follow:

* **A task worker that dies** (SIGKILL, the OOM killer) loses its task without a word: the pool starts a new
  worker, the result never comes, and the launcher waits forever after logging ``3/4 tasks completed``.
* **A SIGKILLed launcher** leaves its pool workers and the Manager server running or asleep for hours: nothing
  in them watches the launcher.

:class:`GuardedLocalExecutor` runs the same tasks (``_run_for_rank``: datatrove's logging, stats and
completion markers) in one process per task, at most ``workers`` at once, started with ``spawn`` from the
launcher's main thread; each asks the kernel first to be killed when the launcher dies
(``parent_death.die_with_parent``). The launcher waits on the processes themselves, so a task that dies is
seen at once: the other tasks finish, then the launch fails in one line naming the dead tasks and their
logs (a rerun redoes just those). With ``workers == 1`` the tasks run in the launcher itself, one after the
other, as datatrove does: then no process exists that could outlive it.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
from collections import deque
from copy import deepcopy

from datatrove.executor import LocalPipelineExecutor
from datatrove.utils.stats import PipelineStats

from megatron_crossbert.parent_death import die_with_parent

logger = logging.getLogger(__name__)


class TaskFailedError(RuntimeError):
    """Tasks of a local run exited with an error or were killed (the launch's one-line failure)."""


def _task_main(executor: LocalPipelineExecutor, rank: int, local_rank: int, launcher_pid: int) -> None:
    """A task process: die with the launcher, leave Ctrl-C to it (it stops every task), then run the task as
    datatrove would; a failure exits 1, its traceback already in the task's log."""
    die_with_parent(launcher_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        executor._run_for_rank(rank, local_rank)
    except Exception:
        sys.exit(1)


def _how(exitcode: int) -> str:
    if exitcode < 0:
        return f"killed by {signal.Signals(-exitcode).name}"
    return f"exit status {exitcode}"


class GuardedLocalExecutor(LocalPipelineExecutor):
    """``LocalPipelineExecutor`` whose tasks die with the launcher, and whose launcher fails on a dead task."""

    def run(self):
        """Run the incomplete tasks; TaskFailedError naming each task that failed or died."""
        ranks = range(self.local_rank_offset, self.local_rank_offset + self.local_tasks)
        todo = self.get_incomplete_ranks(ranks)
        if not todo:
            logger.info("all %d tasks were completed earlier; nothing to do", self.local_tasks)
            return PipelineStats()
        self.save_executor_as_json()
        if self.workers == 1:
            pipeline = self.pipeline
            for rank in todo:  # in this process: nothing is left behind if it is killed
                self.pipeline = deepcopy(pipeline)
                self._run_for_rank(rank)
            failed = []
        else:
            failed = self._run_in_processes(todo)
        if failed:
            logs = self.logging_dir.resolve_paths("logs")
            raise TaskFailedError(
                f"{len(failed)} of {len(todo)} tasks failed: " + ", ".join(f"task {r} ({how})" for r, how in failed)
                + f"; their logs: {logs}/task_<rank>.log. The others are complete: rerun the same command to redo "
                "the failed ones")
        stats = self._merged_stats(todo)
        logger.info("all %d tasks completed", len(todo))
        return stats

    def _run_in_processes(self, ranks: list[int]) -> list[tuple[int, str]]:
        """At most ``workers`` task processes at a time; (rank, how it ended) of each that failed."""
        import multiprocess
        from multiprocess.connection import wait

        ctx = multiprocess.get_context("spawn")
        pending, free_slots = deque(ranks), list(range(self.workers))
        running: dict = {}
        failed: list[tuple[int, str]] = []
        try:
            while pending or running:
                while pending and free_slots:
                    rank, slot = pending.popleft(), free_slots.pop()
                    process = ctx.Process(target=_task_main, args=(self, rank, slot, os.getpid()),
                                          name=f"datatrove task {rank}")
                    process.start()
                    running[process.sentinel] = (rank, slot, process)
                for sentinel in wait(list(running)):
                    rank, slot, process = running.pop(sentinel)
                    process.join()
                    free_slots.append(slot)
                    if process.exitcode != 0:
                        failed.append((rank, _how(process.exitcode)))
                        logger.error("task %d failed (%s)", rank, _how(process.exitcode))
                    logger.info("%d/%d tasks ended", len(ranks) - len(pending) - len(running), len(ranks))
        finally:
            for _, _, process in running.values():  # an error or Ctrl-C here: no task outlives the launch
                process.kill()
                process.join()
        return sorted(failed)

    def _merged_stats(self, ranks: list[int]) -> PipelineStats:
        """The tasks' stats (each wrote ``stats/<rank>.json``) summed into ``stats.json``, as datatrove does."""
        stats = PipelineStats()
        for rank in ranks:
            path = f"stats/{rank:05d}.json"
            if self.logging_dir.isfile(path):
                with self.logging_dir.open(path, "r") as handle:
                    stats += PipelineStats.from_json(json.load(handle))
        with self.logging_dir.open("stats.json", "wt") as handle:
            stats.save_to_disk(handle)
        return stats
