"""Run the ``mteb`` package on our encoders: native checkpoints (via HF export), HF or sentence-transformers dirs.

:class:`CachingMtebEncoder` implements mteb's encoder protocol (``mteb.models.AbsEncoder``:
``encode(DataLoader, *, task_metadata, hf_split, hf_subset, prompt_type, **kwargs) -> [n, h]``, cosine
similarity) over an :class:`~megatron_crossbert.evaluation.embedder.Embedder`, so MTEB and the probes embed
text through the same code (tokenizer, length-sorted batches under ``torch.inference_mode``, pooling).
The embedding recipe (pooling, a trained pooler's Dense modules, L2 norm, max tokens) is the model's own
(``evaluation/recipe.py``), resolved by the embedder.

Encoding is where an MTEB run spends its time, so each call encodes every distinct text once, and the
pooled features are cached per (model identity, task, split, pooling, max tokens, exact texts) in the
evaluation's ``FeatureCache`` (``feature_cache.py``): a rerun, or a run resumed after a crash, encodes
nothing. The model identity is a content hash (``Embedder.identity``), so a changed model never reuses stale
features. The cache holds vectors before normalisation; the recipe's L2 norm is applied after it, and before
that its PCA whitening (``recipe.whiten``, ``whitening.PerTaskWhitening``): one map per task, fitted on the
first texts the task encodes (a classification task's train split, an STS task's first sentences), never on
labels, and applied unchanged to every later call of that task, so both sides of a pair share one map.

``run_mteb`` evaluates ``BuiltTask``s (a benchmark directory's folders, ``--local-task`` specs, or
built-in tasks online) with ``mteb.evaluate`` and writes the results (``report.py``). mteb's own result
cache (``~/.cache/mteb``) is bypassed: results always reflect the model given, never a stale run.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from mteb.models.abs_encoder import AbsEncoder
from mteb.models.model_meta import ModelMeta, ScoringFunction

from megatron_crossbert.evaluation.dense_head import apply_dense, l2_normalize
from megatron_crossbert.evaluation.embedder import Embedder, EmbedderOptions
from megatron_crossbert.evaluation.encoders import HFEncoder, model_card
from megatron_crossbert.evaluation.encoding import EncodingOptions
from megatron_crossbert.evaluation.mteb.report import check_out_dir, summarize, write_outputs
from megatron_crossbert.evaluation.mteb.tasks import BuiltTask, build_task
from megatron_crossbert.evaluation.recipe import EmbeddingRecipe
from megatron_crossbert.evaluation.tasks.folders import discover_task_folders
from megatron_crossbert.evaluation.whitening import READOUTS, PerTaskWhitening, readout_of

logger = logging.getLogger(__name__)
DEFAULT_BENCHMARK = "MTEB(eng, v2)"


def mteb_model_meta(name: str, revision: str, embed_dim: int | None = None, max_tokens: int | None = None):
    """The ``ModelMeta`` mteb wants from an encoder (cosine similarity, PyTorch, text)."""
    fields = {"name": name, "revision": revision, "similarity_fn_name": ScoringFunction.COSINE,
              "framework": ["PyTorch"], "modalities": ["text"], "embed_dim": embed_dim, "max_tokens": max_tokens}
    return ModelMeta.create_empty(overwrites={k: v for k, v in fields.items() if v is not None})


class CachingMtebEncoder(AbsEncoder):
    """What ``mteb.evaluate`` calls: an ``Embedder``'s features (distinct texts once, from its cache), through its
    recipe's Dense modules, whitening and L2 norm."""

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        self.whitening = PerTaskWhitening() if embedder.readout.whiten else None
        encoder = embedder.encoder
        self.mteb_model_meta = mteb_model_meta(embedder.name, embedder.identity.split(":")[-1],
                                               int(encoder.model.config.hidden_size), encoder.max_len)

    @property
    def model(self) -> HFEncoder:
        """The frozen HF encoder the embedder runs."""
        return self.embedder.encoder

    @property
    def recipe(self) -> EmbeddingRecipe:
        return self.embedder.readout

    @property
    def name(self) -> str:
        return self.embedder.name

    def features(self, texts: list[str], *, task: str, split: str) -> np.ndarray:
        """Pooled (un-normalised) features of ``texts``, from the cache when present (``Embedder.sentences``)."""
        return self.embedder.sentences(texts, task=task, split=split)

    def variant(self, recipe: EmbeddingRecipe, name: str | None = None) -> "CachingMtebEncoder":
        """The same backbone, features and caches read through another recipe (``Embedder.variant``)."""
        return CachingMtebEncoder(self.embedder.variant(recipe, name))

    def encode(self, inputs, *, task_metadata, hf_split: str, hf_subset: str, prompt_type=None,
               **kwargs: Any) -> np.ndarray:
        texts = [text for batch in inputs for text in batch["text"]]
        emb = apply_dense(self.recipe.dense, self.features(texts, task=task_metadata.name, split=hf_split))
        if self.whitening is not None:
            emb = self.whitening(task_metadata.name, emb)
        return l2_normalize(emb) if self.recipe.normalize else emb

    def reset_timing(self) -> None:
        self.embedder.timing.reset()

    def timing(self) -> dict:
        """Texts run through the model so far (cache misses), and the seconds that took."""
        return self.embedder.timing.as_dict()


