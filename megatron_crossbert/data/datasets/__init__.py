"""The packed CrossBERT/BERT pretraining datasets on ``megatron.core.datasets``.

- ``build``: ``build_datasets(run_cfg)``, what training calls for train/valid/test;
- ``dataset``: ``CrossBertDataset`` and ``BertDataset``, packed samples and their masks;
- ``packing``: the packed sample layout (``[CLS]``, documents joined by ``[SEP]``) and its document ids;
- ``wrappers``: documents that already carry ``[CLS]``/``[SEP]`` (Megatron-LM's), stripped before packing;
- ``static_masks``: precomputed mask pairs: written by ``crossbert-preprocess --emit-mask-pairs``, read as a
  dataset.

Imports ``tokenizers`` and ``indexed``. Import the modules directly; this face imports nothing.
"""
