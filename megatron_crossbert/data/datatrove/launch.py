"""Where the tasks of a sharded preprocessing run execute: datatrove's local, SLURM-array or Ray executor.

One pipeline for all three (:func:`build_pipeline`): :class:`~megatron_crossbert.data.datatrove.step.CrossbertTokenize`,
optionally behind a datatrove reader. The executor only decides where task ``r`` of ``N`` runs; what it
writes (``<output_dir>/<r:05d>_*``) and that a finished task is skipped on a rerun do not depend on it.

* ``local``: ``parallel_tasks`` processes on this machine (``local.GuardedLocalExecutor``: datatrove's
  ``LocalPipelineExecutor`` whose tasks die with the launcher, and whose launcher fails on a dead task).
* ``slurm``: ``SlurmPipelineExecutor`` pickles the executor into ``<logging_dir>/executor.pik``, writes
  ``<logging_dir>/launch_script.slurm`` (an ``sbatch --array=0-<N-1>`` job whose tasks run
  ``launch_pickled_pipeline``) and submits it; the array's tasks must see the same paths (a shared filesystem).
* ``ray``: ``RayPipelineExecutor`` on the cluster ``ray.init(address)`` connects to (``None``: a local one).

Each task encodes with ``--workers`` threads; give SLURM/Ray ``cpus_per_task`` to match. Input files, the
tokenizer and the output folder are made absolute at launch (so the tokenizer record names the absolute path),
and so are the input files' sizes, from which every task cuts its share. Before anything runs, the run is
recorded in the output folder (``shard_run.start_run``): a rerun continues the same run, and one with other
tasks, inputs or encoding is refused (``force``: started over, the earlier run moved aside).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace

from megatron_crossbert.data.datatrove.shard_run import ENCODING_FLAGS, input_entries, run_record, start_run
from megatron_crossbert.data.datatrove.shards import run_totals
from megatron_crossbert.data.datatrove.step import CrossbertTokenize, check_pipeline
from megatron_crossbert.data.jsonl import BadInputError, expand_inputs
from megatron_crossbert.data.preprocessing.preprocess import PreprocessOptions

EXECUTORS = ("local", "slurm", "ray")
READERS = ("ours", "jsonl", "parquet")


@dataclass
class LaunchConfig:
    """How many tasks, where they run, and how their input is read."""

    output_dir: str
    """Where task ``r`` writes ``<r:05d>_<key>_document.bin/.idx`` (and its report)."""
    logging_dir: str
    """datatrove's logs, stats and completion markers (a rerun skips the tasks marked complete)."""
    executor: str = "local"
    tasks: int = 1
    parallel_tasks: int = -1
    """Tasks running at once (datatrove's ``workers``); -1: all of them."""
    reader: str = "ours"
    """ours: the single-node reader on local files (exact merge, full skip report); jsonl/parquet:
    datatrove's reader over ``--input`` as one folder or fsspec URL (s3://, hf://, ...)."""
    glob_pattern: str | None = None
    """datatrove readers: which files of the folder (e.g. ``*.jsonl.gz``)."""
    partition: str | None = None
    time: str = "24:00:00"
    cpus_per_task: int = 1
    mem_per_cpu_gb: float = 2
    job_name: str = "crossbert_preprocess"
    env_command: str | None = None
    """SLURM: the shell line that activates the environment in each array task (e.g. ``source .venv/bin/activate``)."""
    sbatch_args: dict = field(default_factory=dict)
    ray_address: str | None = None
    force: bool = False
    """Start over when the output folder holds an earlier run (moved aside, never deleted), instead of
    continuing the same run or refusing another one."""


def _check(cfg: LaunchConfig) -> None:
    if cfg.executor not in EXECUTORS:
        raise ValueError(f"--executor must be one of {', '.join(EXECUTORS)}, got {cfg.executor!r}")
    if cfg.reader not in READERS:
        raise ValueError(f"--reader must be one of {', '.join(READERS)}, got {cfg.reader!r}")
    if cfg.tasks < 1:
        raise ValueError(f"--tasks must be >= 1, got {cfg.tasks}")
    if cfg.executor == "slurm" and not cfg.partition:
        raise ValueError("--partition: the slurm executor needs a partition")


