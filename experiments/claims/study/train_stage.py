"""Stage 2: pretrain every run of the plan with ``crossbert-pretrain``, keeping all checkpoints.

Several trainers of one study split its runs: each takes a run's lock file first (``claims_lock``) and skips
a run another live trainer holds.

Each run's full RunConfig is written as YAML next to its checkpoints and passed with ``--config``,
so the exact configuration is on disk and in the command log. A run whose ``latest`` checkpoint
already reached its step count is skipped; an interrupted run resumes from its own checkpoints
(``crossbert-pretrain`` resumes from ``--save``), so the stage can be re-entered at any point.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from .commands import module_argv, read_command_log, run_logged
from .plan import Plan, RunSpec, run_spec_config
from .claims_lock import claim, release
from .records import sealed_record, sealed_steps
from megatron_crossbert.checkpoint.directories import ITER_PREFIX, RUN_CONFIG_FILE, latest_iteration


def run_dir(work_dir: Path, run: RunSpec) -> Path:
    return work_dir / "runs" / run.name


def resolved_config(plan: Plan, run: RunSpec, work_dir: Path, data_prefix: str, tokenizer: str,
                    vocab_size: int) -> dict:
    """The run's RunConfig as a dict: plan shape plus data, tokenizer and checkpoint settings."""
    raw = run_spec_config(plan, run).to_dict()
    raw["model"]["vocab_size"] = vocab_size
    raw["data"].update(data_path=[data_prefix], tokenizer=tokenizer)
    raw["checkpoint"].update(save_dir=str(run_dir(work_dir, run)), save_interval=run.save_interval, keep_last=0)
    if raw["training"]["eval_interval"]:  # held-out loss at every checkpoint, the 1-step reference's included
        raw["training"]["eval_interval"] = run.save_interval
    return raw


def is_complete(work_dir: Path, run: RunSpec) -> bool:
    """Trained to its steps here, or restored from the study's records (``records.SEAL_FILE``) sealed at its end
    (a record sealed part-way leaves the rest to train)."""
    done, record = latest_iteration(run_dir(work_dir, run)), sealed_record(run_dir(work_dir, run))
    return ((done is not None and done >= run.train_steps)
            or (record is not None and sealed_steps(record, run.train_steps) >= run.train_steps))


def log_name(run: RunSpec) -> str:
    """The run's training log (``logs/<name>.log``), which names its commands in ``commands.jsonl``."""
    return f"train-{run.name}"


def run_commands(work_dir: Path, run: RunSpec) -> list[dict]:
    """The ``commands.jsonl`` entries that trained ``run`` here (a resumed run has several)."""
    return [entry for entry in read_command_log(work_dir) if Path(entry.get("log", "")).stem == log_name(run)]


def finished_runs(work_dir: Path, runs: list[RunSpec]) -> list[RunSpec]:
    """The runs trained to their steps (or restored sealed): the page's tables read these alone, so a seed still
    training is never averaged with finished ones as if it were final (its curve is on the figures)."""
    return [run for run in runs if is_complete(work_dir, run)]


def train_run(plan: Plan, run: RunSpec, work_dir: Path, data_prefix: str, tokenizer: str, vocab_size: int,
              exit_at: int | None = None) -> None:
    """Write the run's YAML and call crossbert-pretrain (resumes by itself if checkpoints exist); ``exit_at``: stop
    with a checkpoint after that step (``--exit-at-iteration``), the schedule still the run's whole one."""
    out = run_dir(work_dir, run)
    out.mkdir(parents=True, exist_ok=True)
    config_path = work_dir / "runs" / f"{run.name}.yaml"
    config_path.write_text(yaml.safe_dump(resolved_config(plan, run, work_dir, data_prefix, tokenizer, vocab_size)))
    stop = [] if exit_at is None else ["--exit-at-iteration", str(exit_at)]
    run_logged(module_argv("megatron_crossbert.cli.pretrain", "--config", str(config_path), *stop), work_dir,
               log_name(run))


def run_train_stage(plan: Plan, runs: list[RunSpec], work_dir: Path, data_prefix: str, tokenizer: str,
                    exit_at: int | None = None) -> None:
    from megatron_crossbert.data.tokenizers.tokenizer import load_tokenizer

    vocab_size = load_tokenizer(tokenizer).vocab_size
    for run in runs:
        lock = work_dir / "runs" / f"{run.name}.lock"
        if is_complete(work_dir, run) or not claim(lock):  # another trainer of this study has it
            continue
        try:
            print(f"[study] training {run.name} ({run.train_steps} steps)", flush=True)
            train_run(plan, run, work_dir, data_prefix, tokenizer, vocab_size, exit_at)
        finally:
            release(lock)


def checkpoints(work_dir: Path, run: RunSpec) -> list[tuple[int, Path]]:
    """(iteration, directory) of every complete checkpoint of ``run``, ascending."""
    root = run_dir(work_dir, run)
    found = []
    for path in sorted(root.glob(f"{ITER_PREFIX}*")):
        if (path / RUN_CONFIG_FILE).is_file() and path.name[len(ITER_PREFIX):].isdigit():
            found.append((int(path.name[len(ITER_PREFIX):]), path))
    return found


VALID_LOSS_TAG = "valid/loss"
"""The TensorBoard scalar ``crossbert-pretrain`` writes at every ``training.eval_interval`` (held-out MLM or
reconstruction loss on the split's validation documents)."""


def valid_losses(work_dir: Path, run: RunSpec) -> dict[int, float]:
    """{iteration: held-out loss} from the run's TensorBoard events (a resumed run's last value per step), or
    from its restored record when the run was trained in an earlier work dir."""
    folder = run_dir(work_dir, run) / "tensorboard"
    if not folder.is_dir():
        record = sealed_record(run_dir(work_dir, run))
        return {} if record is None else {int(step): float(loss) for step, loss in record["losses"].items()}
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    events.Reload()
    if VALID_LOSS_TAG not in events.Tags().get("scalars", []):
        return {}
    return {int(event.step): float(event.value) for event in events.Scalars(VALID_LOSS_TAG)}
