"""The rows of the collapse ablations: which checkpoint each reads, and how.

Probe-time rows read the final checkpoints of the study's seed-1 runs of CrossBERT complementary and BERT (in the
study's work dir) four ways (``READINGS``); decoder rows read CrossBERT complementary trained again with a weaker
reconstruction decoder (``DECODERS``), in the ablations' own work dir. The 2-layer decoder row is the study's own
reading and shares its numbers. Trajectory rows read the same runs the study's way at the plan's earlier probe
steps (``plan.probe_at``), so the table says when a run's rank falls, and a decoder run still training gives an
early reading; geometry rows measure where its token states' variance lies at those steps and its last
(``evaluation.token_geometry``). A row's key names its JSON (``rows/<key>.json``) and its record.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from megatron_crossbert.evaluation.encoding import EncodingOptions

from ..plan import main_runs, reference_runs
from ..study.plan import Plan, RunSpec

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
    """One variant of CrossBERT complementary's reconstruction branch: its decoder or its loss (the RunSpec's
    decoder fields)."""

    key: str
    label: str
    layers: int = 2
    width: float = 1.0
    cross_attention_only: bool = False
    context_positions: bool = False
    """The decoder adds each visible token's position to the states it reads, so the encoder need not write
    positions into them (``model.decoder_context_position_embedding``)."""
    counterpart: str | None = None
    """The decoder row this one differs from in that one thing (the page compares their token geometry)."""
    token_loss: float = 0.0
    """Weight of the auxiliary loss decoding each visible token's own id from its encoder state
    (``model.encoder_token_loss_weight``)."""
    early: bool = False
    """Trained only to the plan's first probe step, under the whole run's schedule (``--exit-at-iteration``), and
    read there beside the study's runs read at that step: the collapse is there by then, at an eighth of the
    cost of a whole run."""
    final: bool = False
    """Also trained on to its run's end at every study seed (the early run resumed past its step), and read there
    beside the study's final checkpoints of that seed: whether what the variant changes early lasts."""


DECODERS: tuple[Decoder, ...] = (
    Decoder("dec2", "2 layers (the study's)"),
    Decoder("dec1", "1 layer", layers=1),
    Decoder("dec1-half", "1 layer at half width", layers=1, width=0.5),
    Decoder("xattn", "cross-attention only (1 layer: no self-attention, no MLP)", layers=1, cross_attention_only=True),
    Decoder("ctxpos", "2 layers that add each visible token's position to what they read", context_positions=True,
            counterpart="dec2"),
    Decoder("xattn-ctxpos", "cross-attention only, adding each visible token's position to what it reads", layers=1,
            cross_attention_only=True, context_positions=True, counterpart="xattn"),
    Decoder("tokloss", "2 layers, plus decoding each visible token's own id from its encoder state (weight 1)",
            token_loss=1.0, early=True, final=True),
)


@dataclass(frozen=True)
class Row:
    """One row of the table: a checkpoint (a study run or a decoder run) read one way."""

    key: str
    """File name of the row's JSON (``rows/<key>.json``)."""
    group: str
    """'probe-time', 'decoder' (final checkpoints), 'early' (a variant trained to the first probe step only),
    'early-reference' (a study run of another seed read at that step), 'final' (a variant at every seed, trained to
    its end), 'final-reference' (a study run of another seed, or an untrained encoder, read at its end),
    'trajectory' or 'geometry'."""
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
    step: int | None = None
    """The checkpoint read: the run's step ``step`` (a trajectory or geometry row), or None for its final one."""
    measure: str = "probe"
    """'probe': frozen GLUE, MTEB-lite and the pooled features' statistics; 'geometry': where the variance of
    the token states lies (``evaluation.token_geometry``)."""
    base: str | None = None
    """The key of the row whose run and reading this one repeats at another step or with another measure."""
    counterpart: str | None = None
    """A decoder row's ``Decoder.counterpart``."""

    @property
    def trained_here(self) -> bool:
        """Whether the row trains its own run (a decoder, early or final row other than the study's 2 layers)."""
        return self.group in ("decoder", "early", "final") and self.same_as is None

    @property
    def exit_at(self) -> int | None:
        """The step its training stops at: an early row's, else None (the run's whole schedule)."""
        return self.step if self.group == "early" else None

    @property
    def read_step(self) -> int:
        """The step of the checkpoint the row reads: ``step``, or its run's last."""
        return self.run.train_steps if self.step is None else self.step

    @property
    def with_mteb(self) -> bool:
        """Whether the row scores MTEB-lite too: the final checkpoints only (a trajectory point reads GLUE and the
        features' geometry, a minute of CPU less)."""
        return self.step is None and self.measure == "probe"


