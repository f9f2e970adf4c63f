"""Data pipeline: tokenizers, JSONL preprocessing to Megatron indexed datasets, packed CrossBERT/BERT datasets.

Import submodules directly (``megatron_crossbert.data.tokenizer``, ``.preprocess``, ``.dataset``); this
package file stays import-light so CLIs start fast. ``build_datasets`` is re-exported lazily.
"""


def build_datasets(*args, **kwargs):
    """See :func:`megatron_crossbert.data.build.build_datasets`."""
    from megatron_crossbert.data.build import build_datasets as _build

    return _build(*args, **kwargs)
