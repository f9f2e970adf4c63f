"""What several console scripts share: the help formatter, the quiet-warnings switch, and the flags of the
tools that read native checkpoints or embed text with a frozen encoder."""

from __future__ import annotations

import argparse
import typing
import warnings


class DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """``--help`` adds each flag's ``(default: X)``, except where the help string already says its default:
    argparse's own formatter would then print it twice ("(default: mean) (default: mean)")."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        return text if "default" in text.lower() else super()._get_help_string(action)


def quiet_library_warnings() -> None:
    """Hide torch/megatron/transformers deprecation chatter so progress and results stay readable.

    Only warning categories that libraries use for API churn are silenced; errors are untouched.
    """
    for category in (DeprecationWarning, FutureWarning, UserWarning, SyntaxWarning):
        warnings.filterwarnings("ignore", category=category)


def add_verify_flag(parser: argparse.ArgumentParser) -> None:
    """--verify for the tools that read native checkpoints (export, probe, MTEB); training has
    --checkpoint-verify (checkpoint.verify)."""
    from megatron_crossbert.config import CheckpointConfig, field_choices

    parser.add_argument("--verify", choices=field_choices(CheckpointConfig, "verify"), default="full",
                        help="native checkpoints: check every file against the hashes recorded when it was saved "
                             "(checksums.json) before reading it; 'off' skips that, and a flipped bit then goes "
                             "unnoticed")


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """--model and how it resolves (``evaluation/encoders.resolve_model``), for every tool that loads an encoder
    (crossbert-probe, crossbert-mteb, crossbert-finetune)."""
    parser.add_argument("--model", required=True,
                        help="native checkpoint (root or iter_* dir), HF encoder directory, sentence-transformers "
                             "directory, or hub name (online)")
    parser.add_argument("--tokenizer-dir",
                        help="native checkpoints: tokenizer to export with (default: the run config's)")
    parser.add_argument("--device", help="torch device (default: cuda if available)")
    parser.add_argument("--cache-dir", help="feature / export cache (default $CROSSBERT_EVAL_CACHE or "
                                            "~/.cache/megatron_crossbert/eval); 'none' disables")
    add_verify_flag(parser)


def add_encoder_arguments(parser: argparse.ArgumentParser, *, max_len: int, recipe_defaults: bool = False) -> None:
    """Options shared by the tools that embed text with a frozen encoder (crossbert-probe, crossbert-mteb).

    --pooling defaults to the model's own sentence-transformers config (``evaluation/recipe.py``), else mean;
    ``recipe_defaults``: so does --max-len, falling back to ``max_len`` tokens.
    """
    from megatron_crossbert.evaluation.encoders import Pooling

    add_model_arguments(parser)
    parser.add_argument("--pooling", choices=typing.get_args(Pooling), default=None,
                        help="how token states become one vector (default: the model's sentence-transformers "
                             "Pooling config, else mean)")
    if recipe_defaults:
        parser.add_argument("--max-len", type=int, default=None,
                            help=f"max tokens per text (default: the model's max_seq_length, else {max_len}; "
                                 "either capped at the model's own limit, and a value above it refused)")
    else:
        parser.add_argument("--max-len", type=int, default=None,
                            help=f"max tokens per text (default: {max_len}, or the model's own limit when lower; "
                                 "a value above that limit is refused)")
    parser.add_argument("--batch-size", type=int, default=32, help="texts per forward pass")
    parser.add_argument("--whiten", action=argparse.BooleanOptionalAction, default=None,
                        help="PCA-whiten the pooled features (scikit-learn's PCA(whiten=True) rule), fitted on the "
                             "task's unlabelled train/first texts; default: on for this project's checkpoints and "
                             "exports (their features are anisotropic, see docs/results.md), off for any other model")


def embedder_options(args: argparse.Namespace, **chosen):
    """The ``EmbedderOptions`` (``evaluation/embedder.py``) of ``add_model_arguments``' flags, and ``chosen``: the
    encoder flags a tool has (``pooling=args.pooling``, ...), named, since a tool's own flag of the same name (the
    pooler's --pooling) may mean something else."""
    from megatron_crossbert.evaluation.embedder import EmbedderOptions

    return EmbedderOptions(model=args.model, cache_dir=cache_dir_arg(args.cache_dir), tokenizer_dir=args.tokenizer_dir,
                           device=args.device, verify=args.verify, **chosen)


def cache_dir_arg(value: str | None) -> str | None:
    """--cache-dir as the evaluation code wants it: 'none' disables caching, unset means the default dir."""
    from megatron_crossbert.evaluation.encoders import default_cache_dir

    if value and value.lower() == "none":
        return None
    return value or str(default_cache_dir())
