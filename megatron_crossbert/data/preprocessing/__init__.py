"""``crossbert-preprocess``: JSONL corpora to ``.bin/.idx`` pairs on one machine, without torch.

- ``preprocess``: ``preprocess(PreprocessOptions)``, the run: chunks in flight, skip report, atomic outputs;
- ``worker``: a chunk's work: parse, validate, split and encode lines;
- ``encoding``: the encoding backends (gigatoken where it gives the same ids, HF ``tokenizers`` otherwise);
- ``pieces``: very long documents encoded in pieces that give the same ids;
- ``sentences``: sentence splitting (nltk Punkt) for ``--split-sentences``.

Imports ``data/jsonl.py``, ``tokenizers``, ``indexed.writer``, and ``datasets.static_masks`` for
``--emit-mask-pairs`` only. Import the modules directly; this face imports nothing.
"""
