"""The grid (task x lr x seed) with resume: what ``crossbert-finetune`` runs.

Resume: each finished run is one JSON file, ``<out>/runs/<task>/lr=<lr>/seed=<seed>.json``, written
atomically and holding its key: its :class:`RunSpec` (the preset with its overrides), the model's identity
and the task's data, both by content (``content_identity``: the model's files and the task's train and dev
files, never their paths). A rerun skips a run whose file holds the same key, so the same model or data
copied elsewhere resumes, and refuses (``ValueError`` naming the file and what differs) a folder whose file
holds another key (another model, other data, other settings), so numbers from two set-ups are never mixed
and nothing this run did not write is overwritten. A killed run leaves no file and is redone from its start
(runs are minutes, not hours). ``--out`` is checked before anything trains, and a failed write (a full disk)
names the file.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Sequence


from megatron_crossbert.content_identity import file_identity
from megatron_crossbert.evaluation.embedder import Embedder, EmbedderOptions, write_embedder_json
from megatron_crossbert.evaluation.tasks.glue import (GLUE_FORMATS, GLUE_TASK_NAMES, available_glue_tasks,
                                                         canonical_glue_name, glue_files, glue_task_available,
                                                         load_glue_task)
from megatron_crossbert.fsutil import atomic_write_text
from megatron_crossbert.outputs import require_output_dir, writing
from megatron_crossbert.progress import progress_bar

from .loop import RunSpec, run_one
from .presets import Preset
from .report import build_report, render_markdown

logger = logging.getLogger(__name__)
FORMAT_VERSION = 2
"""Bumped when a run file's meaning changes, so old files are refused rather than mixed in."""


@dataclass
class FinetuneConfig:
    """Everything that shapes a fine-tuning run besides the model, the data and the output folder."""

    preset: Preset
    """The protocol (with any command-line overrides applied)."""
    max_train: int | None = None
    """Seeded subsample of each train split (smoke runs)."""
    max_dev: int | None = None
    """Seeded subsample of each dev split (numbers then marked not comparable)."""
    device: str | None = None
    """torch device; None: cuda if available, else cpu."""
    cache_dir: str | None = None
    """Export cache for native checkpoints; None: the default cache."""
    tokenizer_dir: str | None = None
    """Native checkpoints: the tokenizer to export with (default: the run config's)."""
    verify: str = "full"
    """Native checkpoints: the checksum check (full or off)."""
    progress: bool = True
    """One progress bar per task (``progress.progress_bar``)."""

    def __post_init__(self) -> None:
        """Checked here, so a Python caller of ``run_finetune`` gets the same one-line refusal as the CLI."""
        for name in ("max_train", "max_dev"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"--{name.replace('_', '-')} (FinetuneConfig.{name}): must be at least 1, got {value}")


def resolve_tasks(glue_dir: str | Path, names: Sequence[str] | None) -> tuple[list[str], list[str]]:
    """(tasks to run, tasks left out with the reason). Named tasks must be fine-tunable, or ValueError
    in one line; without names, every task with train and dev files runs and dev-only ones are listed."""
    glue_dir = Path(glue_dir)
    if not glue_dir.is_dir():
        raise FileNotFoundError(f"{glue_dir}: no such GLUE folder (--glue-dir)")
    dev_only = [name for name in GLUE_TASK_NAMES if not glue_task_available(glue_dir, name)
                and (glue_dir / GLUE_FORMATS[name].directory / GLUE_FORMATS[name].test_file).is_file()]
    if not names:
        run = available_glue_tasks(glue_dir)
        if not run:
            raise FileNotFoundError(f"{glue_dir}: no GLUE task has both train.tsv and dev.tsv")
        return run, [f"{name}: dev set only (no train.tsv), cannot be fine-tuned" for name in dev_only]
    run = []
    for name in names:
        try:
            name = canonical_glue_name(name)
        except KeyError:
            raise ValueError(f"--tasks: unknown GLUE task {name!r}; known: {', '.join(GLUE_TASK_NAMES)}") from None
        fmt = GLUE_FORMATS[name]
        train = glue_dir / fmt.directory / fmt.train_file
        if name in dev_only:
            raise FileNotFoundError(f"{train}: missing; {name} has a dev set only here, so it cannot be fine-tuned "
                                    f"(tasks with train and dev: {', '.join(available_glue_tasks(glue_dir))})")
        if not glue_task_available(glue_dir, name):
            raise FileNotFoundError(f"{glue_dir / fmt.directory}: {name} needs {fmt.train_file} and {fmt.test_file}")
        run.append(name)
    return run, []


def run_spec(preset: Preset, task: str, lr: float, seed: int, config: FinetuneConfig) -> RunSpec:
    """The one run of ``task`` at ``lr`` and ``seed`` under ``preset``."""
    return RunSpec(task=task, lr=lr, seed=seed, epochs=preset.epochs_for(task), batch_size=preset.batch_size_for(task),
                   max_len=preset.max_len, schedule=preset.schedule, warmup_ratio=preset.warmup_ratio,
                   betas=tuple(preset.betas), eps=preset.eps, weight_decay=preset.torch_weight_decay(task, lr),
                   decay_all_params=preset.decoupled_weight_decay, grad_clip=preset.grad_clip,
                   max_train=config.max_train, max_dev=config.max_dev)


def run_path(out: Path, spec: RunSpec) -> Path:
    return out / "runs" / spec.task / f"lr={spec.lr:g}" / f"seed={spec.seed}.json"


def data_key(glue_dir: str | Path, name: str) -> dict:
    """The task's data by content: its train and dev files' digests (a copy of the folder is the same data)."""
    train, dev = glue_files(glue_dir, name)
    return {"train": file_identity(train), "dev": file_identity(dev)}


