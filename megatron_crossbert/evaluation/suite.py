"""In-training probes: score the LIVE model on small probe tasks every N steps.

Signature the training loop calls (rank 0, PP=1, model in eval mode, under ``torch.no_grad``)::

    from megatron_crossbert.evaluation.suite import run_probe_suite, make_encode_embed_fn, load_suite_tasks

    tasks = load_suite_tasks(glue_dir=..., glue_tasks=["SST-2", "STS-B"], jsonl=[...],
                             max_train=2000, max_test=1000)          # once, at start-up
    embed = make_encode_embed_fn(model.encode, hf_tokenizer, pooling="mean", max_len=128)
    scores = run_probe_suite(embed, tasks)    # {"probe/SST-2/accuracy": 81.2, ..., "probe/avg": 74.0}

- ``embed_fn(texts: list[str]) -> np.ndarray`` returns ``[n, h]`` sentence embeddings. It may also
  return ``[n_layers, n, h]``; then every layer is probed and keys gain ``/layer{i}``, while the
  plain keys (and ``probe/avg``) use the last layer.
- Values are on a 0-100 scale; the dict is flat so it goes straight to TensorBoard / W&B.
- Nothing is cached: the model changes between calls. Keep tasks small (a few thousand rows);
  tasks are subsampled once by ``load_suite_tasks`` so every call sees the same rows.

The training hook (``training/hooks.py``) calls the packaged form on EVERY rank::

    probe_in_training(model, run_cfg, tasks: list[str], iteration) -> dict

with ``tasks`` = ``TrainingConfig.probe_tasks`` specs: ``glue:DIR:TASK[,TASK]``, ``jsonl:DIR``, a
bare directory (a JSONL task / dir of them, or a glue_data dir = all its GLUE tasks), or
``mteb:DIR[:TASK,...]`` (MTEB-lite folders scored by mteb itself: ``mteb_probe.py``). The tokenizer is
``run_cfg.data.tokenizer``. Every rank encodes the same texts (tensor-parallel collectives inside
``encode`` stay matched) and fits the same probes, so all ranks return the same dict. PP>1 cannot
run ``encode`` and returns ``{}`` with a warning.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from megatron_crossbert.evaluation.encoders import Pooling, pool_hidden
from megatron_crossbert.evaluation.metrics import average_scores
from megatron_crossbert.evaluation.probes import ProbeConfig, probe_features, task_features
from megatron_crossbert.evaluation.probing import collect_tasks
from megatron_crossbert.evaluation.tasks import ProbeTask, Split

logger = logging.getLogger(__name__)
EmbedFn = Callable[[list[str]], np.ndarray]
SUITE_MAX_TRAIN, SUITE_MAX_TEST = 2000, 1000
_LOADED: dict[tuple, tuple[list[ProbeTask], object]] = {}


def load_suite_tasks(*, glue_dir: str | Path | None = None, glue_tasks: Sequence[str] | None = None,
                     jsonl: Sequence[str | Path] = (), max_train: int | None = SUITE_MAX_TRAIN,
                     max_test: int | None = SUITE_MAX_TEST, seed: int = 0) -> list[ProbeTask]:
    """Load and subsample the suite's tasks once (same rows at every call, so curves are comparable)."""
    tasks = collect_tasks(glue_dir=glue_dir, glue_tasks=glue_tasks, jsonl=jsonl)
    return [task.subsample(max_train, max_test, seed) for task in tasks]


def _as_layers(array: np.ndarray) -> np.ndarray:
    array = np.asarray(array, dtype=np.float32)
    return array[None] if array.ndim == 2 else array


def _split_features(embed_fn: EmbedFn, task: ProbeTask, split: Split) -> np.ndarray:
    text = _as_layers(embed_fn(list(split.texts)))
    pair = _as_layers(embed_fn(list(split.pairs))) if split.pairs is not None else None
    return task_features(task.spec, text, pair)


