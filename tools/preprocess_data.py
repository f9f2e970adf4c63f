"""Alias: ``python tools/preprocess_data.py ...`` is ``crossbert-preprocess ...``.

Kept for Megatron-LM users, whose data command this is: the same flags (``--input``,
``--output-prefix``, ``--tokenizer-type``/``--tokenizer-model``, ``--vocab-file``, ``--workers``, ...)
work unchanged (megatron_crossbert/cli/preprocess.py). Runs from a checkout without installing: the
repository root is put on ``sys.path`` first.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from megatron_crossbert.cli.preprocess import main  # noqa: E402

if __name__ == "__main__":  # guard: --workers spawns processes that re-import this file
    sys.exit(main())
