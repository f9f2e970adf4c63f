"""``crossbert-pooler``'s run: check the pairs, score the frozen model, train the pooler, score it again.

One process, one backbone, one ``Embedder``: its pooled features of every benchmark text and every training
text are computed once (the disk cache and an in-process memo), the "before" scores are read from them raw and
whitened, the pooler is trained on them (``train.py``), and the "after" scores are the same features through the
trained map (``recipe.dense``, ``Embedder.variant``), which the tests show equal ``SentenceTransformer(saved
dir).encode`` to 1e-6. Attention pooling trains on the pairs' token states (``attention.py``) and, since it weighs
every text's tokens, is scored by running the saved directory's backbone again. The scores come from the
``Scorer`` the run is given (``crossbert-pooler``: MTEB's), which writes ``before/`` and ``after/``, each with its
``embedder.json``. The report has both, side by side, with CPU-seconds.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable

from megatron_crossbert.evaluation.embedder import Embedder, EmbedderOptions, embedder_of
from megatron_crossbert.evaluation.pooler.attention import train_attention_pooler
from megatron_crossbert.evaluation.pooler.leaks import check_leaks
from megatron_crossbert.evaluation.pooler.pairs import TextPairs
from megatron_crossbert.evaluation.pooler.train import PoolerConfig, save_pooler, train_linear_pooler
from megatron_crossbert.fsutil import atomic_write_text
from megatron_crossbert.outputs import require_output_dir

REPORT_JSON, REPORT_MD, MODEL_DIR = "pooler_report.json", "pooler_report.md", "model"
Scorer = Callable[[Embedder, Path, bool], dict]
"""``score(embedder, out_dir, both_readouts) -> summary``: scores an embedder on the benchmark and writes its results
into ``out_dir``; the summary as ``crossbert-mteb`` writes it (``tasks`` rows with ``task`` and ``main_score``,
``average``, ``coverage``; with ``both_readouts`` its ``readouts``). ``crossbert-pooler`` gives MTEB's
(``mteb.adapter.benchmark_scorer``), so this package imports no other task's."""


@dataclass(frozen=True)
class PoolerRunConfig:
    """One ``crossbert-pooler`` run (the frozen backbone is the ``Embedder`` it is given)."""

    benchmark_dir: str
    """MTEB task folders scored before and after, and the test sets the pairs are checked against."""
    out: str
    """Output directory: ``model/`` (the sentence-transformers dir), ``before/``, ``after/`` and the report."""
    pooler: PoolerConfig = field(default_factory=PoolerConfig)
    """How the pooler is trained."""
    allow_test_overlap: bool = False
    """Train even when pairs are test pairs (the report is then marked)."""
    overwrite: bool = False
    """Replace a report already in ``out``."""


def pair_features(embedder: Embedder, pairs: TextPairs):
    """Pooled backbone features of the anchors and of the positives (cached like any MTEB text)."""
    return (embedder.sentences(pairs.anchors, task="pooler-pairs", split="anchor"),
            embedder.sentences(pairs.positives, task="pooler-pairs", split="positive"))


def pair_states(embedder: Embedder, pairs: TextPairs):
    """Token states of the anchors and of the positives (computed once, kept for every epoch)."""
    return (embedder.token_states(pairs.anchors, desc="pooler-pairs/anchor"),
            embedder.token_states(pairs.positives, desc="pooler-pairs/positive"))


def train_on_pairs(embedder, pairs: TextPairs, config: PoolerConfig):
    """The trained pooling module (None: the backbone's own pooling) and map, on ``embedder``'s features of
    ``pairs`` (pooled, or token states for attention pooling), and the log (feature seconds too). ``embedder``: an
    ``Embedder``, or what reads through one (an mteb encoder)."""
    embedder = embedder_of(embedder)
    if config.pooling == "attention":
        (anchors, positives), seconds = timed(pair_states, embedder, pairs)
        attention, layer, log = train_attention_pooler(anchors, positives, config)
        return attention, layer, {**log, "pair_features": seconds}
    (anchors, positives), seconds = timed(pair_features, embedder, pairs)
    layer, log = train_linear_pooler(anchors, positives, config)
    return None, layer, {**log, "pair_features": seconds}


def after_embedder(before: Embedder, saved: Path, dense_dir: Path, pooling: str) -> Embedder:
    """What scores the saved directory: ``before``'s cached pooled features through the Dense module, or, for
    attention pooling (which weighs each text's tokens), the saved directory itself, its backbone run again."""
    if pooling != "attention":
        return pooled_variant(before, dense_dir)
    return Embedder.resolve(replace(before.options, model=str(saved), whiten=False))


def pooled_variant(embedder, dense_dir: str | Path):
    """``embedder``'s backbone and features read through the saved Dense module, raw (the pooler is the readout);
    ``embedder``: an ``Embedder`` or an mteb encoder, and the same kind comes back."""
    recipe = replace(embedder.recipe, dense=(str(dense_dir),), whiten=False, whiten_source="pooler")
    return embedder.variant(recipe, name=f"{embedder.name}+pooler")


