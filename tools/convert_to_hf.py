"""Shim: ``python tools/convert_to_hf.py`` == ``crossbert-convert-hf``."""
import sys; from pathlib import Path; sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # noqa: E702
from megatron_crossbert.cli.convert_hf import main  # noqa: E402
if __name__ == "__main__":  # guard: checkpoint readers may spawn processes that re-import this file
    sys.exit(main())
