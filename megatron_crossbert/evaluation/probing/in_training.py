"""In-training probes: score the LIVE model on small probe tasks every N steps.

Signature the training loop calls (rank 0, PP=1, model in eval mode, under ``torch.no_grad``)::

    from megatron_crossbert.evaluation.probing.in_training import (
        load_probe_tasks, make_encode_embed_fn, probe_in_training)

    tasks = load_probe_tasks(glue_dir=..., glue_tasks=["SST-2", "STS-B"], jsonl=[...],
                             max_train=2000, max_test=1000)          # once, at start-up
    embed = make_encode_embed_fn(model.encode, hf_tokenizer, pooling="mean", max_len=128)
    scores = probe_in_training(embed, tasks)    # {"probe/SST-2/accuracy": 81.2, ..., "probe/avg": 74.0}

- ``embed_fn(texts: list[str]) -> np.ndarray`` returns ``[n, h]`` sentence embeddings. It may also
  return ``[n_layers, n, h]``; then every layer is probed and keys gain ``/layer{i}``, while the
  plain keys (and ``probe/avg``) use the last layer.
- Values are on a 0-100 scale; the dict is flat so it goes straight to TensorBoard / W&B.
- Nothing is cached: the model changes between calls. Keep tasks small (a few thousand rows);
  tasks are subsampled once by ``load_probe_tasks`` so every call sees the same rows.

The training loop reaches this through ``evaluation/in_training.py`` (task specs, the tokenizer,
MTEB-lite tasks beside these probes).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from megatron_crossbert.evaluation.encoders import Pooling, pool_hidden
from megatron_crossbert.evaluation.probing.features import Sides, probe_inputs
from megatron_crossbert.evaluation.probing.linear_probes import ProbeConfig, probe_features
from megatron_crossbert.evaluation.tasks.metrics import average_scores, finite_or_none
from megatron_crossbert.evaluation.probing.runner import collect_tasks
from megatron_crossbert.evaluation.tasks.data import ProbeTask, Split

EmbedFn = Callable[[list[str]], np.ndarray]
SUITE_MAX_TRAIN, SUITE_MAX_TEST = 2000, 1000


def load_probe_tasks(*, glue_dir: str | Path | None = None, glue_tasks: Sequence[str] | None = None,
                     jsonl: Sequence[str | Path] = (), max_train: int | None = SUITE_MAX_TRAIN,
                     max_test: int | None = SUITE_MAX_TEST, seed: int = 0) -> list[ProbeTask]:
    """Load and subsample the suite's tasks once (same rows at every call, so curves are comparable)."""
    tasks = collect_tasks(glue_dir=glue_dir, glue_tasks=glue_tasks, jsonl=jsonl)
    return [task.subsample(max_train, max_test, seed) for task in tasks]


def _as_layers(array: np.ndarray) -> np.ndarray:
    array = np.asarray(array, dtype=np.float32)
    return array[None] if array.ndim == 2 else array


def _split_sides(embed_fn: EmbedFn, split: Split) -> Sides:
    text = _as_layers(embed_fn(list(split.texts)))
    pair = _as_layers(embed_fn(list(split.pairs))) if split.pairs is not None else None
    return text, pair


def probe_in_training(embed_fn: EmbedFn, tasks: Sequence[ProbeTask], *, probe_config: ProbeConfig | None = None,
                    prefix: str = "probe/", whiten: bool = False) -> dict[str, float]:
    """Probe ``embed_fn``'s embeddings on each task; returns a flat ``{name: value}`` dict (0-100).
    ``whiten``: PCA-whiten the features first, by ``crossbert-probe``'s rule (``features.probe_inputs``)."""
    probe_config = probe_config or ProbeConfig(cs=(0.01, 0.1, 1.0), folds=3)
    out: dict[str, float] = {}
    scores: dict[str, float] = {}
    for task in tasks:
        feats = probe_inputs(task.spec, _split_sides(embed_fn, task.train), _split_sides(embed_fn, task.test), whiten)
        x_train, x_test = feats.train, feats.test
        n_layers = x_train.shape[0]
        for layer in range(n_layers):
            result = probe_features(task.spec, x_train[layer], task.train.labels, x_test[layer],
                                    task.test.labels, probe_config)
            suffix = "" if layer == n_layers - 1 else f"/layer{layer}"
            for metric, value in result.metrics.items():
                if finite_or_none(value) is not None:  # an undefined metric is left out, never logged as NaN
                    out[f"{prefix}{task.spec.name}/{metric}{suffix}"] = value
            if n_layers > 1 and finite_or_none(result.score) is not None:
                out[f"{prefix}{task.spec.name}/score/layer{layer}"] = result.score
        scores[task.spec.name] = result.score
    if average_scores(scores) is not None:
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
