"""A pooler trained on a frozen backbone: the paper's MTEB "(frozen)" protocol.

- ``pairs.py``: training text pairs, from a JSONL file or cut as spans from the same document of a corpus
  (Contriever's independent cropping), never from a test set by default
- ``leaks.py``: the pairs checked against the test sets they will be scored on (refused on overlap)
- ``train.py``: the pooler (mean pooling + a linear map, or attention pooling) trained with
  sentence-transformers' MultipleNegativesRankingLoss on cached backbone states, saved as a
  sentence-transformers directory
- ``runner.py``: MTEB before and after, in one report (``crossbert-pooler``)
"""
