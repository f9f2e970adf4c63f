"""``python -m experiments.claims.ablations``: why CrossBERT's raw frozen features collapse, row by row.

CrossBERT's mean-pooled frozen features sit on a few directions (a low effective rank, a high mean pairwise
cosine), so its raw probe scores fall far below BERT's while its whitened ones do not. Each row here changes one
thing and reports frozen GLUE (raw and whitened readouts), MTEB-lite (raw) and the pooled features' effective
rank and mean pairwise cosine (``megatron_crossbert.evaluation.feature_stats``):

- **probe-time rows**, on the final checkpoints of the study's seed-1 runs of CrossBERT complementary and BERT
  (read from the study's work dir, as its probe stage reads them): every token visible (the study's reading)
  against a seeded random half of each text's tokens at their original positions (CrossBERT's training input);
  the encoder's output after its final norm against the one before it and a middle layer's
  (``evaluation.encoding.EncodingOptions``). BERT gets the same rows, so the comparison is like for like.
- **decoder rows**: CrossBERT complementary trained again, seed 1, at the main run's steps, with a weaker
  reconstruction decoder (1 layer; 1 layer at half width; one layer of cross-attention alone,
  ``model.decoder_cross_attention_only``). A decoder strong enough to reconstruct from a few directions lets
  the encoder stay low-rank; the 2-layer row is the main run's own (the first probe-time row).

The decoder runs train through the study's own training stage into ``WORK/ablations/runs`` (their configs
recorded like the study's, so a changed plan is refused), from the study's tokenizer and data. Every row is one
JSON under ``WORK/ablations/rows``: rows on disk are skipped, so rerunning the command resumes; ``results.json``
and the page's ``collapse-ablations`` section are rewritten after every row, each row with its CPU seconds.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from megatron_crossbert.cli.errors import add_debug_flag, cli_main
from megatron_crossbert.evaluation.encoding import EncodingOptions
from megatron_crossbert.fsutil import atomic_write_text
from megatron_crossbert.platform.threads import limit_threads, thread_count
from megatron_crossbert.shared_data import default_or_error

from ..plan import main_runs
from ..study.data_stage import data_prefix, tokenizer_dir
from ..study.plan import Plan, RunSpec, resolve_plan
from ..study.stopping import StudyStopped, stopping

SEED = 1
"""The study seed whose runs are read, and the seed of the decoder runs."""
VISIBLE_SEED = 1
"""Seed of the visible subsets of the probe-time visibility rows."""
PROBED_ARMS = ("crossbert-compl", "bert")
"""The study arms whose final checkpoints get the probe-time rows."""


@dataclass(frozen=True)
class Reading:
    """One probe-time reading of a checkpoint: a label and how the encoder is run."""

    label: str
    encoding: EncodingOptions = field(default_factory=EncodingOptions)


READINGS: tuple[Reading, ...] = (
    Reading("all tokens, after final norm (the study's)"),
    Reading("50% visible at original positions, after final norm", EncodingOptions(0.5, seed=VISIBLE_SEED)),
    Reading("all tokens, before final norm", EncodingOptions(hidden_state="before_final_norm")),
    Reading("all tokens, middle layer", EncodingOptions(hidden_state="middle_layer")),
)


@dataclass(frozen=True)
class Decoder:
    """One decoder variant of CrossBERT complementary (its RunSpec's decoder fields)."""

    key: str
    label: str
    layers: int = 2
    width: float = 1.0
    cross_attention_only: bool = False


DECODERS: tuple[Decoder, ...] = (
    Decoder("dec2", "2 layers (the study's)"),
    Decoder("dec1", "1 layer", layers=1),
    Decoder("dec1-half", "1 layer at half width", layers=1, width=0.5),
    Decoder("xattn", "cross-attention only (1 layer: no self-attention, no MLP)", layers=1, cross_attention_only=True),
)


@dataclass(frozen=True)
class Row:
    """One row of the table: a checkpoint (a study run or a decoder run) read one way."""

    key: str
    """File name of the row's JSON (``rows/<key>.json``)."""
    group: str
    """'probe-time' or 'decoder'."""
    model: str
    """The run read (its name)."""
    what: str
    """What the row changes, in words."""
    run: RunSpec
    run_dir: Path
    """The work dir whose ``runs/<run.name>`` holds the checkpoints."""
    reading: Reading
    same_as: str | None = None
    """The key of the row whose numbers this one shares (the 2-layer decoder row is the study's reading)."""


def seed_run(plan: Plan, arm: str) -> RunSpec:
    """The study's main run of ``arm`` with seed 1 (the plan's only run when it lists no seeds)."""
    for run in main_runs(plan):
        if run.name in (f"{arm}-s{SEED}", arm):
            return run
    raise ValueError(f"plan {plan.name}: no main run of {arm} with seed {SEED} (main_settings, seeds)")


def decoder_run(plan: Plan, decoder: Decoder) -> RunSpec:
    """CrossBERT complementary's seed-1 main run with ``decoder``'s reconstruction decoder, under its own name."""
    main = seed_run(plan, "crossbert-compl")
    return dataclasses.replace(main, name=f"crossbert-compl-{decoder.key}-s{SEED}", decoder_layers=decoder.layers,
                               decoder_width=decoder.width, decoder_cross_attention_only=decoder.cross_attention_only)


def plan_rows(plan: Plan, work: Path, out: Path) -> list[Row]:
    """Every arm's probe-time rows, then the decoder rows (the 2-layer one pointing at the study's reading)."""
    rows = []
    for arm in PROBED_ARMS:
        run = seed_run(plan, arm)
        rows += [Row(f"{run.name}--r{i}", "probe-time", run.name, reading.label, run, work, reading)
                 for i, reading in enumerate(READINGS)]
    study = f"{seed_run(plan, 'crossbert-compl').name}--r0"
    for decoder in DECODERS:
        if decoder.key == "dec2":
            rows.append(Row("dec2", "decoder", seed_run(plan, "crossbert-compl").name, decoder.label,
                            seed_run(plan, "crossbert-compl"), work, READINGS[0], same_as=study))
        else:
            run = decoder_run(plan, decoder)
            rows.append(Row(decoder.key, "decoder", run.name, decoder.label, run, out, READINGS[0]))
    return rows


@dataclass
class Inputs:
    """The study's work dir and the probe data."""

    work: Path
    """The study's work dir: its tokenizer, data and seed-1 runs are read; ``ablations/`` is written."""
    glue_dir: str
    mteb_lite_dir: str | None
    """MTEB-lite folders; None: no MTEB-lite column."""
    results_md: Path | None
    """The page whose ``collapse-ablations`` section is rewritten; None: no page."""


def final_checkpoint(run_dir: Path, run: RunSpec) -> Path | None:
    """The run's checkpoint at its last step, or None while it has not been trained that far."""
    from ..study.train_stage import checkpoints

    return next((path for it, path in checkpoints(run_dir, run) if it == run.train_steps), None)


def _cpu() -> float:
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def measure(plan: Plan, row: Row, checkpoint: Path, inputs: Inputs, glue: list, mteb: list) -> dict:
    """Frozen GLUE (raw and whitened), MTEB-lite raw and the feature statistics of ``checkpoint`` read as
    ``row.reading`` says."""
    from megatron_crossbert.evaluation.mteb.adapter import build_mteb_encoder, evaluate_mteb
    from megatron_crossbert.evaluation.probing.runner import run_probing

    from ..study.probe_stage import probe_config

    encoding = row.reading.encoding
    config = dataclasses.replace(probe_config(plan, inputs.work), knn=0, encoding=encoding)
    report = run_probing(str(checkpoint), glue, config)
    readouts = report["summary"].get("readouts", {})
    mteb_raw = None
    if mteb:
        wrapper = build_mteb_encoder(str(checkpoint), cache_dir=config.cache_dir, device=config.device, whiten=False,
                                     encoding=encoding)
        mteb_raw = evaluate_mteb(wrapper, mteb, raise_error=True)[0]["average"]
    return {"glue_raw": readouts.get("raw", {}).get("glue_average"),
            "glue_whitened": readouts.get("whitened", {}).get("glue_average"), "mteb_raw": mteb_raw,
            **report["feature_stats"], "encoding": dataclasses.asdict(encoding),
            "tasks": {name: entry.get("readouts") for name, entry in report["tasks"].items()}}


def row_path(out: Path, row: Row) -> Path:
    return out / "rows" / f"{row.key}.json"


def run_row(plan: Plan, row: Row, inputs: Inputs, out: Path, tasks: tuple[list, list]) -> bool:
    """Train the row's decoder run if it is one (resumable), then measure its final checkpoint; False when the
    study has not trained the checkpoint a probe-time row reads yet."""
    from ..study.train_stage import run_train_stage

    start, cpu = time.time(), _cpu()
    if row.run_dir == out:
        run_train_stage(plan, [row.run], out, data_prefix(inputs.work), str(tokenizer_dir(inputs.work)))
    train_cpu = _cpu() - cpu
    checkpoint = final_checkpoint(row.run_dir, row.run)
    if checkpoint is None:
        print(f"[ablations] {row.key}: {row.run_dir / 'runs' / row.run.name} has no checkpoint at step "
              f"{row.run.train_steps} yet (train the study first); skipped", flush=True)
        return False
    print(f"[ablations] {row.key}: {row.what}", flush=True)
    record = {"key": row.key, "group": row.group, "model": row.model, "what": row.what, "checkpoint": str(checkpoint),
              "steps": row.run.train_steps, **measure(plan, row, checkpoint, inputs, *tasks),
              "train_cpu_s": round(train_cpu, 1), "cpu_s": round(_cpu() - cpu, 1),
              "wall_s": round(time.time() - start, 1)}
    path = row_path(out, row)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(record, indent=1) + "\n")
    return True


