"""Hugging Face conversion: native dist checkpoints <-> HF directories in a registered format.

- ``export_to_hf(checkpoint, out_dir, format_name=None)``: encoder (+ encoder MLM head) as safetensors,
  config.json, tokenizer, sentence-transformers modules and a model card; the format defaults to the
  fastest exact one (``xlmr-xl`` = ``XLMRobertaXLModel`` for the classic encoder).
- ``import_from_hf(hf_dir, out_root)``: a model-only checkpoint for ``CheckpointConfig.init_from``.
- ``formats/``: one module per HF format and the table of them (``get_format(name).to_hf`` / ``.from_hf`` =
  the pure mapping); ``formats/interface.py``: what one format is.
The shared machinery, named for what it does: ``export.py`` and ``importer.py`` (the two drivers),
``native.py`` (our side: build, load, save at TP=1), ``artifacts.py`` (tokenizer, sentence-transformers
files, weights files, staging), ``model_card.py``, ``keymap.py`` (native key names), ``megatron_tensors.py``
(head-interleaved QKV, TP shards), ``strict_mapping.py`` (strict state-dict access), ``hf_config.py``
(config.json helpers). This face defines nothing: it re-exports the two drivers and the error.
"""

from megatron_crossbert.convert.errors import ConversionError
from megatron_crossbert.convert.export import export_to_hf
from megatron_crossbert.convert.importer import import_from_hf

__all__ = ["ConversionError", "export_to_hf", "import_from_hf"]
