"""Run the ``mteb`` package on our encoders (native checkpoints via HF export, or HF encoder dirs).

:class:`CrossBertMtebEncoder` implements mteb's encoder protocol (``mteb.models.AbsEncoder``:
``encode(DataLoader, *, task_metadata, hf_split, hf_subset, prompt_type, **kwargs) -> [n, h]``,
cosine similarity) on top of :class:`~megatron_crossbert.evaluation.encoders.HFEncoder`, so MTEB
and the probes embed text through exactly the same code (same tokenizer, pooling, truncation).

``run_mteb`` evaluates a list of mteb tasks (built-in ones resolved by name or benchmark online,
or local file-backed tasks from :mod:`mteb_tasks` offline), writes one mteb result JSON per task
plus ``mteb_summary.json`` / ``mteb_summary.md``, and returns the summary dict. mteb's own result
cache (``~/.cache/mteb``) is bypassed: results always reflect the model given, never a stale run.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
from mteb.models.abs_encoder import AbsEncoder
from mteb.models.model_meta import ModelMeta, ScoringFunction

from megatron_crossbert.evaluation.encoders import HFEncoder, Pooling

logger = logging.getLogger(__name__)
DEFAULT_BENCHMARK = "MTEB(eng, v2)"


class CrossBertMtebEncoder(AbsEncoder):
    """mteb encoder protocol over an :class:`HFEncoder` (last layer, pooled, optional L2 norm)."""

    def __init__(self, encoder: HFEncoder, *, pooling: Pooling = "mean", normalize: bool = False,
                 name: str | None = None) -> None:
        self.model = encoder
        self.pooling, self.normalize = pooling, normalize
        model_name = name or f"megatron-crossbert/{Path(encoder.resolved.hf_path).name or 'model'}"
        self.mteb_model_meta = ModelMeta.create_empty(overwrites={
            "name": model_name, "revision": encoder.identity.split(":")[-1],
            "similarity_fn_name": ScoringFunction.COSINE, "framework": ["PyTorch"],
            "embed_dim": int(encoder.model.config.hidden_size), "max_tokens": encoder.max_len,
            "modalities": ["text"]})

    def encode(self, inputs, *, task_metadata, hf_split: str, hf_subset: str, prompt_type=None,
               **kwargs: Any) -> np.ndarray:
        texts = [text for batch in inputs for text in batch["text"]]
        emb = self.model.embed(texts, pooling=self.pooling, layers="last", desc=f"{task_metadata.name}/{hf_split}",
                               progress=bool(kwargs.get("show_progress_bar", True)))[0]
        if self.normalize:
            emb = emb / np.clip(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12, None)
        return emb


def resolve_mteb_tasks(names: Sequence[str] = (), benchmark: str | None = None) -> list:
    """Built-in mteb tasks by name and/or all tasks of a benchmark (needs the hub to load their data)."""
    import mteb

    tasks = list(mteb.get_tasks(tasks=list(names))) if names else []
    if benchmark:
        tasks += list(mteb.get_benchmark(benchmark).tasks)
    return tasks


def _task_row(result, task_types: dict[str, str]) -> dict:
    """Main score (0-100) and split names of one mteb TaskResult.

    The type comes from our task objects: ``TaskResult.task_type`` looks the name up in mteb's
    registry, which does not know local tasks.
    """
    return {"task": result.task_name, "type": task_types.get(result.task_name, "?"),
            "main_score": 100.0 * float(result.get_score()), "splits": list(result.scores)}


def summary_markdown(summary: dict) -> str:
    lines = [f"# MTEB: `{summary['model']}`", "", "| task | type | main score |", "|---|---|---:|"]
    lines += [f"| {r['task']} | {r['type']} | {r['main_score']:.2f} |" for r in summary["tasks"]]
    if summary["average"] is not None:
        lines.append(f"| **average** | | **{summary['average']:.2f}** |")
    for name, err in summary["errors"].items():
        lines.append(f"| {name} | error | {err[:80]} |")
    return "\n".join(lines) + "\n"


def _write_outputs(results: Iterable, summary: dict, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    for result in results:
        (out_dir / f"{result.task_name}.json").write_text(json.dumps(result.to_dict(), indent=2, default=str))
    (out_dir / "mteb_summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    (out_dir / "mteb_summary.md").write_text(summary_markdown(summary))


def run_mteb(encoder: HFEncoder, tasks: Sequence, out_dir: str | Path, *, pooling: Pooling = "mean",
             normalize: bool = False, batch_size: int = 32, raise_error: bool = False) -> dict:
    """Evaluate ``encoder`` on mteb ``tasks``; writes per-task JSON and a summary, returns the summary."""
    import mteb

    if not tasks:
        raise ValueError("no MTEB tasks to run")
    wrapper = CrossBertMtebEncoder(encoder, pooling=pooling, normalize=normalize)
    outcome = mteb.evaluate(wrapper, list(tasks), cache=None, overwrite_strategy="always",
                            raise_error=raise_error, encode_kwargs={"batch_size": batch_size})
    task_types = {task.metadata.name: str(task.metadata.type) for task in tasks}
    rows = [_task_row(result, task_types) for result in outcome.task_results]
    errors = {err.task_name: str(err.exception) for err in (outcome.exceptions or [])}
    summary = {"model": wrapper.mteb_model_meta.name, "identity": encoder.identity,
               "tasks": rows, "errors": errors,
               "average": float(np.mean([r["main_score"] for r in rows])) if rows else None}
    _write_outputs(outcome.task_results, summary, Path(out_dir))
    return summary
