"""A pooler trained on a frozen backbone: the paper's MTEB "(frozen)" protocol.

- ``pairs.py``: training text pairs, from a JSONL file or cut as spans from the same document of a corpus
  (Contriever's independent cropping), never from a test set by default
- ``leaks.py``: the pairs checked against the test sets they will be scored on (refused on overlap)
- ``train.py``: the pooler (mean pooling + a linear map) trained with sentence-transformers'
  MultipleNegativesRankingLoss on cached pooled backbone features, saved as a sentence-transformers directory
- ``attention.py``: attention pooling (a learned query over cached token states) + the map, the same loss, saved
  as an ``AttentionPooling`` module
- ``runner.py``: the benchmark before and after, in one report (``crossbert-pooler``), scored by the ``Scorer`` it
  is given (MTEB's, ``mteb.adapter.benchmark_scorer``): nothing here imports ``mteb/``
"""