def timed(fn, *args, **kwargs):
    """``fn``'s result and its wall and CPU seconds."""
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn(*args, **kwargs)
    return out, {"wall_s": round(time.perf_counter() - wall, 2), "cpu_s": round(time.process_time() - cpu, 2)}


def run_pooler(config: PoolerRunConfig, pairs: TextPairs, embedder: Embedder | EmbedderOptions,
               score: Scorer) -> dict:
    """Leak check, the benchmark before (raw and whitened), training, save, the benchmark after; writes and returns
    the report. ``embedder``: the frozen backbone, or the options it is resolved from once ``out`` and the pairs
    are checked."""
    out = require_output_dir(config.out, "--out")
    if (out / REPORT_JSON).exists() and not config.overwrite:
        raise FileExistsError(f"{out / REPORT_JSON} exists: pass --overwrite, or choose another --out")
    leaks = check_leaks(pairs, config.benchmark_dir, allow=config.allow_test_overlap)
    before = embedder if isinstance(embedder, Embedder) else Embedder.resolve(embedder)
    before_summary, t_before = timed(score, before, out / "before", True)
    attention, layer, log = train_on_pairs(before, pairs, config.pooler)
    dense_dir = save_pooler(before.model.hf_path, before.readout, layer, out / MODEL_DIR, attention)
    after = after_embedder(before, out / MODEL_DIR, dense_dir, config.pooler.pooling)
    after_summary, t_after = timed(score, after, out / "after", False)
    report = {"config": {"model": before.options.model, **asdict(config)},
              "pairs": {"source": pairs.source, "count": len(pairs)},
              "leaks": leaks.as_dict(), "training": log, "saved": str(out / MODEL_DIR),
              "before": before_summary, "after": after_summary,
              "timing": {"mteb_before": t_before, "pair_features": log["pair_features"], "mteb_after": t_after}}
    atomic_write_text(out / REPORT_JSON, json.dumps(report, indent=2, default=str, allow_nan=False) + "\n")
    atomic_write_text(out / REPORT_MD, report_markdown(report))
    return report


def report_markdown(report: dict) -> str:
    """Per task: before (raw, whitened) and after the pooler, the averages, the leak check and the timing."""
    readouts, after = report["before"]["readouts"], {r["task"]: r["main_score"] for r in report["after"]["tasks"]}
    fmt = lambda v: "–" if v is None else f"{v:.2f}"  # noqa: E731
    leaks = report["leaks"]
    mark = " **(trained on test pairs: --allow-test-overlap)**" if leaks["marked"] else ""
    lines = [f"# Pooler on a frozen backbone: `{report['config']['model']}`{mark}", "",
             f"Pooler: {report['config']['pooler']['pooling']} pooling + a linear map (start: "
             f"{report['config']['pooler']['init']}).", "",
             f"Pairs: {report['pairs']['count']} ({report['pairs']['source']}); test pairs among them: "
             f"{leaks['leaking_pairs']}; training texts found in test sets: "
             f"{sum(leaks['texts'].values())} ({', '.join(f'{k} {v}' for k, v in leaks['texts'].items() if v) or 'none'})",
             "", "| task | frozen, raw | frozen, whitened | pooler trained |", "|---|---:|---:|---:|"]
    for task, scores in readouts["tasks"].items():
        lines.append(f"| {task} | {fmt(scores['raw'])} | {fmt(scores['whitened'])} | {fmt(after.get(task))} |")
    lines.append(f"| **average** | {fmt(readouts['average'].get('raw'))} | {fmt(readouts['average'].get('whitened'))} "
                 f"| {fmt(report['after']['average'])} |")
    cov, cov_after = readouts.get("coverage") or {}, report["after"].get("coverage")
    if cov_after:
        lines.append(f"| {cov_after['benchmark']} ({len(cov_after['tasks'])} of {cov_after['of']}) | "
                     f"{fmt((cov.get('raw') or {}).get('average'))} | {fmt((cov.get('whitened') or {}).get('average'))} "
                     f"| {fmt(cov_after['average'])} |")
    t, log = report["timing"], report["training"]
    loader = ("SentenceTransformer(dir, trust_remote_code=True)" if report["config"]["pooler"]["pooling"] == "attention"
              else "SentenceTransformer(dir)")
    lines += ["", f"- training: {log['steps']} steps, MNRL loss per epoch "
                  f"{', '.join(f'{x:.3f}' for x in log['loss_per_epoch'])}; {log['cpu_s']} CPU-s ({log['wall_s']} s wall)",
              f"- MTEB before (both readouts): {t['mteb_before']['cpu_s']} CPU-s ({t['mteb_before']['wall_s']} s wall); "
              f"pair features: {t['pair_features']['cpu_s']} CPU-s; MTEB after: {t['mteb_after']['cpu_s']} CPU-s",
              f"- saved: `{report['saved']}` ({loader} and crossbert-mteb load it)"]
    return "\n".join(lines) + "\n"
