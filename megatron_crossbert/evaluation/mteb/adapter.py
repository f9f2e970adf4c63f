"""Run the ``mteb`` package on our encoders: native checkpoints (via HF export), HF or sentence-transformers dirs.

:class:`CachingMtebEncoder` implements mteb's encoder protocol (``mteb.models.AbsEncoder``:
``encode(DataLoader, *, task_metadata, hf_split, hf_subset, prompt_type, **kwargs) -> [n, h]``, cosine
similarity) over :class:`~megatron_crossbert.evaluation.encoders.HFEncoder`, so MTEB and the probes embed
text through the same code (tokenizer, length-sorted batches under ``torch.inference_mode``, pooling).
The embedding recipe (pooling, a trained pooler's Dense modules, L2 norm, max tokens) is the model's own (``evaluation/recipe.py``).

Encoding is where an MTEB run spends its time, so each call encodes every distinct text once, and the
pooled features are cached per (model identity, task, split, pooling, max tokens, exact texts) in the
evaluation's ``FeatureCache`` (``feature_cache.py``): a rerun, or a run resumed after a crash, encodes
nothing. The model identity is a content hash (``resolve_model``), so a changed model never reuses stale
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
from typing import Any, Callable, Sequence

import numpy as np
from mteb.models.abs_encoder import AbsEncoder
from mteb.models.model_meta import ModelMeta, ScoringFunction

from megatron_crossbert.evaluation.dense_head import apply_dense, l2_normalize
from megatron_crossbert.evaluation.encoders import HFEncoder, model_card, resolve_model
from megatron_crossbert.evaluation.encoding import EncodingOptions
from megatron_crossbert.evaluation.feature_cache import FeatureCache, texts_digest
from megatron_crossbert.evaluation.mteb.report import check_out_dir, summarize, write_outputs
from megatron_crossbert.evaluation.mteb.task_folders import discover_task_folders
from megatron_crossbert.evaluation.mteb.tasks import BuiltTask, build_task
from megatron_crossbert.evaluation.recipe import EmbeddingRecipe, describe, model_token_limit, resolve_recipe
from megatron_crossbert.evaluation.whitening import READOUTS, PerTaskWhitening, readout_of

logger = logging.getLogger(__name__)
DEFAULT_BENCHMARK = "MTEB(eng, v2)"


def embed_unique(embed: Callable[[list[str]], np.ndarray], texts: Sequence[str]) -> np.ndarray:
    """``embed`` each distinct text once, then scatter the rows back to ``texts``' order."""
    unique, inverse = np.unique(np.asarray(list(texts), dtype=object), return_inverse=True)
    return embed(list(unique))[inverse.reshape(-1)]


def mteb_model_meta(name: str, revision: str, embed_dim: int | None = None, max_tokens: int | None = None):
    """The ``ModelMeta`` mteb wants from an encoder (cosine similarity, PyTorch, text)."""
    fields = {"name": name, "revision": revision, "similarity_fn_name": ScoringFunction.COSINE,
              "framework": ["PyTorch"], "modalities": ["text"], "embed_dim": embed_dim, "max_tokens": max_tokens}
    return ModelMeta.create_empty(overwrites={k: v for k, v in fields.items() if v is not None})


