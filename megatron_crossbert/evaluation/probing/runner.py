"""Frozen-encoder probing of a model on a set of tasks (what ``crossbert-probe`` runs).

``run_probing(model, tasks, config)`` takes an ``Embedder`` (or resolves one for a model reference: native
checkpoints are exported to HF first), extracts cached features per task, fits one probe per layer (only the last
layer unless ``layers="all"``) and returns a JSON-able report::

    {"model": {...}, "config": {...},
     "tasks": {name: {"spec", "n_train", "n_test", "metrics", "score", "chosen", "per_layer"?}},
     "summary": {"glue_average", "glue_tasks", "average", "tasks"},
     "feature_stats": {"effective_rank", "mean_cosine", "n", "dim"}}

Headline metrics are always the last layer's; ``per_layer`` (layer 0 = embedding output) is present
with ``layers="all"``. ``report["recipe"]`` says whether the features were PCA-whitened and why
(``recipe.resolve_recipe``: this project's checkpoints by default, ``--whiten``/``--no-whiten`` for any model).
``report["feature_stats"]`` is the geometry of the pooled last-layer features every task was probed on (before
any whitening or pooler: ``evaluation.feature_stats``), on a seeded sample of the sentences of all tasks.
A sentence-transformers directory is read through its own modules (pooling, ``Dense``, ``Normalize``), as
``SentenceTransformer(dir).encode`` reads it (``features.probe_inputs``).
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Sequence

import numpy as np

from megatron_crossbert.evaluation.embedder import Embedder, EmbedderOptions
from megatron_crossbert.evaluation.encoding import EncodingOptions
from megatron_crossbert.evaluation.encoders import Layers, Pooling, model_card
from megatron_crossbert.evaluation.feature_stats import feature_stats
from megatron_crossbert.evaluation.probing.features import (TaskFeatures, probe_inputs, sentence_rows,
                                                           task_sides)
from megatron_crossbert.evaluation.tasks.glue import available_glue_tasks, load_glue_task
from megatron_crossbert.evaluation.probing.knn_probes import knn_probe
from megatron_crossbert.evaluation.probing.linear_probes import ProbeConfig, ProbeResult, probe_features
from megatron_crossbert.evaluation.tasks.metrics import average_scores, finite_or_none
from megatron_crossbert.evaluation.tasks.data import ProbeTask, find_jsonl_tasks, load_jsonl_task
from megatron_crossbert.evaluation.recipe import PROBE_MAX_LEN, EmbeddingRecipe
from megatron_crossbert.evaluation.whitening import READOUTS, readout_of

logger = logging.getLogger(__name__)


@dataclass
class ProbeRunConfig:
    """Everything that shapes a probing run besides the model and the tasks."""

    pooling: Pooling | None = None
    """``mean`` or ``cls``; None: the model's sentence-transformers Pooling config, else mean."""
    layers: Layers = "last"
    max_len: int | None = None
    """Tokens per text; None: ``PROBE_MAX_LEN``, or the model's own limit when that is lower."""
    batch_size: int = 32
    max_train: int | None = None
    max_test: int | None = None
    seed: int = 0
    cache_dir: str | None = None
    device: str | None = None
    tokenizer_dir: str | None = None  # native checkpoints only: overrides the run config's tokenizer
    verify: str = "full"  # native checkpoints only: the checksum check (full or off)
    knn: int = 0
    """Neighbours of a k-NN probe run beside the linear one on the last layer's features; 0: none."""
    whiten: bool | None = None  # PCA-whiten the features; None: the architecture's default (recipe.py)
    both_readouts: bool = True
    """Also probe the other readout (raw: the paper's; whitened) from the same features, side by side."""
    probe: ProbeConfig = field(default_factory=ProbeConfig)
    encoding: EncodingOptions = field(default_factory=EncodingOptions)
    """How each text is encoded and which tensor is pooled (``evaluation.encoding``: a visible subset of the
    tokens at their original positions; before the final norm or a middle layer); default: all tokens, after
    the final norm."""
    token_geometry: int = 0
    """Texts (a seeded sample of the tasks' test texts) whose token states are measured for where their variance
    lies (``evaluation.token_geometry``); 0: not measured."""

    def __post_init__(self) -> None:
        """Checked here, so a Python caller of ``run_probing`` gets the same one-line refusal as the CLI."""
        if self.token_geometry < 0:
            raise ValueError(f"--token-geometry {self.token_geometry} (ProbeRunConfig.token_geometry): a number of "
                             "texts, 0 to turn it off")
        if self.knn < 0:
            raise ValueError(f"--knn {self.knn} (ProbeRunConfig.knn): the k-NN probe needs K >= 1 neighbours "
                             "(0 turns it off)")
        for name in ("batch_size", "max_len", "max_train", "max_test"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"--{name.replace('_', '-')} (ProbeRunConfig.{name}): must be at least 1, got {value}")
        if self.layers == "all" and self.encoding.hidden_state != "after_final_norm":
            raise ValueError(f"--layers all reads every layer; --hidden-state {self.encoding.hidden_state} picks one "
                             "tensor: use --layers last")


