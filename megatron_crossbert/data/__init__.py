"""Data pipeline: tokenizers, JSONL preprocessing to Megatron indexed datasets, packed CrossBERT/BERT datasets.

Import submodules directly (``megatron_crossbert.data.tokenizer``, ``.preprocess``, ``.build``); this
package file stays empty so CLIs start fast.
"""