def build_mteb_encoder(model_ref: str, *, cache_dir: str | None = None, tokenizer_dir: str | None = None,
                       device: str | None = None, pooling: str | None = None, normalize: bool | None = None,
                       max_len: int | None = None, batch_size: int = 32, verify: str = "full",
                       whiten: bool | None = None, encoding: EncodingOptions | None = None) -> CachingMtebEncoder:
    """mteb's encoder over the ``Embedder`` these options resolve (``Embedder.resolve``: the model once, its
    recipe within its own token limit); ``encoding``: how each text is encoded (default: all tokens, after the
    final norm)."""
    return CachingMtebEncoder(Embedder.resolve(EmbedderOptions(
        model=str(model_ref), cache_dir=cache_dir, tokenizer_dir=tokenizer_dir, device=device, pooling=pooling,
        normalize=normalize, max_len=max_len, batch_size=batch_size, verify=verify, whiten=whiten,
        encoding=encoding or EncodingOptions())))


def resolve_mteb_tasks(names: Sequence[str] = (), benchmark: str | None = None) -> list[BuiltTask]:
    """Built-in mteb tasks by name and/or all tasks of a benchmark (needs the hub to load their data)."""
    import mteb

    tasks = list(mteb.get_tasks(tasks=list(names))) if names else []
    if benchmark:
        tasks += list(mteb.get_benchmark(benchmark).tasks)
    return [BuiltTask(task, None, task.metadata.name) for task in tasks]


def benchmark_tasks(benchmark_dir: str | Path, names: Sequence[str] = (), *, max_test: int | None = None,
                    seed: int = 0) -> list[BuiltTask]:
    """Every task folder of ``benchmark_dir`` (or those ``names`` picks, by folder or mteb task name);
    ``max_test`` subsamples each test split once (see ``tasks.build_task``)."""
    folders = discover_task_folders(benchmark_dir)
    if names:
        found = {folder.name for folder in folders}
        unknown = [n for n in names if n not in found and n.removesuffix("Classification") not in found]
        if unknown:
            raise ValueError(f"{benchmark_dir}: no task folder {unknown}; it has {sorted(found)}")
        folders = [f for f in folders if f.name in names or f"{f.name}Classification" in names]
    return [build_task(folder, max_test=max_test, seed=seed) for folder in folders]


