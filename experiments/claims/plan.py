"""What the claims study trains and probes: its named plans and the runs of a plan.

The paper's claims are: better frozen representations than BERT, 2x sample efficiency from complementary
masking, and quality that rises with model size. A plan repeats every arm (``ARMS``: the MLM baseline,
CrossBERT r=0.5 single view and complementary, the fastest complementary setting) with each of its seeds,
on the same data and optimizer, plus the untrained reference and a model-size sweep.

Budgets (the types and the FLOPs arithmetic are the library's ``benchmarking.study.plan``): every main
run trains to ``max(sample budget, compute budget)`` steps and saves checkpoints along the way (the LR is
constant after warm-up, so a checkpoint is the end of a shorter run). A setting cheaper per sample trains
longer to spend BERT's FLOPs; a dearer one reaches the FLOPs budget before the sample budget.

The plans differ in sizes and budgets, not in code: the library's ``benchmarking/study/plans/*.yaml``
holds the named ones (``resolve_plan``), and ``--plan FILE`` takes a user's own (a node, a cluster).
"""

from __future__ import annotations

from megatron_crossbert.benchmarking.study.plan import (ARMS, Arm, Plan, RunSpec, compute_budget_flops, flops_per_sample,
                                                        steps_for_flops)

CPU_KEY = "cpu_seconds:"
"""``status.json`` keys ``cpu_seconds:<stage>``: one key per stage, so a trainer and a follower that both
update the file (the pipeline merges it by key) never overwrite each other's count."""


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def seeds(plan: Plan) -> list[int | None]:
    """The plan's seeds; one unnamed seed (the plan's ``seed``) when it lists none."""
    return list(plan.seeds) or [None]


def seeded(name: str, seed: int | None) -> str:
    return name if seed is None else f"{name}-s{seed}"


def arm_steps(plan: Plan, arm: Arm) -> int:
    """max(sample budget, the steps that spend BERT's FLOPs budget), on the checkpoint grid."""
    per_sample = flops_per_sample(plan, arm.arch, arm.mask_ratio, arm.complementary, plan.main_shape,
                                  arm.decoder_width, arm.decoder_layers)
    flops_steps = steps_for_flops(plan, compute_budget_flops(plan), per_sample)
    return max(plan.sample_steps, _round_up(flops_steps, plan.save_interval))


def main_runs(plan: Plan) -> list[RunSpec]:
    """Every chosen arm with every seed, seed by seed (a stopped study has whole seeds to compare)."""
    arms = [arm for arm in ARMS if arm.name in plan.main_settings]
    return [RunSpec(seeded(arm.name, seed), arm.arch, arm.mask_ratio, arm.complementary, plan.main_shape,
                    arm_steps(plan, arm), plan.save_interval, "main", seed, arm.decoder_width, arm.decoder_layers)
            for seed in seeds(plan) for arm in arms]


def sweep_runs(plan: Plan) -> list[RunSpec]:
    """CrossBERT complementary at each sweep size and seed; the main shape reuses the main run's checkpoint."""
    return [RunSpec(seeded(f"sweep-{shape.label}", seed), "crossbert", 0.5, True, shape, plan.sweep_steps,
                    plan.sweep_steps, "sweep", seed)
            for seed in seeds(plan) for shape in plan.sweep_shapes if shape != plan.main_shape]


def reference_runs(plan: Plan) -> list[RunSpec]:
    """The encoder (practically) at initialisation, once per seed: one optimizer step, then saved (the
    training CLI cannot save before the first step). The floor a pretrained encoder must beat."""
    if not plan.reference:
        return []
    return [RunSpec(seeded("init-reference", seed), "crossbert", 0.5, True, plan.main_shape, 1, 1, "reference", seed)
            for seed in seeds(plan)]


def all_runs(plan: Plan) -> list[RunSpec]:
    """Main runs first (they decide the comparisons), then the references, then the size sweep."""
    return main_runs(plan) + reference_runs(plan) + sweep_runs(plan)


def arm_of(run: RunSpec) -> str:
    """The arm (or sweep/reference name) a run repeats: its name without the seed suffix."""
    return run.name if run.seed is None else run.name[: -len(f"-s{run.seed}")]



