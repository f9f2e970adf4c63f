"""What each stage of a study's work dir was made with, so a rerun with a changed plan never reports new
settings over old numbers.

Every stage skips what is on disk (a subset, a tokenizer, a finished run, a probe JSON), keyed by name only,
so before this record a plan with another vocabulary or probe train size rerun into a finished work dir redid
nothing, and its page showed the new settings beside the old numbers. ``<work>/stage_keys.json`` now holds, per
stage, what its outputs depend on: the data stage its corpus (by content) and the subset/tokenizer knobs; each
training run its full RunConfig; the probe stage its subsample sizes, tokens, k-NN and the task data (by content).
Every invocation compares every recorded key with the plan's before any stage runs, and a difference is one
``ValueError`` naming the file and the fields (nothing is redone or overwritten: another plan takes another
``--work-dir``); a stage records its key when it first runs. Knobs no output depends on (``probe_every``,
``preprocess_workers``, ``probe_device``) are in no key, and a plan that adds runs (more seeds) adds keys.
A work dir made before this record has no keys to compare: its first run records the plan it is given.
"""

from __future__ import annotations

import json
from pathlib import Path

from .plan import Plan, RunSpec, run_spec_config
from megatron_crossbert.config import RunConfig
from megatron_crossbert.content_identity import tree_identity
from megatron_crossbert.fsutil import atomic_write_text

KEYS_FILE = "stage_keys.json"
SHOWN = 3
"""Changed stages or fields a refusal lists (a plan change touches every run's key: the first few say what
changed)."""


def data_key(plan: Plan, corpus: str | Path) -> dict:
    """The corpus subset, the tokenizer and the indexed dataset: the corpus's content and the subset's knobs."""
    return {"corpus": tree_identity(corpus), "corpus_bytes": plan.corpus_bytes, "vocab_size": plan.vocab_size,
            "tokenizer_docs": plan.tokenizer_docs}


def train_key(plan: Plan, run: RunSpec) -> dict:
    """One run's checkpoints: everything ``crossbert-pretrain`` is given besides paths."""
    return json.loads(json.dumps(run_spec_config(plan, run).to_dict(), default=str))


def probe_key(plan: Plan, glue_dir: str, probe_dir: str, mteb_lite_dir: str | None) -> dict:
    """Every probe JSON: the probe settings and the tasks' data by content."""
    from megatron_crossbert.evaluation.tasks.glue import GLUE_FORMATS, canonical_glue_name

    glue = {name: tree_identity(Path(glue_dir) / GLUE_FORMATS[canonical_glue_name(name)].directory)
            for name in plan.glue_tasks}
    jsonl = {name: tree_identity(Path(probe_dir) / name) for name in plan.jsonl_tasks
             if (Path(probe_dir) / name).is_dir()}
    return {"probe_max_train": plan.probe_max_train, "probe_max_test": plan.probe_max_test,
            "probe_max_len": plan.probe_max_len, "probe_knn": plan.probe_knn, "glue": glue, "jsonl": jsonl,
            "mteb_lite": None if not mteb_lite_dir else tree_identity(mteb_lite_dir),
            "mteb_lite_max_test": plan.mteb_lite_max_test}


_ABSENT = "(absent)"


def _config_defaults() -> dict:
    """Every RunConfig field at its default, flattened (``model.hidden_size``)."""
    return _flat(json.loads(json.dumps(RunConfig().to_dict(), default=str)))


def key_differences(old: dict, new: dict, config: bool = False) -> list[str]:
    """The fields whose values differ, as ``field old -> new``. With ``config`` (a training key, a RunConfig as a
    dict) a field one side lacks reads as its default: a config field added to the code since the key was
    recorded, left at its default, changes nothing the run made, and a study's records outlive such changes."""
    old, new = _flat(old), _flat(new)
    defaults = _config_defaults() if config else {}
    found = []
    for name in sorted(set(old) | set(new)):
        before, after = old.get(name, defaults.get(name, _ABSENT)), new.get(name, defaults.get(name, _ABSENT))
        if before != after:
            found.append(f"{name} {before!r} -> {after!r}")
    return found


def _flat(key: dict, prefix: str = "") -> dict:
    """Nested key dicts as ``a.b`` fields, so a difference names the field that changed."""
    flat = {}
    for name, value in key.items():
        if isinstance(value, dict):
            flat.update(_flat(value, f"{prefix}{name}."))
        else:
            flat[f"{prefix}{name}"] = value
    return flat


def check_stage_keys(work_dir: Path, keys: dict[str, dict]) -> None:
    """ValueError naming the file and every changed field when a stage recorded another key than ``keys``'s."""
    path = work_dir / KEYS_FILE
    recorded = json.loads(path.read_text()) if path.is_file() else {}
    changed = []
    for stage, key in keys.items():
        found = key_differences(recorded[stage], key, stage.startswith("train:")) if stage in recorded else []
        if found:
            changed.append(f"{stage}: {'; '.join(found)}")
    if changed:
        shown = changed[:SHOWN] + ([f"{len(changed) - SHOWN} more stages"] if len(changed) > SHOWN else [])
        raise ValueError(f"{path}: this work dir's outputs were made with another plan or other data "
                         f"({' | '.join(shown)}); nothing was redone or overwritten: use another --work-dir "
                         "for the new plan, or the plan and data it was made with")


def record_stage_keys(work_dir: Path, keys: dict[str, dict]) -> None:
    """Add the keys of the stages about to run (existing ones were checked equal by ``check_stage_keys``)."""
    path = work_dir / KEYS_FILE
    recorded = json.loads(path.read_text()) if path.is_file() else {}
    if any(stage not in recorded for stage in keys):
        atomic_write_text(path, json.dumps({**recorded, **keys}, indent=1, sort_keys=True) + "\n")


def plan_keys(plan: Plan, runs: list[RunSpec], corpus: str | Path, glue_dir: str, probe_dir: str,
              mteb_lite_dir: str | None) -> dict[str, dict]:
    """Every stage's key under this plan: ``data``, ``train:<run>`` per run, ``probe``."""
    return {"data": data_key(plan, corpus), **{f"train:{run.name}": train_key(plan, run) for run in runs},
            "probe": probe_key(plan, glue_dir, probe_dir, mteb_lite_dir)}


def claim_work_dir(work_dir: Path, keys: dict[str, dict], stages: list[str]) -> None:
    """Before any stage runs: every recorded key checked against ``keys``, then the keys of ``stages`` (the
    stages about to run: ``data``, ``train``, ``probe``) recorded."""
    check_stage_keys(work_dir, keys)
    record_stage_keys(work_dir, {name: key for name, key in keys.items() if name.split(":")[0] in stages})
