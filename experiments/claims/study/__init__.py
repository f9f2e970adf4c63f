"""Equal-budget pretraining studies: plan types, and the stages that run the shipped CLIs.

A study trains several models through ``crossbert-pretrain`` (one process per run, exact commands
logged), then frozen-probes their checkpoints. ``plan`` holds the types (``Plan``, ``ModelShape``,
``RunSpec``, the compared ``ARMS``) and the FLOPs arithmetic; ``data_stage``, ``train_stage``
and ``probe_stage`` run the stages, each skipping what is already on disk; ``stats`` holds the intervals and
verdicts. The claims study (``python -m experiments.claims``) is their one user: the device check runs that
command with a time budget rather than importing these stages. ``experiments/claims/plans/`` holds the named
plans (YAML of ``Plan`` fields).
"""