def trajectory_steps(plan: Plan, run: RunSpec) -> list[int]:
    """The plan's probe steps before ``run``'s last (none when the plan probes on a grid, not at ``probe_at``)."""
    return sorted(step for step in plan.probe_at if step < run.train_steps)


def trajectory(plan: Plan, row: Row) -> list[Row]:
    """``row``'s run read the study's way at each earlier probe step, keyed ``<row.key>@<step>``."""
    return [dataclasses.replace(row, key=f"{row.key}@{step}", group="trajectory", what=f"step {step}",
                                reading=READINGS[0], step=step, base=row.key)
            for step in trajectory_steps(plan, row.run)]


def geometry(plan: Plan, row: Row) -> list[Row]:
    """``row``'s run's token geometry at each probe step and its last, keyed ``<row.key>~geometry@<step>``."""
    return [dataclasses.replace(row, key=f"{row.key}~geometry@{step}", group="geometry", what=f"step {step}",
                                reading=READINGS[0], step=step, measure="geometry", base=row.key)
            for step in [*trajectory_steps(plan, row.run), row.run.train_steps]]


def _with_steps(plan: Plan, row: Row) -> list[Row]:
    """``row``, then its run's trajectory and geometry rows."""
    return [row, *trajectory(plan, row), *geometry(plan, row)]


def seed_run(plan: Plan, arm: str, seed: int = SEED) -> RunSpec:
    """The study's main run of ``arm`` with ``seed`` (the plan's only run when it lists no seeds)."""
    for run in main_runs(plan):
        if run.name == f"{arm}-s{seed}" or (run.name == arm and seed == SEED):
            return run
    raise ValueError(f"plan {plan.name}: no main run of {arm} with seed {seed} (main_settings, seeds)")


def study_seeds(plan: Plan) -> list[int]:
    """The seeds of the study's CrossBERT complementary runs (``[SEED]`` when the plan lists none)."""
    return list(dict.fromkeys(run.seed or SEED for run in main_runs(plan) if run.name.startswith("crossbert-compl")))


def early_step(plan: Plan) -> int | None:
    """The step early variants train to and are read at: the plan's first probe step (None when it probes on a
    grid)."""
    steps = trajectory_steps(plan, seed_run(plan, "crossbert-compl"))
    return steps[0] if steps else None


def decoder_run(plan: Plan, decoder: Decoder, seed: int = SEED) -> RunSpec:
    """CrossBERT complementary's main run of ``seed`` with ``decoder``'s reconstruction branch, under its own
    name."""
    main = seed_run(plan, "crossbert-compl", seed)
    return dataclasses.replace(main, name=f"crossbert-compl-{decoder.key}-s{seed}", decoder_layers=decoder.layers,
                               decoder_width=decoder.width, decoder_cross_attention_only=decoder.cross_attention_only,
                               decoder_context_positions=decoder.context_positions,
                               encoder_token_loss=decoder.token_loss)


