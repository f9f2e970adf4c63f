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
  the encoder stay low-rank; the 2-layer row is the main run's own (the first probe-time row). One more row
  keeps the 2 layers but lets them add each visible token's position to what they read
  (``model.decoder_context_position_embedding``), and the cross-attention-only decoder gets the same: with
  learned positions, the decoder's cross-attention otherwise finds a target's neighbours only through positions
  the encoder writes into its states.
- **early rows**: CrossBERT complementary trained again with one change to its loss, only to the plan's first
  probe step (under the whole run's schedule) and read there beside the study's runs read at that step: an
  auxiliary loss decoding each visible token's own id from its encoder state (``model.encoder_token_loss_weight``)
  asks whether the collapse comes from a loss that never reads the encoder's states directly, as an MLM's does.
  They run at every study seed and are paired with that seed's runs.
- **final rows**: the same early runs trained on to the end of the schedule (resumed from the early checkpoint),
  at every seed, beside the study's final checkpoints of that seed and its untrained encoders (final references,
  with MTEB-lite): whether what the change does early lasts at the plan's budget.
- **trajectory rows**: each of those runs read the study's way at the plan's earlier probe steps (GLUE and the
  features' geometry, no MTEB-lite): when a run's rank falls, and an early reading of a decoder run still
  training (``--probe-only`` measures them beside the process that trains it).
- **geometry rows**: the same runs at those steps and their last, measured for where their token states' variance
  lies (``evaluation.token_geometry``): whether the collapse is in the token states or only in their mean, and
  whether the word or the position fills the dominant direction.

The decoder runs train through the study's own training stage into ``WORK/ablations/runs`` (their configs
recorded like the study's, so a changed plan is refused), from the study's tokenizer and data. Every row is one
JSON under ``WORK/ablations/rows``: rows on disk are skipped, so rerunning the command resumes; ``results.json``
and the page's ``collapse-ablations`` section are rewritten after every row, each row with its CPU seconds.
A probe-time row whose study run has no final checkpoint in WORK waits, said in one line per run.

Several processes split the rows: each takes a row's lock file first (``claims_lock``) and passes over a row
another live process holds. With ``--records DIR`` each row is sealed there once measured (``sealed_rows``), and
a fresh work dir is seeded from the records, so the ablations span sessions whose machines keep nothing else.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from megatron_crossbert.cli.errors import cli_main
from megatron_crossbert.fsutil import atomic_write_text
from megatron_crossbert.shared_data import default_or_error

from ..cli import add_side_flags, exit_status, mteb_lite_dir, side_args, side_parser
from ..study import records as rec
from ..study.claims_lock import claim, release
from ..study.data_stage import data_prefix, tokenizer_dir
from ..study.plan import Plan, RunSpec, resolve_plan
from ..study.stopping import stop_requested, stopping
from ..study.train_stage import checkpoints, run_dir, valid_losses
from .page import SECTION
from .rows import SEED, Row, plan_rows, row_path
from .sealed_rows import restore_rows, seal_row, shared_keys


@dataclass
class Inputs:
    """The study's work dir, the probe data, and where the ablations report and seal their rows."""

    work: Path
    """The study's work dir: its tokenizer, data and seed-1 runs are read; ``ablations/`` is written."""
    glue_dir: str
    mteb_lite_dir: str | None
    """MTEB-lite folders; None: no MTEB-lite column."""
    results_md: Path | None
    """The page whose ``collapse-ablations`` section is rewritten; None: no page."""
    records: Path | None = None
    """The ablations' records (``sealed_rows``); None: the work dir is the only record."""
    train: bool = True
    """Whether this process trains the decoder runs; False (``--probe-only``): it measures the rows whose
    checkpoints exist and leaves the training to another process."""


def step_checkpoint(folder: Path, run: RunSpec, step: int) -> Path | None:
    """The run's checkpoint at ``step`` in work dir ``folder``, or None while it is not trained that far."""
    return next((path for it, path in checkpoints(folder, run) if it == step), None)


def row_checkpoint(row: Row) -> Path | None:
    """The checkpoint ``row`` reads: its step's, or its run's final one."""
    return step_checkpoint(row.run_dir, row.run, row.read_step)


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


def measure_geometry(plan: Plan, row: Row, checkpoint: Path, inputs: Inputs, glue: list) -> dict:
    """Where the variance of ``checkpoint``'s token states lies (``token_geometry``) on the same seeded sample of
    the GLUE tasks' test texts for every row."""
    from megatron_crossbert.evaluation.probing.runner import probe_embedder
    from megatron_crossbert.evaluation.token_geometry import encoder_geometry, sample_texts

    from ..study.probe_stage import probe_config

    encoder = probe_embedder(str(checkpoint), probe_config(plan, inputs.work)).encoder
    return dataclasses.asdict(encoder_geometry(encoder, sample_texts(glue, seed=SEED)))


def run_row(plan: Plan, row: Row, inputs: Inputs, out: Path, tasks: tuple[list, list]) -> bool:
    """Train the row's decoder run if it is one and this process trains (resumable), then measure the checkpoint
    the row reads; False when there is none (a stopped training)."""
    from ..study.train_stage import run_train_stage

    start, cpu = time.time(), _cpu()
    if row.trained_here and inputs.train and row_checkpoint(row) is None:
        run_train_stage(plan, [row.run], out, data_prefix(inputs.work), str(tokenizer_dir(inputs.work)), row.exit_at)
    train_cpu = _cpu() - cpu
    checkpoint = row_checkpoint(row)
    if checkpoint is None:
        return False
    print(f"[ablations] {row.key}: {row.model}, {row.what}", flush=True)
    glue, mteb = tasks
    numbers = (measure_geometry(plan, row, checkpoint, inputs, glue) if row.measure == "geometry" else
               measure(plan, row, checkpoint, inputs, glue, mteb if row.with_mteb else []))
    record = {"key": row.key, "group": row.group, "model": row.model, "what": row.what, "checkpoint": str(checkpoint),
              "steps": row.read_step, **numbers,
              "train_cpu_s": round(train_cpu, 1), "cpu_s": round(_cpu() - cpu, 1),
              "wall_s": round(time.time() - start, 1)}
    path = row_path(out, row)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(record, indent=1) + "\n")
    return True