def run_key(spec: RunSpec, identity: str, data: dict) -> dict:
    """What a finished run file must hold to be reused: format, model identity, data identity and the full spec."""
    return {"format": FORMAT_VERSION, "model": identity, "data": data, "spec": json.loads(json.dumps(asdict(spec)))}


def load_finished(path: Path, key: dict) -> dict | None:
    """The stored run if it finished with this key; None if absent; ValueError naming what differs if it is
    another set-up's."""
    if not path.is_file():
        return None
    stored = json.loads(path.read_text())
    old = stored.get("key") if isinstance(stored.get("key"), dict) else {}
    if old != key:
        what = {"format": "an older file format", "model": "another model", "data": "other data (train/dev files)",
                "spec": "other settings"}
        differs = ", ".join(what[part] for part in what if old.get(part) != key[part])
        raise ValueError(f"{path}: holds a run of {differs}; use another --out (or delete that run folder "
                         "yourself to redo it)")
    return stored


def save_run(path: Path, record: dict) -> None:
    """Write one finished run atomically; a failure (a full disk) names the file."""
    with writing(path, "a finished fine-tuning run"):
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(record, indent=1) + "\n")


def run_task(name: str, resolved, tokenizer, glue_dir: str | Path, out: Path, config: FinetuneConfig) -> dict:
    """Every (lr, seed) of one task, skipping finished ones; returns {"runs": [...], "resumed": n}."""
    preset, task, data = config.preset, load_glue_task(glue_dir, name), data_key(glue_dir, name)
    specs = [run_spec(preset, name, lr, seed, config) for lr in preset.lrs for seed in preset.seeds_for(name)]
    stored = [load_finished(run_path(out, spec), run_key(spec, resolved.identity, data)) for spec in specs]
    todo = [spec for spec, done in zip(specs, stored) if done is None]
    finished = [done for done in stored if done is not None]
    n_train = len(task.train) if config.max_train is None else min(config.max_train, len(task.train))
    total = sum(-(-n_train // spec.batch_size) * spec.epochs for spec in todo)
    with progress_bar(total=total, desc=f"{name} ({len(finished)}/{len(specs)} runs done)", unit="step",
              disable=not config.progress) as bar:
        for spec in todo:
            bar.set_postfix(lr=f"{spec.lr:g}", seed=spec.seed)
            result = run_one(resolved.hf_path, task, spec, tokenizer=tokenizer, device=config.device, progress=bar)
            record = {"key": run_key(spec, resolved.identity, data), "result": result.to_json()}
            save_run(run_path(out, spec), record)
            finished.append(record)
    return {"runs": finished, "resumed": len(specs) - len(todo)}


def fit_preset_length(preset: Preset, hf_path: str) -> Preset:
    """The preset's max length within the model's own limit (``recipe.model_token_limit``: its position table or
    its tokenizer's ``model_max_length``), the rule the probes follow: a preset's value above it is capped, logged
    and reported as an override (``<preset>+overrides``, ``max_len=N``), since a longer input would index past the
    position embeddings mid-run; a ``--max-len`` above it is refused in one line."""
    from megatron_crossbert.evaluation.recipe import model_token_limit

    limit = model_token_limit(hf_path)
    if limit is None or preset.max_len <= limit.tokens:
        return preset
    if any(change.startswith("max_len=") for change in preset.overrides):
        raise ValueError(f"--max-len: {preset.max_len} tokens exceed the limit of {hf_path} ({limit.tokens}, from "
                         f"{limit.source}); pass --max-len {limit.tokens} or less")
    logger.warning("max length %d of preset %s capped at the model's limit %d (%s); the numbers are reported as %s",
                   preset.max_len, preset.name, limit.tokens, limit.source, f"{preset.name}+overrides")
    return preset.with_overrides(max_len=limit.tokens)


def finetune_embedder(model: str | Embedder, config: FinetuneConfig) -> Embedder:
    """``model`` itself when it is an ``Embedder``, else the one ``config`` resolves: the model alone, since
    fine-tuning trains the whole encoder and reads no pooled features (``pooled=False``)."""
    if isinstance(model, Embedder):
        return model
    return Embedder.resolve(EmbedderOptions(model=str(model), cache_dir=config.cache_dir, device=config.device,
                                            tokenizer_dir=config.tokenizer_dir, verify=config.verify, pooled=False))


def run_finetune(model: str | Embedder, glue_dir: str | Path, tasks: Sequence[str] | None, out: str | Path,
                 config: FinetuneConfig) -> dict:
    """Run (or resume) the grid for every task; write ``results.json``, ``results.md`` and ``embedder.json`` (the
    model resolved: its form, path and identity) under ``out``."""
    from transformers import AutoTokenizer

    out = require_output_dir(out, "--out")
    names, skipped = resolve_tasks(glue_dir, tasks)
    embedder = finetune_embedder(model, config)
    resolved = embedder.model
    tokenizer = AutoTokenizer.from_pretrained(resolved.hf_path)
    config = replace(config, preset=fit_preset_length(config.preset, resolved.hf_path))
    per_task = {name: run_task(name, resolved, tokenizer, glue_dir, out, config) for name in names}
    report = build_report(resolved, glue_dir, config.preset, per_task, skipped, subsampled_dev=bool(config.max_dev))
    with writing(out / "results.json", "the fine-tuning report"):
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_text(out / "results.json", json.dumps(report, indent=1) + "\n")
        atomic_write_text(out / "results.md", render_markdown(report))
        write_embedder_json(embedder, out)
    return report