def plan_rows(plan: Plan, work: Path, out: Path) -> list[Row]:
    """Every arm's probe-time rows, then the decoder rows (the 2-layer one pointing at the study's reading); each
    run's trajectory and geometry rows follow its first row."""
    rows = []
    for arm in PROBED_ARMS:
        run = seed_run(plan, arm)
        readings = [Row(f"{run.name}--r{i}", "probe-time", run.name, reading.label, run, work, reading)
                    for i, reading in enumerate(READINGS)]
        rows += [*_with_steps(plan, readings[0]), *readings[1:]]
    study = f"{seed_run(plan, 'crossbert-compl').name}--r0"
    for decoder in DECODERS:
        if decoder.key == "dec2":
            rows.append(Row("dec2", "decoder", seed_run(plan, "crossbert-compl").name, decoder.label,
                            seed_run(plan, "crossbert-compl"), work, READINGS[0], same_as=study))
        elif decoder.early or decoder.final:
            rows += _seeded(plan, decoder, out)
        else:
            run = decoder_run(plan, decoder)
            row = Row(decoder.key, "decoder", run.name, decoder.label, run, out, READINGS[0],
                      counterpart=decoder.counterpart)
            rows += _with_steps(plan, row)
    early = early_references(plan, work) if any(decoder.early for decoder in DECODERS) else []
    return rows + early + (final_references(plan, work) if any(decoder.final for decoder in DECODERS) else [])


def _seeded(plan: Plan, decoder: Decoder, out: Path) -> list[Row]:
    """A seeded variant's rows: at ``early_step`` when it is early (keyed ``<key>`` for seed 1, ``<key>-s<seed>``
    for the others; none when the plan probes on a grid), then at its run's end when it is final (keyed
    ``<key>-final[-s<seed>]``), one per study seed, each with its token geometry there."""
    step = early_step(plan)
    stages = [*([("early", decoder.key, step)] if decoder.early and step else []),
              *([("final", f"{decoder.key}-final", None)] if decoder.final else [])]
    rows = []
    for group, name, at in stages:
        for seed in study_seeds(plan):
            run = decoder_run(plan, decoder, seed)
            key = name if seed == SEED else f"{name}-s{seed}"
            row = Row(key, group, run.name, decoder.label, run, out, READINGS[0], step=at)
            end = row.read_step
            rows += [row, dataclasses.replace(row, key=f"{key}~geometry@{end}", group="geometry", what=f"step {end}",
                                              step=end, measure="geometry", base=key)]
    return rows


def early_references(plan: Plan, work: Path) -> list[Row]:
    """What each early variant is compared with at its own seed: the study's runs of seeds other than 1 read at
    the first probe step (seed 1's are its trajectory rows), and the study's untrained encoders (its one-step
    reference runs, whose features a collapse-free encoder may only match at this budget). Keyed
    ``<run>--r0@<step>``."""
    step = early_step(plan)
    if step is None:
        return []
    seeds = study_seeds(plan)
    trained = [seed_run(plan, arm, seed) for seed in seeds if seed != SEED for arm in PROBED_ARMS]
    untrained = [run for run in reference_runs(plan) if (run.seed or SEED) in seeds]
    return [Row(f"{run.name}--r0@{at}", "early-reference", run.name, f"step {at}", run, work, READINGS[0], step=at)
            for run, at in [*((run, step) for run in trained), *((run, run.train_steps) for run in untrained)]]


def final_references(plan: Plan, work: Path) -> list[Row]:
    """What each final variant is compared with at its own seed: the final checkpoints of the study's runs of
    seeds other than 1 (seed 1's are its probe-time rows) and of its untrained encoders, read the study's way with
    MTEB-lite. Keyed ``<run>--r0``."""
    seeds = study_seeds(plan)
    trained = [seed_run(plan, arm, seed) for seed in seeds if seed != SEED for arm in PROBED_ARMS]
    untrained = [run for run in reference_runs(plan) if (run.seed or SEED) in seeds]
    return [Row(f"{run.name}--r0", "final-reference", run.name, "final", run, work, READINGS[0])
            for run in [*trained, *untrained]]


def row_path(out: Path, row: Row) -> Path:
    """The row's measured numbers (one JSON), in the ablations' work dir."""
    return out / "rows" / f"{row.key}.json"
