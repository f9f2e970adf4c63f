"""The in-training probes the training loop calls every ``probe_interval`` steps: linear probes and MTEB-lite.

``training/hooks.py`` calls, on EVERY rank (the pretrain CLI hands this function to ``train``)::

    probe_in_training(model, run_cfg, tasks: list[str], iteration) -> dict

with ``tasks`` = ``TrainingConfig.probe_tasks`` specs: ``glue:DIR:TASK[,TASK]``, ``jsonl:DIR``, a
bare directory (a JSONL task / dir of them, or a glue_data dir = all its GLUE tasks), or
``mteb:DIR[:TASK,...]`` (MTEB-lite folders scored by mteb itself: ``mteb/in_training.py``). The linear
probes are ``probing/in_training.py``'s. The tokenizer is ``run_cfg.data.tokenizer``. Every rank encodes
the same texts (tensor-parallel collectives inside ``encode`` stay matched) and fits the same probes,
so all ranks return the same dict. PP>1 cannot run ``encode`` and returns ``{}`` with a warning.
Features are PCA-whitened where the architecture says so (``ArchSpec.whiten_frozen_features``), the rule
``crossbert-probe`` and ``crossbert-mteb`` apply to the run's export, so a curve and an export agree.
This module ties the two kinds together, so neither ``probing/`` nor ``mteb/`` imports the other's
in-training code.

One name for one idea: the in-training probes are ``probe_in_training`` at each level (here, what training
calls; ``probing.in_training`` for the linear probes; ``mteb.in_training`` for MTEB-lite), scheduled by
``training.hooks.InTrainingProbes`` and configured by ``training.probe_tasks`` and ``probe_interval``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Sequence

from megatron_crossbert.arch import get_arch
from megatron_crossbert.evaluation.tasks.folders import is_mteb_spec
from megatron_crossbert.evaluation.probing import in_training as linear
from megatron_crossbert.evaluation.probing.in_training import (
    SUITE_MAX_TEST, SUITE_MAX_TRAIN, load_probe_tasks, make_encode_embed_fn,
)
from megatron_crossbert.evaluation.tasks.data import ProbeTask
from megatron_crossbert.evaluation.tasks.glue import available_glue_tasks

logger = logging.getLogger(__name__)
_LOADED: dict[tuple, tuple[list[ProbeTask], list, object]] = {}


def parse_task_specs(specs: Sequence[str]) -> dict:
    """``glue:DIR:TASKS`` / ``jsonl:DIR`` / bare DIR -> ``collect_tasks`` keyword arguments."""
    glue_dir, glue_tasks, jsonl = None, [], []
    for spec in specs:
        kind, _, rest = spec.partition(":")
        if kind == "glue":
            glue_dir, _, names = rest.partition(":")
            glue_tasks += [n for n in names.split(",") if n] or available_glue_tasks(glue_dir)
        elif kind == "jsonl":
            jsonl.append(rest)
        elif Path(spec).is_dir() and available_glue_tasks(spec):
            glue_dir, glue_tasks = spec, glue_tasks + available_glue_tasks(spec)
        else:
            jsonl.append(spec)
    return {"glue_dir": glue_dir, "glue_tasks": glue_tasks or None, "jsonl": jsonl}


def _suite_inputs(run_cfg, specs: Sequence[str]) -> tuple[list[ProbeTask], list, object]:
    """Probe tasks, MTEB tasks and tokenizer, loaded once per process (the hook calls us every N steps).
    A task that cannot be read is a ``ValueError`` naming ``training.probe_tasks``; a tokenizer that cannot
    be loaded names ``data.tokenizer``."""
    key = (tuple(specs), run_cfg.data.tokenizer)
    if key not in _LOADED:
        from transformers import AutoTokenizer

        mteb_specs = [spec for spec in specs if is_mteb_spec(spec)]
        probe_specs = [spec for spec in specs if spec not in mteb_specs]
        try:
            tasks = load_probe_tasks(**parse_task_specs(probe_specs), max_train=SUITE_MAX_TRAIN,
                                     max_test=SUITE_MAX_TEST)
            mteb_tasks = []
            if mteb_specs:
                from megatron_crossbert.evaluation.mteb.in_training import load_mteb_tasks

                mteb_tasks = load_mteb_tasks(mteb_specs, max_test=SUITE_MAX_TEST)
        except (OSError, ValueError) as err:
            raise ValueError(f"training.probe_tasks: {err}") from err
        try:
            tokenizer = AutoTokenizer.from_pretrained(run_cfg.data.tokenizer)
        except (OSError, ValueError) as err:
            raise ValueError(f"data.tokenizer {run_cfg.data.tokenizer!r}: in-training probes need a tokenizer "
                             f"that AutoTokenizer loads ({err})") from err
        _LOADED[key] = (tasks, mteb_tasks, tokenizer)
    return _LOADED[key]


def prepare_probes(run_cfg) -> None:
    """Read ``training.probe_tasks`` and the tokenizer now, before training starts, as the first probe
    would: a missing or unreadable task is refused before the first step, not after it."""
    _suite_inputs(run_cfg, list(run_cfg.training.probe_tasks))


def probe_in_training(model, run_cfg, tasks: Sequence[str], iteration: int) -> dict[str, float]:
    """The training hook's entry point (see module docstring); ``model`` is the unwrapped chunk."""
    from megatron_crossbert.models import model_encode

    model = model[0] if isinstance(model, (list, tuple)) else model
    if run_cfg.parallel.pipeline_model_parallel_size > 1:
        logger.warning("in-training probes need PP=1 (encode runs the whole encoder); skipped")
        return {}
    probe_tasks, mteb_tasks, tokenizer = _suite_inputs(run_cfg, tasks)
    device = next(model.parameters()).device
    embed = make_encode_embed_fn(lambda ids, mask: model_encode(model, ids, mask), tokenizer,
                                 max_len=run_cfg.data.seq_length, device=device)
    whiten = get_arch(run_cfg.model.arch).whiten_frozen_features  # as crossbert-probe/-mteb on its export
    scores = linear.probe_in_training(embed, probe_tasks, prefix="", whiten=whiten)
    if mteb_tasks:
        from megatron_crossbert.evaluation.mteb import in_training as mteb_lite

        scores.update(mteb_lite.probe_in_training(embed, mteb_tasks, whiten=whiten))
    logger.info("iteration %d probes: %s", iteration, {k: round(v, 2) for k, v in scores.items()})
    return scores
