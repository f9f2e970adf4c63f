"""What the claims study trains and probes: its named plans and the runs of a plan.

The paper's claims are: better frozen representations than BERT, 2x sample efficiency from complementary
masking, and quality that rises with model size. A plan repeats every arm (``ARMS``: the MLM baseline,
CrossBERT r=0.5 single view and complementary, the fastest complementary setting) with each of its seeds,
on the same data and optimizer, plus the untrained reference and a model-size sweep.

Budgets (the types and the FLOPs arithmetic are ``study/plan.py``'s): every main
run trains to ``max(sample budget, compute budget)`` steps and saves checkpoints along the way (the LR is
constant after warm-up, so a checkpoint is the end of a shorter run). A setting cheaper per sample trains
longer to spend BERT's FLOPs; a dearer one reaches the FLOPs budget before the sample budget.

The plans differ in sizes and budgets, not in code: ``experiments/claims/plans/*.yaml``
holds the named ones (``resolve_plan``), and ``--plan FILE`` takes a user's own (a node, a cluster).
"""

from __future__ import annotations

from .study.plan import (Arm, Plan, RunSpec, arm_flops_per_sample, arm_run,
                                                        chosen_arms, compute_budget_flops, reference_run, seeded,
                                                        steps_for_flops)

CPU_KEY = "cpu_seconds:"
"""``status.json`` keys ``cpu_seconds:<stage>``: one key per stage, so a trainer and a follower that both
update the file (the pipeline merges it by key) never overwrite each other's count."""


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def seeds(plan: Plan) -> list[int | None]:
    """The plan's seeds; one unnamed seed (the plan's ``seed``) when it lists none."""
    return list(plan.seeds) or [None]


def arm_steps(plan: Plan, arm: Arm) -> int:
    """max(sample budget, the steps that spend BERT's FLOPs budget), on the checkpoint grid."""
    flops_steps = steps_for_flops(plan, compute_budget_flops(plan), arm_flops_per_sample(plan, arm))
    return max(plan.sample_steps, _round_up(flops_steps, plan.save_interval))


def main_runs(plan: Plan) -> list[RunSpec]:
    """Every chosen arm with every seed, seed by seed (a stopped study has whole seeds to compare)."""
    return [arm_run(plan, arm, seed, arm_steps(plan, arm), plan.save_interval)
            for seed in seeds(plan) for arm in chosen_arms(plan)]


def sweep_runs(plan: Plan) -> list[RunSpec]:
    """CrossBERT complementary at each sweep size and seed; the main shape reuses the main run's checkpoint."""
    return [RunSpec(seeded(f"sweep-{shape.label}", seed), "crossbert", 0.5, True, shape, plan.sweep_steps,
                    plan.sweep_steps, "sweep", seed)
            for seed in seeds(plan) for shape in plan.sweep_shapes if shape != plan.main_shape]


def reference_runs(plan: Plan) -> list[RunSpec]:
    """The untrained encoder (``study.plan.reference_run``) once per seed."""
    if not plan.reference:
        return []
    return [reference_run(plan, seed) for seed in seeds(plan)]


def all_runs(plan: Plan) -> list[RunSpec]:
    """The untrained references first (one step each: the calibration floor every comparison is read against),
    then the main runs seed by seed, then the size sweep."""
    return reference_runs(plan) + main_runs(plan) + sweep_runs(plan)
