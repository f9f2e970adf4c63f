"""Frozen probes: features, the linear and k-NN probes, their runs and reports (task data: ``evaluation/tasks/``).

- ``linear_probes.py``: logistic / ridge probes with CV on the train split; ``knn_probes.py``: cosine k-NN
- ``features.py``: a task's probe inputs through the shared feature cache
- ``runner.py``: ``run_probing(model_ref, tasks, config)``, what ``crossbert-probe`` and the study run
- ``in_training.py``: ``probe_in_training``, the same probes on the live model's ``encode`` (no cache);
  ``report.py``: JSON, markdown and the per-layer plot
"""
