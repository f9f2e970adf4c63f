"""MTEB-lite tasks among the in-training probes: the live model's STS Spearman, logged every N steps.

``training.probe_tasks`` accepts ``mteb:DIR`` (every STS folder of a benchmark directory such as
``../shared/data/mteb_lite``) or ``mteb:DIR:STS13,Banking77`` (the named folders, any kind). Tasks are
built once per process, their test rows subsampled with a fixed seed (``max_test``), so every call
scores the same pairs; mteb itself scores them, through a thin encoder over the probe suite's
``embed_fn``, so a training curve and ``crossbert-mteb --benchmark-dir`` compute the number the same
way. STS is the default because it needs no fitting: two encodes per pair, where a classification
folder adds mteb's ten LogisticRegression fits to every call.

Keys (flat, 0-100, beside the linear probes' ``<task>/<metric>``): ``mteb/<folder>/<main score>`` and
``mteb/avg``; the training logger files them under ``probe/``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

import numpy as np
from mteb.models.abs_encoder import AbsEncoder

from megatron_crossbert.evaluation.embedder import embed_unique
from megatron_crossbert.evaluation.mteb.adapter import evaluate_mteb, mteb_model_meta
from megatron_crossbert.evaluation.tasks.folders import MTEB_SPEC, discover_task_folders, is_mteb_spec
from megatron_crossbert.evaluation.mteb.tasks import BuiltTask, build_task
from megatron_crossbert.evaluation.whitening import PerTaskWhitening

EmbedFn = Callable[[list[str]], np.ndarray]
PROBE_MAX_TEST = 1000
"""Test rows per task in training (like the linear probes' ``SUITE_MAX_TEST``)."""


class EmbedFnEncoder(AbsEncoder):
    """mteb's encoder protocol over ``embed_fn(texts) -> [n, h]`` (or ``[layers, n, h]``: the last layer);
    ``whiten``: the features go through ``PerTaskWhitening`` as in ``crossbert-mteb`` (``adapter.py``)."""

    def __init__(self, embed_fn: EmbedFn, name: str = "megatron-crossbert/live", whiten: bool = False) -> None:
        self.embed_fn = embed_fn
        self.whitening = PerTaskWhitening() if whiten else None
        self.mteb_model_meta = mteb_model_meta(name, "live")

    def _embed(self, texts: list[str]) -> np.ndarray:
        out = np.asarray(self.embed_fn(texts), dtype=np.float32)
        return out[-1] if out.ndim == 3 else out

    def encode(self, inputs, *, task_metadata, hf_split: str, hf_subset: str, prompt_type=None, **kwargs):
        emb = embed_unique(self._embed, [text for batch in inputs for text in batch["text"]])
        return emb if self.whitening is None else self.whitening(task_metadata.name, emb)


def parse_mteb_spec(spec: str) -> tuple[Path, list[str]]:
    """``mteb:DIR[:NAME,NAME]`` -> (DIR, folder names; empty means every STS folder)."""
    if not is_mteb_spec(spec):
        raise ValueError(f"{spec!r} is not an mteb: probe spec (mteb:DIR or mteb:DIR:TASK,TASK)")
    root, _, names = spec[len(MTEB_SPEC):].partition(":")
    if not root:
        raise ValueError(f"{spec!r}: mteb: probe spec needs a directory (mteb:DIR or mteb:DIR:TASK,TASK)")
    return Path(root), [n for n in names.split(",") if n]


def load_mteb_tasks(specs: Sequence[str], *, max_test: int | None = PROBE_MAX_TEST, seed: int = 0) -> list[BuiltTask]:
    """The tasks of ``mteb:`` specs (named folders, else every STS folder), test rows subsampled once."""
    built = []
    for spec in specs:
        root, names = parse_mteb_spec(spec)
        folders = {folder.name: folder for folder in discover_task_folders(root)}
        missing = [n for n in names if n not in folders]
        if missing:
            raise ValueError(f"{spec}: {root} has no task folder {missing}; it has {sorted(folders)}")
        chosen = [folders[n] for n in names] if names else [f for f in folders.values() if f.kind == "sts"]
        if not chosen:
            raise ValueError(f"{spec}: {root} has no STS folder; name the folders to probe (mteb:DIR:TASK,...)")
        built += [build_task(folder, max_test=max_test, seed=seed) for folder in chosen]
    return built


def probe_in_training(embed_fn: EmbedFn, tasks: Sequence[BuiltTask], prefix: str = "",
                   whiten: bool = False) -> dict[str, float]:
    """Score ``embed_fn`` on ``tasks`` with mteb: ``{prefix}mteb/<folder>/<main score>`` and ``{prefix}mteb/avg``."""
    if not tasks:
        return {}
    summary, _ = evaluate_mteb(EmbedFnEncoder(embed_fn, whiten=whiten), tasks, raise_error=True)
    out = {f"{prefix}mteb/{row['folder']}/{row['main_score_name']}": row["main_score"] for row in summary["tasks"]}
    if summary["average"] is not None:  # every task undefined (constant embeddings): nothing to log
        out[f"{prefix}mteb/avg"] = summary["average"]
    return out
