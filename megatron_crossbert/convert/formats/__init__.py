"""The Hugging Face formats: one module per HF target, and the table that lists them.

- ``interface.py``: ``HfFormat``, what one format is, and what every format asks of the native model
- ``classic.py``: the classic encoder's table-driven mapping, shared by ``xlmr_xl.py`` (``XLMRobertaXLModel``,
  the default) and ``megatron_bert.py`` (``MegatronBertModel``)
- ``modernbert.py``: the modern encoder as ``ModernBertModel`` (config, tensors and the format)
- ``table.py``: ``FORMATS`` and the look-ups, handed on here (``convert.formats.get_format``, ...)
"""

from megatron_crossbert.convert.formats.table import (
    FORMATS, all_formats, default_format, format_for_hf_config, format_names, get_format,
)

__all__ = ["FORMATS", "all_formats", "default_format", "format_for_hf_config", "format_names", "get_format"]
