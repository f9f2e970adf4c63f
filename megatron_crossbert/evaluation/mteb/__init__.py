"""MTEB through the ``mteb`` package itself, offline on local task folders or online.

- ``adapter.py``: mteb's encoder protocol over ``HFEncoder`` (feature cache, the model's recipe) and
  ``run_mteb``, what ``crossbert-mteb`` runs
- ``tasks.py``: mteb task objects (mteb's registered task when the data is the same, else a local one)
- ``report.py``: mteb's per-task result JSON and the summary; ``in_training.py``: ``probe_in_training``, MTEB-lite scores of
  the live model (``mteb:DIR`` probe specs)
"""
