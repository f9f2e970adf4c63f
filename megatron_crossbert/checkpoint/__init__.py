"""Everything a checkpoint is on disk, verified once and loaded from that verification.

Training goes through one front door, ``manager.CheckpointManager`` (start, restore, save, finish); the
other modules are its guards and the readers' tools. Import the modules directly; this package file imports
nothing, so the directory helpers stay cheap:

- ``errors``: CheckpointError, UnsafeCheckpointError (the bottom: every module raises them);
- ``directories``: the checkpoint directories' names, 'latest' and its commit journal, completeness, the
  one resolution of a reference and the one ``run_config.json`` reader;
- ``safe_pickle``: restricted unpickling and ``checked_read`` around every dist_checkpointing load;
- ``tokenizer_record``: the tokenizer record of checkpoints; the tokenizer check of a start's checkpoint and
  datasets, in one pass;
- ``optimizer_format``: the distributed optimizer's on-disk format (``SavedOptimizer``: layout and Adam
  implementation, read once) and Adam-state repairs;
- ``pins``: readers pin the checkpoint they read, pruning skips a pinned one;
- ``verify``: ``VerifiedCheckpoint``, the one check of what a checkpoint is before anything is built, carrying
  what the load needs;
- ``start_guard``: where a run starts (resume, init_from, --overwrite) and what it must not destroy;
- ``resume_schedule``: what a resume does with changed schedules (``checkpoint.lr_schedule_on_resume``);
- ``state``: what a full training checkpoint holds (the sharded state dict, RNG, progress);
- ``save``: full and model-only saves, synchronous or in the background, per-run ``RunSaves``;
- ``fault_points``: the one seam through which tests make a save fail or stall (``CROSSBERT_TEST_*``);
- ``load``: the resume and the model-only load of a verified checkpoint;
- ``manager``: ``CheckpointManager``, the front door a training run starts, saves and finishes through.

Nothing here imports ``training``, ``convert``, ``evaluation`` or ``cli``: they sit above.
"""
