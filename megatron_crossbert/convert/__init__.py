"""Hugging Face conversion: native dist checkpoints <-> ``MegatronBert`` directories.

- ``export_to_hf(checkpoint, out_dir)``: encoder (+ BERT MLM head) as safetensors, config.json,
  tokenizer, sentence-transformers modules and a model card.
- ``import_from_hf(hf_dir, out_root)``: a model-only checkpoint for ``CheckpointConfig.init_from``.
- ``adapter.megatron_to_hf`` / ``adapter.hf_to_megatron``: the pure state-dict mapping.
The heavy modules (megatron, transformers) load on first use, so importing this package is cheap.
"""

from __future__ import annotations

from megatron_crossbert.convert.errors import ConversionError


def export_to_hf(checkpoint, out_dir, *, tokenizer_dir=None, force=False):
    """See :func:`megatron_crossbert.convert.export.export_to_hf`."""
    from megatron_crossbert.convert.export import export_to_hf as _export

    return _export(checkpoint, out_dir, tokenizer_dir=tokenizer_dir, force=force)


def import_from_hf(hf_dir, out_root, *, force=False):
    """See :func:`megatron_crossbert.convert.importer.import_from_hf`."""
    from megatron_crossbert.convert.importer import import_from_hf as _import

    return _import(hf_dir, out_root, force=force)


__all__ = ["ConversionError", "export_to_hf", "import_from_hf"]
