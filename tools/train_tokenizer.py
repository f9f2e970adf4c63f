"""Shim: ``python tools/train_tokenizer.py`` == ``crossbert-train-tokenizer``."""
import sys; from pathlib import Path; sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # noqa: E702
from megatron_crossbert.cli.train_tokenizer import main  # noqa: E402
sys.exit(main())
