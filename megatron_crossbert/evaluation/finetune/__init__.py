"""Fine-tuned GLUE: the peers' protocols on our exports (what ``crossbert-finetune`` runs).

- ``presets.py``: Cramming's single setting and ModernBERT's per-task sweep, with their sources
- ``loop.py``: one (task, lr, seed) run, a plain torch loop that agrees bit for bit with a plain
  ``transformers`` script and with ``transformers.Trainer``
- ``runner.py``: the grid with resume (one file per finished run); ``report.py``: median of seeds at the best
  lr, ``results.json`` and the markdown table
Readers and metrics are the shared task data's (``evaluation/tasks/``); models resolve through
``encoders.resolve_model`` (native checkpoints are verified and exported first).
"""
