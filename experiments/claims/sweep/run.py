"""``python -m experiments.claims.sweep``: the recipe sweep, short runs that choose a study's recipe.

Before a long study spends CPU-hours, each arm is trained briefly under a few recipes (learning rate, global
batch, LR schedule, dropout, warm-up, BERT's selection rate, sequence length), and every run's held-out loss is
read against two floors: the corpus's unigram entropy under the study's tokenizer (what a model that ignores
context scores) and the loss of the untrained model. A recipe that does not fall well below the unigram
entropy has not learned from context, whatever its probes say.

A sweep file (``sweeps/*.yaml``) names the base plan, whose work dir holds the tokenizer and the indexed
dataset (``--stages data``), the training tokens of every row, and the rows: an arm of ``study.plan.ARMS`` and
the plan fields the row changes. Every row is one ``crossbert-pretrain`` run through the study's own stages,
so a row's config is exactly the plan's with its changes; runs already finished are skipped and the rows'
configs are recorded like the study's (``stage_keys``), so rerunning the command resumes and a changed row is
refused. ``results.json`` and the page's ``recipe-sweep`` section are rewritten after every run.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
import typing
from dataclasses import dataclass, field
from pathlib import Path

from megatron_crossbert.cli.errors import cli_main
from megatron_crossbert.fsutil import atomic_write_text

from ..cli import add_side_flags, exit_status, side_args, side_parser
from ..study.data_stage import data_prefix, tokenizer_dir
from ..study.floors import unigram_entropy
from ..study.plan import ARMS, Plan, RunSpec, arm_run, resolve_plan
from ..study.stage_keys import claim_work_dir, train_key
from ..study.stopping import stop_requested, stopping
from ..study import records as rec
from ..study.train_stage import is_complete, run_dir, run_train_stage, valid_losses
from .page import SECTION, write_sweep_section

SWEEP_DIR = Path(__file__).parent.parent / "sweeps"
CHECKPOINTS = 4
"""Evaluations (and checkpoints) per row: the held-out loss at each quarter of the run."""


@dataclass(frozen=True)
class Row:
    """One recipe: an arm and the plan fields it changes."""

    name: str
    arm: str
    changes: dict = field(default_factory=dict)
    """Plan fields and their values for this row (``tokens`` too: the row's own training tokens)."""


@dataclass(frozen=True)
class Sweep:
    """A base plan, a token budget per run, the rows, and the seed every row shares."""

    name: str
    plan: str
    """The base plan (a name or a file): its data stage's work dir is the sweep's data."""
    tokens: int
    """Training tokens of a row (steps = tokens / (global_batch x seq_length), rounded to CHECKPOINTS)."""
    rows: list[Row]
    base: dict = field(default_factory=dict)
    """Plan fields every row starts from (the rows' own changes win)."""
    seed: int = 1


def load_sweep(value: str) -> Sweep:
    """A sweep file (by name under ``sweeps/`` or a path); every row's changes type-checked as plan fields."""
    path = SWEEP_DIR / f"{value}.yaml" if (SWEEP_DIR / f"{value}.yaml").is_file() else Path(value)
    if not path.is_file():
        names = ", ".join(sorted(p.stem for p in SWEEP_DIR.glob("*.yaml")))
        raise FileNotFoundError(f"--sweep {value}: neither a named sweep ({names}) nor a YAML file")
    from megatron_crossbert.config.run import parse_yaml

    raw = parse_yaml(path.read_text(), str(path))
    unknown = sorted(set(raw) - {"name", "plan", "tokens", "rows", "base", "seed"})
    if unknown:
        raise ValueError(f"{path}: unknown sweep key(s) {unknown}")
    arms = [arm.name for arm in ARMS]
    rows = []
    for item in raw.get("rows") or []:
        item = dict(item)
        name, arm = str(item.pop("name", "")), item.pop("arm", None)
        if not name or arm not in arms:
            raise ValueError(f"{path}: every row needs a name and an arm of {arms}, got {name!r}, {arm!r}")
        rows.append(Row(name, arm, _typed_changes(item, path, name)))
    if len({row.name for row in rows}) != len(rows):
        raise ValueError(f"{path}: a row name is used twice")
    return Sweep(name=str(raw.get("name", path.stem)), plan=str(raw["plan"]), tokens=int(raw["tokens"]), rows=rows,
                 base=_typed_changes(dict(raw.get("base") or {}), path, "base"), seed=int(raw.get("seed", 1)))


def _typed_changes(changes: dict, path: Path, where: str) -> dict:
    """``changes`` as plan fields of their declared types (``tokens`` an int), or one error naming the row."""
    from megatron_crossbert.config.checks import coerce

    hints = typing.get_type_hints(Plan) | {"tokens": int}
    typed = {}
    for key, value in changes.items():
        if key not in hints or key in ("name", "main_shape", "sweep_shapes"):
            raise ValueError(f"{path}: {where}: {key!r} is not a plan field a row can change")
        try:
            typed[key] = coerce(value, hints[key], f"{where}.{key}")
        except (TypeError, ValueError) as err:
            raise ValueError(f"{path}: {err}") from None
    return typed


def row_plan(base: Plan, sweep: Sweep, row: Row) -> tuple[Plan, int]:
    """The row's plan (base plan, the sweep's base, the row's changes) and its steps."""
    changes = {**sweep.base, **row.changes}
    tokens = changes.pop("tokens", sweep.tokens)
    plan = dataclasses.replace(base, **changes)
    steps = max(CHECKPOINTS, round(tokens / (plan.global_batch * plan.seq_length) / CHECKPOINTS) * CHECKPOINTS)
    interval = steps // CHECKPOINTS
    return dataclasses.replace(plan, sample_steps=steps, save_interval=interval, eval_iters=plan.eval_iters or 16), \
        steps


def row_run(plan: Plan, sweep: Sweep, row: Row, steps: int) -> RunSpec:
    arm = next(arm for arm in ARMS if arm.name == row.arm)
    return dataclasses.replace(arm_run(plan, arm, sweep.seed, steps, plan.save_interval), name=row.name)


def untrained_run(plan: Plan, sweep: Sweep, arm_name: str) -> tuple[Plan, RunSpec]:
    """The arm at initialisation (one step at the warm-up's first LR), evaluated after that step."""
    one = dataclasses.replace(plan, save_interval=1, sample_steps=1)
    arm = next(arm for arm in ARMS if arm.name == arm_name)
    return one, dataclasses.replace(arm_run(one, arm, sweep.seed, 1, 1), name=f"untrained-{arm_name}")


def sweep_runs(base: Plan, sweep: Sweep) -> list[tuple[Row | None, Plan, RunSpec]]:
    """Every arm's untrained run first (the floors), then the rows in file order."""
    runs: list[tuple[Row | None, Plan, RunSpec]] = []
    for arm in dict.fromkeys(row.arm for row in sweep.rows):
        first = next(row for row in sweep.rows if row.arm == arm)
        runs.append((None, *untrained_run(row_plan(base, sweep, first)[0], sweep, arm)))
    for row in sweep.rows:
        plan, steps = row_plan(base, sweep, row)
        runs.append((row, plan, row_run(plan, sweep, row, steps)))
    return runs


def run_sweep(sweep: Sweep, data_work_dir: Path, out: Path, page: Path | None, records: Path | None = None) -> dict:
    """Train every run not yet finished (resumable), rewriting results.json and the page after each; with
    ``records``, each finished run is sealed there and a fresh ``out`` is seeded from it (``study.records``)."""
    base = resolve_plan(sweep.plan)
    runs = sweep_runs(base, sweep)
    out.mkdir(parents=True, exist_ok=True)
    claim_work_dir(out, {f"train:{run.name}": train_key(plan, run) for _, plan, run in runs}, ["train"])
    prefix, tokenizer = data_prefix(data_work_dir), str(tokenizer_dir(data_work_dir))
    floor = unigram_entropy(prefix, tokenizer)
    if records is not None:
        _restore_rows(records, runs, out, rec.data_identity(tokenizer_dir(data_work_dir), prefix))
    with stopping():
        for row, plan, run in runs:
            if not is_complete(out, run):
                start, cpu = time.time(), _children_cpu()
                run_train_stage(plan, [run], out, prefix, tokenizer)
                _record_cost(out, run.name, time.time() - start, _children_cpu() - cpu)
            stop = stop_requested()  # the run saved and returned on the signal: it is not complete
            if stop:
                raise stop
            if records is not None and is_complete(out, run) and not rec.is_sealed(records, run.name):
                rec.seal(records, run.name, train_key(plan, run), valid_losses(out, run), [], [],
                         cost=_costs(out).get(run.name, {}))
            results = collect(sweep, runs, out, floor)
            if page is not None:
                write_sweep_section(page, results)
    return results


def _restore_rows(records: Path, runs: list, out: Path, identity: dict) -> None:
    """Seed ``out`` with the sealed rows of ``records`` (their losses and costs), the data checked first."""
    rec.check_keys(records, identity)
    costs = _costs(out)
    for _, plan, run in runs:
        record = rec.restore(records, run.name, train_key(plan, run), run_dir(out, run), out / "probes" / run.name)
        if record is not None and run.name not in costs:
            spent = rec.cost(record)
            _record_cost(out, run.name, spent.get("wall_s", 0.0), spent.get("cpu_s", 0.0))
            costs = _costs(out)


def _costs(out: Path) -> dict:
    path = out / "costs.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def _children_cpu() -> float:
    times = os.times()
    return times.children_user + times.children_system


def _record_cost(out: Path, name: str, wall: float, cpu: float) -> None:
    path = out / "costs.json"
    costs = json.loads(path.read_text()) if path.is_file() else {}
    costs[name] = {"wall_s": round(wall, 1), "cpu_s": round(cpu, 1)}
    atomic_write_text(path, json.dumps(costs, indent=1, sort_keys=True) + "\n")


def collect(sweep: Sweep, runs: list, out: Path, floor: dict) -> dict:
    """``results.json``: the floors and, per run, its settings, steps, tokens, cost and held-out losses."""
    costs = _costs(out)
    rows = []
    for row, plan, run in runs:
        losses = valid_losses(out, run)
        rows.append({"name": run.name, "arm": row.arm if row else run.name.removeprefix("untrained-"),
                     "untrained": row is None, "changes": {} if row is None else {**sweep.base, **row.changes},
                     "steps": run.train_steps, "tokens": run.train_steps * plan.global_batch * plan.seq_length,
                     "recipe": _recipe(plan), "losses": {str(k): v for k, v in sorted(losses.items())},
                     "final_loss": losses.get(run.train_steps), "done": is_complete(out, run),
                     **costs.get(run.name, {})})
    results = {"sweep": sweep.name, "plan": sweep.plan, "seed": sweep.seed, "unigram": floor, "rows": rows,
               "written_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    atomic_write_text(out / "results.json", json.dumps(results, indent=1) + "\n")
    return results


RECIPE_FIELDS = ("lr", "lr_decay_style", "warmup", "global_batch", "seq_length", "hidden_dropout",
                 "attention_dropout", "bert_mask_prob", "weight_decay")


def _recipe(plan: Plan) -> dict:
    return {name: getattr(plan, name) for name in RECIPE_FIELDS}


def build_parser() -> argparse.ArgumentParser:
    p = side_parser("python -m experiments.claims.sweep", __doc__)
    p.add_argument("--sweep", default="threshold", metavar="NAME|FILE",
                   help="a sweep under experiments/claims/sweeps/ or a YAML file (default: threshold)")
    add_side_flags(p, "the base plan's study work dir, after its data stage (python -m experiments.claims --plan P "
                      "--stages data): the sweep reads its tokenizer and data and writes sweep/<name>/", SECTION)
    return p


@cli_main
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    sweep = load_sweep(args.sweep)
    side = side_args(args, f"python -m experiments.claims --plan {sweep.plan} --work-dir {args.work_dir} "
                           "--stages data")
    return exit_status("sweep", lambda: run_sweep(sweep, side.work, side.work / "sweep" / sweep.name, side.page,
                                                  side.records))
