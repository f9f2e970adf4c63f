"""Data pipeline: tokenizers, JSONL preprocessing to Megatron indexed datasets, packed CrossBERT/BERT datasets.

One subpackage per job, each importing only the ones listed before it (README.md maps the modules):

- ``jsonl.py``: reading JSON-lines corpora, shared by tokenizer training and preprocessing;
- ``tokenizers/``: the project's tokenizer, its training, its sources and its fingerprint;
- ``indexed/``: the ``.bin/.idx`` format: a numpy-only writer and megatron-core's reader side by side,
  merges and blend files;
- ``datasets/``: the packed CrossBERT/BERT datasets training builds (and the static mask files);
- ``preprocessing/``: ``crossbert-preprocess``, JSONL to ``.bin/.idx`` on one machine;
- ``datatrove/``: the same preprocessing as datatrove tasks, its shards and run record.

Import the modules directly (``megatron_crossbert.data.tokenizers.tokenizer``,
``.preprocessing.preprocess``, ``.datasets.build``); the package files import nothing, so CLIs start fast and
preprocessing never loads torch.
"""
