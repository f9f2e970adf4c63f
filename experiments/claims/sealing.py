"""The claims study's side of its records (``study/records.py``): which runs to seal, and what a restored run
brings back into a work dir.

A run is sealed when it was trained to its steps in this work dir and none of the checkpoints the plan reads
is left unprobed; its record carries the run's ``train-<name>`` commands and the CPU seconds of its train and
probe stages, which a restore puts back into ``commands.jsonl`` and ``status.json`` so the page's cost lines
count the runs of earlier sessions too.
"""

from __future__ import annotations

import json
from pathlib import Path

from .plan import CPU_KEY
from .study import records as rec
from .study.commands import command_log_path, read_command_log
from .study.data_stage import data_prefix, tokenizer_dir
from .study.plan import Plan, RunSpec
from .study.probe_stage import pending
from .study.train_stage import run_commands, run_dir
from megatron_crossbert.checkpoint.directories import latest_iteration

STAGES = ("train", "probe")
"""The per-run stages whose CPU seconds a record keeps."""


def shared_keys(keys: dict, work: Path) -> dict:
    """What every record depends on besides its own run: the data and probe keys, the rebuilt data's identity."""
    return {"data": keys["data"], "probe": keys["probe"], **rec.data_identity(tokenizer_dir(work), data_prefix(work))}


def restore_runs(records: Path, runs: list[RunSpec], work: Path, keys: dict, status: dict) -> dict:
    """Seed ``work`` with every sealed run of ``runs`` (after the data stage: the data identity is checked);
    returns the ``status.json`` entries to add (restored CPU seconds, where this work dir has none)."""
    rec.check_keys(records, shared_keys(keys, work))
    logged = {entry.get("finished_utc") for entry in read_command_log(work)}
    added: dict = {}
    for run in runs:
        record = rec.restore(records, run.name, keys[f"train:{run.name}"], run_dir(work, run),
                             work / "probes" / run.name)
        if record is None:
            continue
        with command_log_path(work).open("a") as handle:
            for entry in record.get("commands", []):
                if entry.get("finished_utc") not in logged:
                    handle.write(json.dumps(entry) + "\n")
        for stage, seconds in record.get(rec.CPU_FIELD, {}).items():
            key = f"{CPU_KEY}{stage}:{run.name}"
            if key not in status:
                added[key] = seconds
        print(f"[study] {run.name}: restored from {records} (sealed {record.get('sealed_utc')})", flush=True)
    return added


def ready_to_seal(plan: Plan, run: RunSpec, work: Path, records: Path) -> bool:
    """Trained here to its steps, every checkpoint the plan reads probed, and not sealed yet."""
    done = latest_iteration(run_dir(work, run))
    return (not rec.is_sealed(records, run.name) and done is not None and done >= run.train_steps
            and not pending(plan, [run], work))


def seal_finished(plan: Plan, runs: list[RunSpec], work: Path, records: Path, keys: dict, status: dict) -> list[str]:
    """Seal every run that is ready; returns their names."""
    from .study.train_stage import valid_losses

    sealed = []
    for run in runs:
        if not ready_to_seal(plan, run, work, records):
            continue
        commands = run_commands(work, run)
        cpu = {stage: status[f"{CPU_KEY}{stage}:{run.name}"] for stage in STAGES
               if f"{CPU_KEY}{stage}:{run.name}" in status}
        probes = sorted((work / "probes" / run.name).glob("iter_*.json"))
        path = rec.seal(records, run.name, keys[f"train:{run.name}"], valid_losses(work, run), probes, commands, cpu)
        print(f"[study] {run.name}: sealed in {path}", flush=True)
        sealed.append(run.name)
    return sealed
