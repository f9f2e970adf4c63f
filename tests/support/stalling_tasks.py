"""``python -m tests.support.stalling_tasks MARKS RANKS ARGV...``: crossbert-preprocess-datatrove with ARGV, whose
tasks RANKS (``1,3``) first write their pid to ``MARKS/<rank>`` and then sleep, so a test can kill a task, or the
launcher, while tasks are alive. The stall is a pipeline step in front of the real one."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path


class Stall:
    """A pipeline step (datatrove calls it with ``data, rank, world_size``) that parks the chosen tasks."""

    def __init__(self, marks: str, ranks: set[int]) -> None:
        self.marks, self.ranks = marks, ranks

    def __call__(self, data, rank: int = 0, world_size: int = 1):
        if rank in self.ranks:
            Path(self.marks, str(rank)).write_text(str(os.getpid()))
            time.sleep(600)
        return data


def main() -> int:
    from megatron_crossbert.cli.preprocess_datatrove import main as datatrove_main
    from megatron_crossbert.data.datatrove import launch as datatrove_launch

    marks, ranks, argv = sys.argv[1], {int(r) for r in sys.argv[2].split(",")}, sys.argv[3:]
    build = datatrove_launch.build_pipeline
    datatrove_launch.build_pipeline = lambda cfg, opts: [Stall(marks, ranks)] + build(cfg, opts)
    return datatrove_main(argv)


if __name__ == "__main__":
    sys.exit(main())