def collect(plan: Plan, rows: list[Row], out: Path) -> dict:
    """``results.json``: every row, measured (its JSON) or not yet (``done: false``)."""
    table = []
    for row in rows:
        source = row_path(out, row) if row.same_as is None else out / "rows" / f"{row.same_as}.json"
        measured = json.loads(source.read_text()) if source.is_file() else {}
        if row.same_as is not None:
            measured = {**measured, "cpu_s": 0.0, "train_cpu_s": 0.0, "same_as": row.same_as}
        table.append({**measured, "key": row.key, "group": row.group, "model": row.model, "what": row.what,
                      "done": bool(measured)})
    results = {"plan": plan.name, "seed": SEED, "rows": table,
               "written_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    atomic_write_text(out / "results.json", json.dumps(results, indent=1) + "\n")
    return results


def _keys(plan: Plan, rows: list[Row], inputs: Inputs) -> dict[str, dict]:
    """What the ablation dir's outputs depend on: each decoder run's config, and the probe settings and data."""
    from ..study.stage_keys import probe_key, train_key

    keys = {f"train:{row.run.name}": train_key(plan, row.run) for row in rows if row.run_dir != inputs.work}
    keys["probe"] = probe_key(dataclasses.replace(plan, jsonl_tasks=[]), inputs.glue_dir, "", inputs.mteb_lite_dir)
    return keys


def run_ablations(plan: Plan, inputs: Inputs) -> dict:
    """Measure every row not on disk yet (training the decoder runs first), rewriting results.json and the page
    after each; returns the results."""
    from megatron_crossbert.evaluation.probing.runner import collect_tasks

    from ..study.probe_stage import load_mteb_lite
    from ..study.stage_keys import claim_work_dir

    out = inputs.work / "ablations"
    rows = plan_rows(plan, inputs.work, out)
    out.mkdir(parents=True, exist_ok=True)
    claim_work_dir(out, _keys(plan, rows, inputs), ["train", "probe"])
    tasks = (collect_tasks(glue_dir=inputs.glue_dir, glue_tasks=plan.glue_tasks),
             load_mteb_lite(plan, inputs.mteb_lite_dir))
    results = collect(plan, rows, out)
    with stopping():
        for row in rows:
            if row.same_as is None and not row_path(out, row).is_file() and run_row(plan, row, inputs, out, tasks):
                results = collect(plan, rows, out)
                _write_page(inputs, results)
    _write_page(inputs, results)
    return results


def _write_page(inputs: Inputs, results: dict) -> None:
    if inputs.results_md is not None:
        from .page import write_ablations_section

        write_ablations_section(inputs.results_md, results)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m experiments.claims.ablations", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--plan", default="threshold", metavar="NAME|FILE",
                   help="the study's plan (a named plan or a YAML file; default: threshold)")
    p.add_argument("--work-dir", required=True,
                   help="the study's work dir (python -m experiments.claims --plan P --work-dir W): its seed-1 runs "
                        "are read there, and the ablations write W/ablations/")
    p.add_argument("--glue-dir", default=None, help="glue_data directory (default: glue/ of the shared data folder)")
    p.add_argument("--mteb-lite-dir", default=None,
                   help="MTEB-lite folders (default: mteb_lite/ of the shared data folder; 'none': no MTEB column)")
    p.add_argument("--results-md", default="docs/results.md",
                   help="page whose collapse-ablations section is rewritten after every row ('none': no page)")
    p.add_argument("--threads", type=thread_count, default=None, help="CPU threads of this process and its runs")
    add_debug_flag(p)
    return p


@cli_main
def main(argv: list[str] | None = None) -> int:
    from ..__main__ import _mteb_lite_dir

    args = build_parser().parse_args(argv)
    limit_threads(args.threads)
    os.environ.setdefault("TQDM_DISABLE", "1")
    plan, work = resolve_plan(args.plan), Path(args.work_dir)
    if not Path(data_prefix(work) + ".bin").is_file():
        raise FileNotFoundError(f"--work-dir {work}: no indexed dataset; run python -m experiments.claims --plan "
                                f"{args.plan} --work-dir {work} first (its data and train stages)")
    inputs = Inputs(work, args.glue_dir or default_or_error("--glue-dir", "GLUE folder", "glue"),
                    _mteb_lite_dir(args.mteb_lite_dir),
                    None if args.results_md.lower() == "none" else Path(args.results_md))
    try:
        results = run_ablations(plan, inputs)
    except StudyStopped as stop:
        print(f"[ablations] {stop}: rerun the same command to resume", file=sys.stderr, flush=True)
        return 128 + stop.signum
    done = sum(row["done"] for row in results["rows"])
    print(f"[ablations] {done} of {len(results['rows'])} rows measured: {inputs.work / 'ablations' / 'results.json'}")
    return 0
