"""Console entry points: thin argparse front ends over importable functions, one module per console script
(also ``python -m megatron_crossbert.cli.<name>``).

What they share: ``arguments.py`` (the help formatter, quiet library warnings, the model / encoder / verify
flags), ``errors.py`` (one ``error:`` line per user error, exit 2; ``--debug`` for the traceback) and
``config_flags.py`` (shorthand flags typed by the ``RunConfig`` field they set). This face defines nothing: it
re-exports the shared names the scripts import from the package.
"""

from megatron_crossbert.cli.arguments import (
    DefaultsHelpFormatter, add_encoder_arguments, add_model_arguments, add_verify_flag, cache_dir_arg,
    embedder_options, quiet_library_warnings,
)

__all__ = ["DefaultsHelpFormatter", "add_encoder_arguments", "add_model_arguments", "add_verify_flag",
           "cache_dir_arg", "embedder_options", "quiet_library_warnings"]
