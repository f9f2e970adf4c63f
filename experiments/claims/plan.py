"""What the sample-efficiency experiment trains and probes (a small-scale replication): its plans and runs.

The paper's claim is "2x sample efficiency from complementary masking". At the scale two shared
CPU cores allow (~35 minutes for everything) we can only test its *direction* on tiny models:
same encoder for all three models, the same data order, the same optimizer and LR schedule.

Budgets (the types and the FLOPs arithmetic are the library's ``benchmarking.study.plan``): every
main run trains to ``max(sample budget, compute budget)`` steps and saves checkpoints along the way.
A CrossBERT setting that is cheaper per sample trains longer to spend BERT's FLOPs; one that is
dearer reaches the FLOPs budget before the sample budget.

The model-size sweep trains CrossBERT (complementary, r=0.5) at three sizes on the same samples
and checks that frozen-probe quality rises with size.
"""

from __future__ import annotations

from megatron_crossbert.benchmarking.study.plan import (MAIN_SETTINGS, ModelShape, Plan, RunSpec, compute_budget_flops,
                                                        flops_per_sample, reference_runs, steps_for_flops)

PLANS: dict[str, Plan] = {
    "smoke": Plan(name="smoke", vocab_size=512, tokenizer_docs=500, corpus_bytes=100_000, seq_length=32,
                  global_batch=4, micro_batch=4, sample_steps=2, save_interval=2, lr=1e-3, warmup=1,
                  main_shape=ModelShape(32, 1, 2), sweep_shapes=[], sweep_steps=2, probe_max_train=40,
                  probe_max_test=20, probe_max_len=32, glue_tasks=["SST-2"], jsonl_tasks=[],
                  main_settings=["crossbert-compl"], reference=False),
    "tiny": Plan(name="tiny", vocab_size=1024, tokenizer_docs=2000, corpus_bytes=400_000, seq_length=64,
                 global_batch=8, micro_batch=8, sample_steps=6, save_interval=3, lr=1e-3, warmup=2,
                 main_shape=ModelShape(64, 2, 2), sweep_shapes=[ModelShape(32, 1, 2), ModelShape(64, 2, 2)],
                 sweep_steps=3, probe_max_train=60, probe_max_test=40, probe_max_len=64,
                 glue_tasks=["SST-2", "STS-B"], jsonl_tasks=["rotten_tomatoes"]),
    "cpu": Plan(name="cpu", vocab_size=4096, tokenizer_docs=20_000, corpus_bytes=3_000_000, seq_length=64,
                global_batch=16, micro_batch=16, sample_steps=500, save_interval=50, lr=1e-3, warmup=20,
                main_shape=ModelShape(128, 4, 4), sweep_shapes=[ModelShape(64, 2, 2), ModelShape(128, 4, 4),
                                                                ModelShape(160, 4, 4)],
                sweep_steps=100, probe_max_train=200, probe_max_test=100, probe_max_len=64,
                mteb_lite_max_test=500),
}


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def main_runs(plan: Plan) -> list[RunSpec]:
    """BERT, CrossBERT single view and complementary, each to max(sample, compute) budget steps."""
    budget = compute_budget_flops(plan)
    runs = []
    for name, arch, ratio, compl in MAIN_SETTINGS:
        if name not in plan.main_settings:
            continue
        per_sample = flops_per_sample(plan, arch, ratio, compl, plan.main_shape)
        steps = max(plan.sample_steps, _round_up(steps_for_flops(plan, budget, per_sample), plan.save_interval))
        runs.append(RunSpec(name, arch, ratio, compl, plan.main_shape, steps, plan.save_interval, "main"))
    return runs


def sweep_runs(plan: Plan) -> list[RunSpec]:
    """CrossBERT complementary at each sweep size; the main shape reuses the main run's checkpoint."""
    runs = []
    for shape in plan.sweep_shapes:
        if shape == plan.main_shape:
            continue
        runs.append(RunSpec(f"sweep-{shape.label}", "crossbert", 0.5, True, shape, plan.sweep_steps,
                            plan.sweep_steps, "sweep"))
    return runs


def all_runs(plan: Plan) -> list[RunSpec]:
    """Main runs first (they decide the comparisons), then the size sweep, then the reference."""
    return main_runs(plan) + sweep_runs(plan) + reference_runs(plan)