def collect_tasks(*, glue_dir: str | Path | None = None, glue_tasks: Sequence[str] | None = None,
                  jsonl: Sequence[str | Path] = (), hf_glue: Sequence[str] = ()) -> list[ProbeTask]:
    """Load tasks from a glue_data directory, JSONL task dirs and (online) HF GLUE configs.

    Without ``glue_tasks`` every GLUE task that has both train and dev files is used; a named
    task that lacks a file raises, so a typo never silently shrinks the benchmark.
    """
    tasks: list[ProbeTask] = []
    if glue_dir is not None:
        names = list(glue_tasks) if glue_tasks else available_glue_tasks(glue_dir)
        tasks += [load_glue_task(glue_dir, name) for name in names]
    for root in jsonl:
        tasks += [load_jsonl_task(path) for path in find_jsonl_tasks(root)]
    if hf_glue:
        from megatron_crossbert.evaluation.tasks.glue import load_hf_glue_task

        tasks += [load_hf_glue_task(config) for config in hf_glue]
    names = [t.spec.name for t in tasks]
    duplicates = {n for n in names if names.count(n) > 1}
    if duplicates:
        raise ValueError(f"duplicate task names {sorted(duplicates)}; rename a JSONL task directory")
    return tasks


def probe_layers(task: ProbeTask, feats: TaskFeatures, config: ProbeConfig) -> list[ProbeResult]:
    """One probe per layer of the features (index 0 .. n_layers-1)."""
    return [probe_features(task.spec, feats.train[i], task.train.labels, feats.test[i], task.test.labels, config)
            for i in range(feats.train.shape[0])]


def _scores(result: ProbeResult) -> dict:
    """A result's metrics and score with every non-finite value as None (``metrics.finite_or_none``)."""
    return {"metrics": {k: finite_or_none(v) for k, v in result.metrics.items()},
            "score": finite_or_none(result.score)}


def task_entry(task: ProbeTask, results: list[ProbeResult], with_layers: bool) -> dict:
    """The report entry for one task; headline numbers come from the last layer. A score that is not a
    number (a metric undefined on this test split) makes the task failed, with the reason."""
    last = results[-1]
    entry = {"spec": asdict(task.spec), "source": task.source, "n_train": last.n_train, "n_test": last.n_test,
             **_scores(last), "chosen": last.chosen}
    if entry["score"] is None:
        entry["failed"] = (f"{task.spec.metrics[0]} is undefined on the {last.n_test} test rows (constant gold "
                           "labels in this subsample?)")
    if with_layers:
        entry["per_layer"] = [{"layer": i, **_scores(r), "chosen": r.chosen} for i, r in enumerate(results)]
    return entry


def summarize(task_entries: dict[str, dict]) -> dict:
    """GLUE-style average over GLUE tasks present, the mean score over all tasks, and the failed tasks
    (averaged over none of them)."""
    glue = {name: e["score"] for name, e in task_entries.items() if e["spec"]["glue"]}
    every = {name: e["score"] for name, e in task_entries.items()}
    failed = [name for name, score in every.items() if score is None]
    summary = {"glue_average": average_scores(glue), "glue_tasks": sorted(glue),
               "average": average_scores(every), "tasks": list(every), "failed": failed}
    if task_entries and all("readouts" in e for e in task_entries.values()):
        summary["readouts"] = {name: {"glue_average": average_scores({n: task_entries[n]["readouts"][name] for n in glue}),
                                      "average": average_scores({n: e["readouts"][name] for n, e in task_entries.items()})}
                               for name in READOUTS}
    if task_entries and all("knn" in e for e in task_entries.values()):
        knn = {name: e["knn"]["score"] for name, e in task_entries.items()}
        summary.update(knn_glue_average=average_scores({n: knn[n] for n in glue}), knn_average=average_scores(knn))
    return summary


