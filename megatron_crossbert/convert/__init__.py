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
(config.json helpers). The heavy modules (megatron, transformers) load on first use, so importing this
package is cheap.
"""

from __future__ import annotations

from megatron_crossbert.convert.errors import ConversionError


def export_to_hf(checkpoint, out_dir, *, tokenizer_dir=None, force=False, format_name=None, verify="full"):
    """See :func:`megatron_crossbert.convert.export.export_to_hf`."""
    from megatron_crossbert.convert.export import export_to_hf as _export

    return _export(checkpoint, out_dir, tokenizer_dir=tokenizer_dir, force=force, format_name=format_name,
                   verify=verify)


def import_from_hf(hf_dir, out_root, *, force=False):
    """See :func:`megatron_crossbert.convert.importer.import_from_hf`."""
    from megatron_crossbert.convert.importer import import_from_hf as _import

    return _import(hf_dir, out_root, force=force)


__all__ = ["ConversionError", "export_to_hf", "import_from_hf"]
