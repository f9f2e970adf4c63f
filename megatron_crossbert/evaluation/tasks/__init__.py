"""Task data every evaluation shares: frozen probes (``probing/``), fine-tuning (``finetune/``), MTEB
(``mteb/``) and the pooler (``pooler/``) read their tasks, gold labels and metrics from here, as peers.

- ``data.py``: the task data model (``ProbeTask``, ``Split``, ``TaskSpec``) and the JSONL / HF ``datasets`` loaders
- ``glue.py``: the original GLUE TSVs (``glue_data`` layout), each task's format and classes
- ``folders.py``: a benchmark directory's task folders (STS, classification), read into MTEB's columns
- ``gold.py``: what a usable gold column is (every reader calls it: no NaN reaches a metric)
- ``metrics.py``: GLUE metrics, a task's score and the averages
"""
