"""Shim: ``python tools/demo.py`` runs the same CLI as ``crossbert-demo`` (see megatron_crossbert/cli/demo.py)."""
import sys; from pathlib import Path; sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # noqa: E702
from megatron_crossbert.cli.demo import main  # noqa: E402
if __name__ == "__main__":  # guard: spawned workers and checkpoint writers re-import this file
    sys.exit(main())