def held_out_loss(row: Row, cache: dict) -> float | None:
    """The held-out loss its run logged at the step the row reads (reconstruction loss for CrossBERT, MLM loss for
    BERT; ``train_stage.valid_losses``), None where it logged none there; ``cache`` holds each run's losses."""
    if row.measure != "probe":
        return None
    where = (row.run_dir, row.run.name)
    if where not in cache:
        cache[where] = valid_losses(row.run_dir, row.run)
    return cache[where].get(row.read_step)


def collect(plan: Plan, rows: list[Row], out: Path) -> dict:
    """``results.json``: every row, measured (its JSON) or not yet (``done: false``), with its run's held-out loss
    at the step it reads."""
    table, losses = [], {}
    for row in rows:
        source = row_path(out, row) if row.same_as is None else out / "rows" / f"{row.same_as}.json"
        measured = json.loads(source.read_text()) if source.is_file() else {}
        done = bool(measured)  # a row that shares another's numbers is done once that row is
        if row.same_as is not None:
            measured = {**measured, "cpu_s": 0.0, "train_cpu_s": 0.0, "same_as": row.same_as}
        table.append({**measured, "key": row.key, "group": row.group, "model": row.model, "what": row.what,
                      "base": row.base, "step": row.read_step, "seed": row.run.seed,
                      "counterpart": row.counterpart, "valid_loss": held_out_loss(row, losses), "done": done})
    results = {"plan": plan.name, "seed": SEED, "rows": table,
               "written_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    atomic_write_text(out / "results.json", json.dumps(results, indent=1) + "\n")
    return results


def _keys(plan: Plan, rows: list[Row], inputs: Inputs) -> dict[str, dict]:
    """What the ablation dir's outputs depend on: each decoder run's config, and the probe settings and data."""
    from ..study.stage_keys import probe_key, train_key

    keys = {f"train:{row.run.name}": train_key(plan, row.run) for row in rows if row.trained_here}
    keys["probe"] = probe_key(dataclasses.replace(plan, jsonl_tasks=[]), inputs.glue_dir, "", inputs.mteb_lite_dir)
    return keys


def waiting(row: Row, train: bool = True) -> str | None:
    """Why a row cannot be measured here yet (its run has no checkpoint at the step it reads, and this process
    does not train it), in words; None when it can."""
    if (row.trained_here and train) or row_checkpoint(row) is not None:
        return None
    folder = run_dir(row.run_dir, row.run)
    record = rec.sealed_record(folder)
    if record is not None and rec.sealed_steps(record, row.run.train_steps) >= row.read_step:
        return (f"{folder} was restored from the records without its checkpoints: its rows wait for a work "
                "dir that holds them")
    return f"{folder} is not trained yet (no checkpoint at step {row.read_step}): its rows wait"


def _to_do(row: Row, out: Path, records: Path | None) -> bool:
    """Whether the row is still to measure, or measured here and not sealed yet."""
    if row.same_as is not None:
        return False
    return not row_path(out, row).is_file() or (records is not None and not rec.is_sealed(records, row.key))


def take_row(plan: Plan, row: Row, inputs: Inputs, out: Path, tasks: tuple[list, list]) -> bool:
    """Under the row's lock (another live process holding it: passed over), measure the row unless it is on disk,
    then seal it when there are records; True when this process measured it."""
    lock = row_path(out, row).with_suffix(".lock")
    if not claim(lock):
        return False
    try:
        measured = not row_path(out, row).is_file() and run_row(plan, row, inputs, out, tasks)
        if inputs.records is not None and row_path(out, row).is_file() and not rec.is_sealed(inputs.records, row.key):
            seal_row(inputs.records, plan, row, out)
        return measured
    finally:
        release(lock)


def measure_rows(plan: Plan, rows: list[Row], inputs: Inputs, out: Path, tasks: tuple[list, list]) -> dict:
    """Every row still to do, in order, rewriting results.json and the page after each measured one; a stop
    signal ends it after the row it stopped (``StudyStopped``). Returns the results."""
    results, waits = collect(plan, rows, out), {}
    for row in filter(lambda row: _to_do(row, out, inputs.records), rows):
        note = None if row_path(out, row).is_file() else waiting(row, inputs.train)  # measured: sealing needs none
        if note is not None:
            waits.setdefault(row.model, note)
        elif take_row(plan, row, inputs, out, tasks):
            results = collect(plan, rows, out)
            _write_page(inputs, results)
        stop = stop_requested()  # a decoder run saved and returned on the signal: its row is not measured
        if stop:
            raise stop
    for model, note in waits.items():
        print(f"[ablations] {model}: {note}", flush=True)
    return results


def run_ablations(plan: Plan, inputs: Inputs) -> dict:
    """Restore the sealed rows (with records), then measure every row not on disk yet (training the decoder runs
    first); returns the results."""
    from megatron_crossbert.evaluation.probing.runner import collect_tasks

    from ..study.probe_stage import load_mteb_lite
    from ..study.stage_keys import claim_work_dir

    out = inputs.work / "ablations"
    rows = plan_rows(plan, inputs.work, out)
    out.mkdir(parents=True, exist_ok=True)
    keys = _keys(plan, rows, inputs)
    claim_work_dir(out, keys, ["train", "probe"])
    if inputs.records is not None:
        restore_rows(inputs.records, plan, rows, out, shared_keys(keys["probe"], inputs.work))
    tasks = (collect_tasks(glue_dir=inputs.glue_dir, glue_tasks=plan.glue_tasks),
             load_mteb_lite(plan, inputs.mteb_lite_dir))
    with stopping():
        measure_rows(plan, rows, inputs, out, tasks)
    results = collect(plan, rows, out)  # with the rows other processes measured meanwhile
    _write_page(inputs, results)
    return results


def _write_page(inputs: Inputs, results: dict) -> None:
    if inputs.results_md is not None:
        from .page import write_ablations_section

        write_ablations_section(inputs.results_md, results)


def build_parser() -> argparse.ArgumentParser:
    p = side_parser("python -m experiments.claims.ablations", __doc__)
    p.add_argument("--plan", default="threshold", metavar="NAME|FILE",
                   help="the study's plan (a named plan or a YAML file; default: threshold)")
    p.add_argument("--glue-dir", default=None, help="glue_data directory (default: glue/ of the shared data folder)")
    p.add_argument("--mteb-lite-dir", default=None,
                   help="MTEB-lite folders (default: mteb_lite/ of the shared data folder; 'none': no MTEB column)")
    p.add_argument("--probe-only", action="store_true",
                   help="measure only the rows whose checkpoints exist (trajectory points of a decoder run still "
                        "training included) and train nothing: beside a process that trains the decoder runs")
    add_side_flags(p, "the study's work dir (python -m experiments.claims --plan P --work-dir W): its data and "
                      "seed-1 runs are read there, and the ablations write W/ablations/", SECTION)
    return p


@cli_main
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    side = side_args(args, f"python -m experiments.claims --plan {args.plan} --work-dir {args.work_dir} (its data "
                           "and train stages)")
    inputs = Inputs(side.work, args.glue_dir or default_or_error("--glue-dir", "GLUE folder", "glue"),
                    mteb_lite_dir(args.mteb_lite_dir), side.page, side.records, train=not args.probe_only)
    return exit_status("ablations", lambda: _summary(run_ablations(resolve_plan(args.plan), inputs), inputs))


def _summary(results: dict, inputs: Inputs) -> None:
    done = sum(row["done"] for row in results["rows"])
    print(f"[ablations] {done} of {len(results['rows'])} rows measured: {inputs.work / 'ablations' / 'results.json'}")
