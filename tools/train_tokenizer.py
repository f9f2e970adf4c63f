"""Shim: ``python tools/train_tokenizer.py`` runs the same CLI as the console script (see megatron_crossbert/cli/train_tokenizer.py)."""
import sys; from pathlib import Path; sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # noqa: E702
from megatron_crossbert.cli.train_tokenizer import main  # noqa: E402
if __name__ == "__main__":  # guard: --workers spawns processes that re-import this file
    sys.exit(main())
