"""The one exception type of the HF conversion package.

Everything a user can get wrong (missing checkpoint, a config with no exact Hugging Face target,
a tokenizer that does not fit, an existing output directory) surfaces as ``ConversionError`` with a
message that names the offending file or field, so the CLI can print it without a traceback.
"""

from __future__ import annotations


class ConversionError(RuntimeError):
    """A checkpoint, config, tokenizer or output path cannot be converted; the message says why."""