def run_probe_suite(embed_fn: EmbedFn, tasks: Sequence[ProbeTask], *, probe_config: ProbeConfig | None = None,
                    prefix: str = "probe/") -> dict[str, float]:
    """Probe ``embed_fn``'s embeddings on each task; returns a flat ``{name: value}`` dict (0-100)."""
    probe_config = probe_config or ProbeConfig(cs=(0.01, 0.1, 1.0), folds=3)
    out: dict[str, float] = {}
    scores: dict[str, float] = {}
    for task in tasks:
        x_train = _split_features(embed_fn, task, task.train)
        x_test = _split_features(embed_fn, task, task.test)
        n_layers = x_train.shape[0]
        for layer in range(n_layers):
            result = probe_features(task.spec, x_train[layer], task.train.labels, x_test[layer],
                                    task.test.labels, probe_config)
            suffix = "" if layer == n_layers - 1 else f"/layer{layer}"
            for metric, value in result.metrics.items():
                out[f"{prefix}{task.spec.name}/{metric}{suffix}"] = value
            if n_layers > 1:
                out[f"{prefix}{task.spec.name}/score/layer{layer}"] = result.score
        scores[task.spec.name] = result.score
    if scores:
        out[f"{prefix}avg"] = average_scores(scores)
    return out


def make_encode_embed_fn(encode: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], tokenizer,
                         *, pooling: Pooling = "mean", max_len: int = 128, batch_size: int = 64,
                         device: torch.device | str | None = None) -> EmbedFn:
    """Wrap ``encode(input_ids [b,s], attention_mask [b,s]) -> [b,s,h]`` (``CrossBertModel.encode``).

    ``tokenizer`` is any HF-style callable (``padding``, ``truncation``, ``max_length``,
    ``return_tensors="pt"``), e.g. the ``AutoTokenizer`` saved with the run. Runs under
    ``torch.no_grad`` and returns float32 numpy ``[n, h]``. Texts are batched longest first, as in
    ``HFEncoder.embed`` (unsorted batches pad to their longest row: about twice the CPU on STS).
    """
    def embed(texts: list[str]) -> np.ndarray:
        order = np.argsort([-len(t) for t in texts], kind="stable")
        chunks = []
        for start in range(0, len(texts), batch_size):
            batch = tokenizer([texts[i] for i in order[start:start + batch_size]], padding=True, truncation=True,
                              max_length=max_len, return_tensors="pt")
            ids, mask = batch["input_ids"].to(device or "cpu"), batch["attention_mask"].to(device or "cpu")
            with torch.no_grad():
                hidden = encode(ids, mask)
            chunks.append(pool_hidden(hidden.float(), mask, pooling).cpu().numpy())
        if not chunks:
            return np.zeros((0, 0), np.float32)
        stacked = np.concatenate(chunks)
        result = np.empty_like(stacked)
        result[order] = stacked
        return result

    return embed


def parse_task_specs(specs: Sequence[str]) -> dict:
    """``glue:DIR:TASKS`` / ``jsonl:DIR`` / bare DIR -> ``collect_tasks`` keyword arguments."""
    from megatron_crossbert.evaluation.glue import available_glue_tasks

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
    """Probe tasks, MTEB tasks and tokenizer, loaded once per process (the hook calls us every N steps)."""
    key = (tuple(specs), run_cfg.data.tokenizer)
    if key not in _LOADED:
        from transformers import AutoTokenizer

        from megatron_crossbert.evaluation.task_folders import is_mteb_spec

        mteb_specs = [spec for spec in specs if is_mteb_spec(spec)]
        probe_specs = [spec for spec in specs if spec not in mteb_specs]
        tasks = load_suite_tasks(**parse_task_specs(probe_specs), max_train=SUITE_MAX_TRAIN, max_test=SUITE_MAX_TEST)
        mteb_tasks = []
        if mteb_specs:
            from megatron_crossbert.evaluation.mteb_probe import load_mteb_suite

            mteb_tasks = load_mteb_suite(mteb_specs, max_test=SUITE_MAX_TEST)
        _LOADED[key] = (tasks, mteb_tasks, AutoTokenizer.from_pretrained(run_cfg.data.tokenizer))
    return _LOADED[key]


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
    scores = run_probe_suite(embed, probe_tasks, prefix="")
    if mteb_tasks:
        from megatron_crossbert.evaluation.mteb_probe import run_mteb_suite

        scores.update(run_mteb_suite(embed, mteb_tasks))
    logger.info("iteration %d probes: %s", iteration, {k: round(v, 2) for k, v in scores.items()})
    return scores
