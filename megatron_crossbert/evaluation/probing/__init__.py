"""Frozen linear probes: task data, features, the probes, their runs and reports.

- ``tasks.py``: the ``ProbeTask`` data model and the JSONL / HF ``datasets`` loaders; ``glue.py``: GLUE TSVs
- ``linear_probes.py``: logistic / ridge probes with CV on the train split; ``metrics.py``: GLUE metrics
- ``features.py``: a task's probe inputs through the shared feature cache
- ``runner.py``: ``run_probing(model_ref, tasks, config)``, what ``crossbert-probe`` and the study run
- ``in_training.py``: the same probes on the live model's ``encode`` (no cache); ``report.py``: JSON,
  markdown and the per-layer plot
"""