def benchmark_scorer(benchmark_dir: str | Path, *, overwrite: bool = False):
    """``score(embedder, out_dir, both_readouts) -> summary`` over every task folder of ``benchmark_dir`` (built
    once, here): ``run_mteb`` writing its results and ``embedder.json`` into ``out_dir``. How ``crossbert-pooler``
    scores its backbone before and after (``pooler.runner.Scorer``)."""
    tasks = benchmark_tasks(benchmark_dir)

    def score(embedder: Embedder, out_dir: Path, both_readouts: bool = False) -> dict:
        return run_mteb(CachingMtebEncoder(embedder), tasks, out_dir, overwrite=overwrite,
                        benchmark_dir=str(benchmark_dir), both_readouts=both_readouts)

    return score


def evaluate_mteb(wrapper: AbsEncoder, tasks: Sequence[BuiltTask], *, reference: dict | None = None,
                  raise_error: bool = False) -> tuple[dict, list]:
    """``mteb.evaluate`` on ``tasks`` (no mteb result cache): the summary dict and mteb's ``TaskResult``s."""
    import mteb

    if not tasks:
        raise ValueError("no MTEB tasks to run")
    caching = isinstance(wrapper, CachingMtebEncoder)
    if caching:
        wrapper.reset_timing()
    wall, cpu = time.perf_counter(), time.process_time()
    batch_size = wrapper.model.batch_size if caching else 32
    outcome = mteb.evaluate(wrapper, [t.task for t in tasks], cache=None, overwrite_strategy="always",
                            raise_error=raise_error, show_progress_bar=False,
                            encode_kwargs={"batch_size": batch_size})
    summary = summarize(tasks, outcome, reference or {})
    summary.update(mteb_version=mteb.__version__, timing={"wall_s": round(time.perf_counter() - wall, 2),
                                                          "cpu_s": round(time.process_time() - cpu, 2)})
    if caching:
        summary["model"] = model_card(wrapper.embedder.model) | {"recipe": asdict(wrapper.recipe)}
        summary["timing"].update(wrapper.timing())
    return summary, outcome.task_results


def other_readout(wrapper: CachingMtebEncoder, tasks: Sequence[BuiltTask], summary: dict) -> dict:
    """The readout ``wrapper`` does not use, scored on the same tasks from the same features, beside its own:
    ``{"primary", "tasks": {task: {raw, whitened}}, "average": {...}, "coverage": {...}}``."""
    primary = readout_of(wrapper.recipe.whiten)
    flipped = replace(wrapper.recipe, whiten=not wrapper.recipe.whiten, whiten_source="other readout")
    other, _ = evaluate_mteb(wrapper.variant(flipped), tasks)
    both = {primary: summary, readout_of(flipped.whiten): other}
    scores = {r["task"]: {name: None for name in READOUTS} for r in summary["tasks"]}
    for name, part in both.items():
        for row in part["tasks"]:
            scores.setdefault(row["task"], {n: None for n in READOUTS})[name] = row["main_score"]
    return {"primary": primary, "tasks": scores,
            "average": {name: part["average"] for name, part in both.items()},
            "coverage": {name: part.get("coverage") for name, part in both.items()}}


def run_mteb(wrapper: CachingMtebEncoder, tasks: Sequence[BuiltTask], out_dir: str | Path, *,
             reference: dict | None = None, raise_error: bool = False, overwrite: bool = False,
             benchmark_dir: str | None = None, both_readouts: bool = False) -> dict:
    """Evaluate ``wrapper`` on ``tasks``; writes one mteb result JSON per task and the summary, returns it.
    ``both_readouts``: the summary also holds the other readout's scores (``readouts``)."""
    out_dir = check_out_dir(out_dir, overwrite)
    summary, results = evaluate_mteb(wrapper, tasks, reference=reference, raise_error=raise_error)
    summary["benchmark_dir"] = benchmark_dir
    if both_readouts:
        summary["readouts"] = other_readout(wrapper, tasks, summary)
    write_outputs(results, summary, out_dir, getattr(wrapper, "embedder", None))
    return summary