def probe_embedder(model: str | Path | Embedder, config: ProbeRunConfig) -> Embedder:
    """``model`` itself when it is an ``Embedder``, else the one ``config`` resolves for it (tokens per text:
    ``PROBE_MAX_LEN``, or the model's own limit when that is lower)."""
    if isinstance(model, Embedder):
        return model
    return Embedder.resolve(EmbedderOptions(
        model=str(model), cache_dir=config.cache_dir, tokenizer_dir=config.tokenizer_dir, verify=config.verify,
        device=config.device, batch_size=config.batch_size, pooling=config.pooling, max_len=config.max_len,
        default_max_len=PROBE_MAX_LEN, whiten=config.whiten, encoding=config.encoding))


def check_layers(config: ProbeRunConfig, recipe: EmbeddingRecipe) -> None:
    """``--layers all`` reads every layer's pooled features: refused when the model has a trained pooler."""
    if (recipe.dense or recipe.attention) and config.layers == "all":
        raise ValueError(f"--layers all: {recipe.source} has a trained pooler (Dense or AttentionPooling), which "
                         "reads the last layer only; probe it with --layers last")


def run_probing(model: str | Path | Embedder, tasks: Sequence[ProbeTask], config: ProbeRunConfig | None = None
                ) -> dict:
    """Probe ``model`` (a reference, or an ``Embedder`` already resolved) on ``tasks``; returns the report dict."""
    config = config or ProbeRunConfig()
    embedder = probe_embedder(model, config)
    recipe = embedder.readout
    check_layers(config, recipe)
    config = replace(config, max_len=recipe.tokens, encoding=embedder.options.encoding, pooling=recipe.pooling)
    entries, sentences = {}, []
    for task in tasks:
        task = task.subsample(config.max_train, config.max_test, config.seed)
        sides = task_sides(embedder, task, layers=config.layers)
        entries[task.spec.name] = probe_task(task, sides, config, recipe)
        sentences.append(sentence_rows(*sides))
    stats = asdict(feature_stats(np.concatenate(sentences), seed=config.seed)) if sentences else None
    report = {"model": model_card(embedder.model), "config": asdict(config), "recipe": asdict(recipe),
              "tasks": entries, "summary": summarize(entries), "feature_stats": stats}
    if config.token_geometry:
        from megatron_crossbert.evaluation.token_geometry import encoder_geometry, sample_texts

        texts = sample_texts(tasks, config.token_geometry, config.seed)
        report["token_geometry"] = asdict(encoder_geometry(embedder.encoder, texts))
    return report


def probe_task(task: ProbeTask, sides: tuple, config: ProbeRunConfig, recipe: EmbeddingRecipe) -> dict:
    """One task's report entry from its pooled features (``features.task_sides``): the recipe's readout, with
    ``both_readouts`` the other one, with ``knn`` the k-NN probe; every readout reads the same encoded sides."""
    feats = probe_inputs(task.spec, *sides, recipe.whiten, recipe)
    logger.info("probing %s (%d train / %d test, %d layer(s))", task.spec.name, len(task.train),
                len(task.test), feats.train.shape[0])
    entry = task_entry(task, probe_layers(task, feats, config.probe), config.layers == "all")
    if config.both_readouts:
        other = probe_inputs(task.spec, *sides, not recipe.whiten, recipe)
        scores = {readout_of(recipe.whiten): entry["score"],
                  readout_of(not recipe.whiten): task_entry(task, probe_layers(task, other, config.probe),
                                                            False)["score"]}
        entry["readouts"] = {name: scores[name] for name in READOUTS}
    if config.knn:
        knn = knn_probe(task.spec, feats.train[-1], task.train.labels, feats.test[-1], task.test.labels, config.knn)
        entry["knn"] = {**_scores(knn), "k": int(knn.chosen["k"])}
    return entry