def _reader(cfg: LaunchConfig, opts: PreprocessOptions):
    """datatrove's reader over the one input folder/URL, text from the first JSON key."""
    if len(opts.inputs) != 1:
        raise ValueError(f"--input: --reader {cfg.reader} reads one folder or fsspec URL, got {len(opts.inputs)}")
    if cfg.reader == "jsonl":
        from datatrove.pipeline.readers import JsonlReader

        return JsonlReader(opts.inputs[0], glob_pattern=cfg.glob_pattern, text_key=opts.json_keys[0])
    from datatrove.pipeline.readers import ParquetReader

    return ParquetReader(opts.inputs[0], glob_pattern=cfg.glob_pattern, text_key=opts.json_keys[0])


def build_pipeline(cfg: LaunchConfig, opts: PreprocessOptions) -> list:
    """``[reader?, CrossbertTokenize]``; datatrove's own tokenizer steps are refused (``check_pipeline``)."""
    _check(cfg)
    sizes = None
    if cfg.reader == "ours":  # the file list and sizes are fixed once, here: every task cuts its shard from them
        opts = replace(opts, inputs=[os.path.abspath(p) for p in expand_inputs(opts.inputs)])
        sizes = [os.path.getsize(p) for p in opts.inputs]
    if os.path.exists(opts.tokenizer):  # tasks may start elsewhere (Ray workers, another node's directory)
        opts = replace(opts, tokenizer=os.path.abspath(opts.tokenizer))
    task = CrossbertTokenize(os.path.abspath(cfg.output_dir), opts, sizes)
    pipeline = ([] if cfg.reader == "ours" else [_reader(cfg, opts)]) + [task]
    check_pipeline(pipeline)
    return pipeline


def make_executor(cfg: LaunchConfig, pipeline: list):
    """The datatrove executor for ``cfg.executor`` (nothing runs until its ``run()``)."""
    common = dict(pipeline=pipeline, tasks=cfg.tasks, workers=cfg.parallel_tasks, logging_dir=cfg.logging_dir)
    if cfg.executor == "local":
        from megatron_crossbert.data.datatrove.local import GuardedLocalExecutor

        return GuardedLocalExecutor(**common)
    if cfg.executor == "slurm":
        from datatrove.executor import SlurmPipelineExecutor

        return SlurmPipelineExecutor(**common, time=cfg.time, partition=cfg.partition, cpus_per_task=cfg.cpus_per_task,
                                     mem_per_cpu_gb=cfg.mem_per_cpu_gb, job_name=cfg.job_name,
                                     env_command=cfg.env_command, sbatch_args=dict(cfg.sbatch_args))
    from datatrove.executor import RayPipelineExecutor

    return RayPipelineExecutor(**common, cpus_per_task=cfg.cpus_per_task, mem_per_cpu_gb=cfg.mem_per_cpu_gb)


def launch_record(cfg: LaunchConfig, pipeline: list) -> dict:
    """The run's record (``shard_run``): task count, reader, encoding options and inputs as the tasks see them."""
    task = pipeline[-1]
    inputs = input_entries(task.options.inputs, task.input_sizes, cfg.glob_pattern, [cfg.output_dir, cfg.logging_dir])
    return run_record(cfg.tasks, cfg.reader, {key: getattr(task.options, key) for key in ENCODING_FLAGS}, inputs)


def launch(cfg: LaunchConfig, opts: PreprocessOptions):
    """Build the pipeline, record the run in the output folder (or refuse a rerun of another run), and run it on
    the configured executor (Ray: connected first; SLURM: submitted, ``job_id`` set, -1 when every task had
    completed); returns the executor."""
    pipeline = build_pipeline(cfg, opts)
    start_run(cfg.output_dir, cfg.logging_dir, launch_record(cfg, pipeline), cfg.force)
    executor = make_executor(cfg, pipeline)
    if cfg.executor == "ray":
        import ray

        if not ray.is_initialized():
            ray.init(address=cfg.ray_address)
    executor.run()
    if cfg.executor != "slurm":  # run here: every document skipped fails, as one crossbert-preprocess run does
        _check_written(cfg)
    return executor


def _check_written(cfg: LaunchConfig) -> None:
    totals = run_totals(cfg.output_dir, cfg.tasks)
    if totals["reports"] == cfg.tasks and not totals["documents_written"]:
        skips = ", ".join(f"{kind}={n} (first at {totals['first_skip_location'][kind]})"
                          for kind, n in sorted(totals["skipped_by_kind"].items()))
        raise BadInputError(f"{cfg.output_dir}: no documents written by the run's {cfg.tasks} task(s); "
                            f"{totals['documents_read']} read, all skipped" + (f": {skips}" if skips else ""))
