"""Preprocessing beyond one machine: ``crossbert-preprocess`` as datatrove tasks (local, SLURM or Ray).

- ``launch``: the pipeline and its executor (``crossbert-preprocess-datatrove``);
- ``step``: ``CrossbertTokenize``, one ``preprocess()`` run per task, as a datatrove ``PipelineStep``;
- ``local``: the local executor, whose tasks die with their launcher;
- ``shards``: which files a task reads, what it writes, which outputs are sealed, what a merge of a folder reads;
- ``shard_run``: the run's record, so a rerun continues the same run or is refused.

Imports ``preprocessing`` and ``data/jsonl.py``. Import the modules directly; this face imports nothing.
"""
