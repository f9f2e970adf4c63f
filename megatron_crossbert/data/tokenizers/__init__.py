"""Tokenizers: the one the project loads, trains, opens from other tools' flags, and fingerprints.

- ``tokenizer``: ``Tokenizer``, ``load_tokenizer`` and ``run_tokenizer`` (a run's ``data.tokenizer``, once per
  process), the special tokens;
- ``training``: ``train_tokenizer`` (unigram, BPE, WordPiece) from JSONL (``data/jsonl.py``);
- ``sources``: ``open_tokenizer``, a tokenizer from ours, HF's or Megatron-LM's ``--tokenizer-type`` flags;
- ``spm``: sentencepiece ``.model`` to ``tokenizers`` (what loading and training share);
- ``fingerprint``: which exact tokenizer made a dataset or a checkpoint (the ``<prefix>.tokenizer.json`` record).

Imports only ``data/jsonl.py`` of the data package. Import the modules directly; this face imports nothing, so
checkpoint code reads fingerprints without loading the ``tokenizers`` library.
"""
