"""The ``.bin/.idx`` indexed-dataset format (Megatron's), with one owner: written and read here.

- ``writer``: the format in numpy only (layout, header, ``IndexedWriter`` and ``AtomicIndexedWriter``), so
  preprocessing never imports torch; byte for byte megatron-core's ``IndexedDatasetBuilder``;
- ``reader``: megatron-core's ``IndexedDataset`` opened with the checks it lacks (``open_indexed``), document
  reads, and a blend file's shards read as one dataset;
- ``merge``: many pairs into one (``crossbert-merge``), checked for dtype, vocabulary and tokenizer record;
- ``blend_file``: many pairs read as the one their merge would be, without merging.

Imports ``tokenizers.fingerprint`` (the record beside each pair). Import the modules directly; this face
imports nothing, so importing the writer never loads megatron-core or torch.
"""
