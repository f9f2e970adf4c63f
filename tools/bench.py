"""Shim: ``python tools/bench.py`` runs the same CLI as ``crossbert-bench`` (see megatron_crossbert/cli/bench.py)."""
import sys; from pathlib import Path; sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # noqa: E702
from megatron_crossbert.cli.bench import main  # noqa: E402
if __name__ == "__main__":  # guard: spawned workers and checkpoint writers re-import this file
    sys.exit(main())