class CachingMtebEncoder(AbsEncoder):
    """What ``mteb.evaluate`` calls: distinct texts once, features from the cache, the recipe's whitening
    and L2 norm."""

    def __init__(self, encoder: HFEncoder, recipe: EmbeddingRecipe, cache: FeatureCache | None = None,
                 name: str | None = None, memo: dict[str, np.ndarray] | None = None) -> None:
        self.model, self.recipe, self.cache = encoder, recipe, cache or FeatureCache(None)
        self.memo = {} if memo is None else memo
        """Pooled features of this process by cache key, shared with ``variant``s: a second readout of the
        same backbone (whitened, or through a trained pooler) encodes nothing, disk cache or not."""
        self.whitening = PerTaskWhitening() if recipe.whiten else None
        self.reset_timing()
        source = encoder.resolved.native_checkpoint or encoder.resolved.model_dir
        model_name = name or f"megatron-crossbert/{Path(source).name or 'model'}"
        self.mteb_model_meta = mteb_model_meta(model_name, encoder.identity.split(":")[-1],
                                               int(encoder.model.config.hidden_size), encoder.max_len)

    def _embed(self, texts: list[str], desc: str) -> np.ndarray:
        wall, cpu = time.perf_counter(), time.process_time()
        out = self.model.embed(texts, pooling=self.recipe.pooling, layers="last", desc=desc)[0]
        self.encoded_texts += len(texts)
        self.encode_s += time.perf_counter() - wall
        self.encode_cpu_s += time.process_time() - cpu
        return out

    def features(self, texts: list[str], *, task: str, split: str) -> np.ndarray:
        """Pooled (un-normalised) features of ``texts``, from the cache when present."""
        key = self.cache.key(kind="mteb", model=self.model.identity, task=task, split=split,
                             pooling=self.recipe.pooling, max_len=self.model.max_len, texts=texts_digest(texts))
        if key not in self.memo:
            self.memo[key] = self.cache.get_or_compute(key, lambda: embed_unique(
                lambda unique: self._embed(unique, f"{task}/{split}"), texts))
        return self.memo[key]

    def variant(self, recipe: EmbeddingRecipe, name: str | None = None) -> "CachingMtebEncoder":
        """The same backbone, features and caches read through another recipe (whitening on or off, a
        pooler's Dense modules); its pooling and token count must be this one's, as the features are."""
        if (recipe.pooling, recipe.tokens) != (self.recipe.pooling, self.recipe.tokens):
            raise ValueError(f"a variant reads the same pooled features: pooling {recipe.pooling} / "
                             f"{recipe.tokens} tokens differ from {self.recipe.pooling} / {self.recipe.tokens}")
        return CachingMtebEncoder(self.model, recipe, self.cache, name or self.mteb_model_meta.name, self.memo)

    def encode(self, inputs, *, task_metadata, hf_split: str, hf_subset: str, prompt_type=None,
               **kwargs: Any) -> np.ndarray:
        texts = [text for batch in inputs for text in batch["text"]]
        emb = apply_dense(self.recipe.dense, self.features(texts, task=task_metadata.name, split=hf_split))
        if self.whitening is not None:
            emb = self.whitening(task_metadata.name, emb)
        return l2_normalize(emb) if self.recipe.normalize else emb

    def reset_timing(self) -> None:
        self.encoded_texts, self.encode_s, self.encode_cpu_s = 0, 0.0, 0.0

    def timing(self) -> dict:
        """Texts run through the model so far (cache misses), and the seconds that took."""
        rate = self.encoded_texts / self.encode_s if self.encode_s > 0 else None
        return {"texts_encoded": self.encoded_texts, "encode_wall_s": round(self.encode_s, 2),
                "encode_cpu_s": round(self.encode_cpu_s, 2), "sentences_per_s": rate,
                "sentences_per_cpu_s": self.encoded_texts / self.encode_cpu_s if self.encode_cpu_s > 0 else None}


def build_mteb_encoder(model_ref: str, *, cache_dir: str | None = None, tokenizer_dir: str | None = None,
                       device: str | None = None, pooling: str | None = None, normalize: bool | None = None,
                       max_len: int | None = None, batch_size: int = 32, verify: str = "full",
                       whiten: bool | None = None, encoding: EncodingOptions | None = None) -> CachingMtebEncoder:
    """Resolve the model once (a native checkpoint is verified, ``verify`` its checksum check, and
    exported); the recipe is the model's sentence-transformers config and its architecture's whitening
    default (``recipe.resolve_recipe``) unless flags say otherwise, its token count within the model's own
    limit (``recipe.fit_max_len``). ``encoding``: how each text is encoded and which tensor is pooled
    (``evaluation.encoding``; default: all tokens, after the final norm)."""
    resolved = resolve_model(model_ref, cache_dir=cache_dir, tokenizer_dir=tokenizer_dir, verify=verify)
    recipe = resolve_recipe(resolved.model_dir, pooling=pooling, normalize=normalize, max_len=max_len, whiten=whiten,
                            limit=model_token_limit(resolved.hf_path))
    logger.info(describe(recipe))
    encoder = HFEncoder(resolved, device=device, max_len=recipe.tokens, batch_size=batch_size, encoding=encoding)
    if recipe.attention:
        encoder.use_attention(recipe.attention)
    return CachingMtebEncoder(encoder, recipe, FeatureCache(cache_dir))


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
        summary["model"] = model_card(wrapper.model.resolved) | {"recipe": asdict(wrapper.recipe)}
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
    write_outputs(results, summary, out_dir)
    return summary
