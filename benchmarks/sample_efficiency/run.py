"""Run the whole sample-efficiency experiment (resumable): ``python -m benchmarks.sample_efficiency.run``.

Same as ``crossbert-bench sample-efficiency``; see ``--help`` for paths, ``--plan tiny|cpu`` and
``--stages``. Rerunning the same command continues a partial run.
"""

import sys

from megatron_crossbert.cli.bench import main

if __name__ == "__main__":
    sys.exit(main(["sample-efficiency", *sys.argv[1:]]))
