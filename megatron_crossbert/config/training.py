"""The training and checkpoint sections: optimisation, schedules, precision, logging, and where and
how checkpoints are written and read."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar, Literal

from megatron_crossbert import schedules
from megatron_crossbert.config.checks import (_at_least, _check_choices, _fraction, _positive, _require, _seed,
                                              named_rule, setting)


@dataclass
class TrainingConfig:
    """Optimisation, precision, logging and fault handling."""

    SECTION: ClassVar[str] = "training"
    micro_batch_size: int = 8
    """Sequences per micro-batch per data-parallel rank (each yields num_views views)."""
    global_batch_size: int = 256
    """Sequences per optimizer step across all data-parallel ranks and micro-batches."""
    train_iters: int = 1000
    """Optimizer steps."""
    lr: float = 1e-3
    """Peak learning rate."""
    min_lr: float = 1e-5
    """Learning rate at the end of decay."""
    lr_warmup_iters: int = 100
    """Linear warmup steps."""
    lr_decay_style: Literal["cosine", "linear", "constant", "WSD"] = "cosine"
    """Decay after warmup (megatron-core's OptimizerParamScheduler). WSD (also 'wsd') = warmup-stable-decay:
    lr held after the warmup, decayed to min_lr over the last lr_wsd_decay_iters (or lr_wsd_decay_fraction)."""
    lr_wsd_decay_iters: int | None = None
    """WSD: optimizer steps of the decay phase (Megatron-LM --lr-wsd-decay-iters); or lr_wsd_decay_fraction."""
    lr_wsd_decay_fraction: float | None = None
    """WSD: the decay phase as a fraction of train_iters (ModernBERT's trapezoid); not with lr_wsd_decay_iters."""
    lr_wsd_decay_style: Literal["exponential", "linear", "cosine", "minus_sqrt"] = "exponential"
    """WSD decay shape (Megatron-LM's default exponential; minus_sqrt = 1-sqrt, ModernBERT's and mmBERT's)."""
    step_batch_size_schedule: str | None = None
    """Batch-size warmup (Megatron-LM --step-batch-size-schedule): 'THRESHOLD:BATCH ...', thresholds in
    consumed tokens (K/M/B/T suffixes), the first at 0, the last batch = global_batch_size."""
    rampup_batch_size: list[int] | None = None
    """Batch-size warmup (Megatron-LM --rampup-batch-size): [start, increment, ramp samples], equal samples
    per size, then global_batch_size; translated to a step schedule (megatron-core dropped the ramp)."""
    weight_decay: float = 0.01
    """AdamW weight decay."""
    adam_beta1: float = 0.9
    adam_beta2: float = 0.98
    adam_eps: float = 1e-6
    clip_grad: float = 1.0
    """Global gradient-norm clip; 0 disables."""
    precision: Literal["fp32", "bf16", "fp8"] = "fp32"
    """fp32 on CPU; bf16 on GPU; fp8 = bf16 + Transformer Engine FP8 GEMMs (Hopper)."""
    fp8_recipe: Literal["delayed", "tensorwise"] = "delayed"
    """FP8 scaling recipe (hybrid E4M3/E5M2 format)."""
    seed: int = 1234
    """Seeds parameters init and dropout (masking has its own seed)."""
    log_interval: int = 10
    """Steps between console/TensorBoard log lines."""
    eval_interval: int = 0
    """Steps between validation-loss evaluations; 0 disables."""
    eval_iters: int = 10
    """Micro-batches per validation."""
    tensorboard_dir: str | None = None
    """TensorBoard event dir; None = <save_dir>/tensorboard when saving, else off."""
    wandb_project: str | None = None
    """Log to Weights & Biases under this project when wandb is installed."""
    max_nonfinite_steps: int = 5
    """Stop with an error after this many consecutive NaN/Inf losses or grad norms (each is skipped)."""
    peak_tflops: float | None = None
    """Per-device peak TFLOP/s for MFU; None = auto (known GPUs) or MFU not reported."""
    probe_interval: int = 0
    """Steps between in-training frozen probes; 0 disables."""
    probe_tasks: list[str] = field(default_factory=list)
    """Probe task specs for in-training probes: ``glue:DIR:TASKS``, ``jsonl:DIR``, a directory, or
    ``mteb:DIR[:TASKS]`` (MTEB-lite folders scored by mteb; evaluation/in_training.py)."""

    def __post_init__(self) -> None:
        _positive(self, "micro_batch_size", "global_batch_size", "train_iters", "lr", "log_interval",
                  "max_nonfinite_steps", "eval_iters")
        _require(self.global_batch_size % self.micro_batch_size == 0,
                 f"{setting(self, 'global_batch_size')} must be a multiple of {setting(self, 'micro_batch_size')}")
        _at_least(self, "min_lr", 0)
        _require(self.min_lr <= self.lr, f"{setting(self, 'min_lr')} must be <= {setting(self, 'lr')}")
        _at_least(self, "lr_warmup_iters", 0)
        _require(self.lr_warmup_iters <= self.train_iters,
                 f"{setting(self, 'lr_warmup_iters')} must be <= {setting(self, 'train_iters')}")
        self._check_optimisation()
        self._check_intervals()
        if self.lr_decay_style == "wsd":  # ModernBERT's spelling; megatron's is 'WSD'
            self.lr_decay_style = "WSD"
        _check_choices(self)
        if self.lr_decay_style == "WSD":
            fields = ("lr_decay_style", "lr_wsd_decay_iters", "lr_wsd_decay_fraction", "lr_warmup_iters", "train_iters")
            named_rule(", ".join(setting(self, name) for name in fields), lambda: schedules.wsd_decay_steps(
                self.train_iters, self.lr_warmup_iters, self.lr_wsd_decay_iters, self.lr_wsd_decay_fraction))
        for name in ("lr_wsd_decay_iters", "lr_wsd_decay_fraction"):
            _require(self.lr_decay_style == "WSD" or getattr(self, name) is None,
                     f"{setting(self, name)} applies only with training.lr_decay_style='WSD', not "
                     f"{setting(self, 'lr_decay_style')}")

    def _check_optimisation(self) -> None:
        """Values torch would refuse after start-up (betas, eps, seed) or apply silently (a negative clip
        means "no clipping" to megatron, an infinite lr skips every step)."""
        _require(math.isfinite(self.lr), f"{setting(self, 'lr')} must be finite")
        _at_least(self, "clip_grad", 0, "0 turns clipping off")
        _at_least(self, "weight_decay", 0)
        _fraction(self, "adam_beta1")
        _fraction(self, "adam_beta2")
        _positive(self, "adam_eps")
        _seed(self, "seed")
        _require(self.peak_tflops is None or self.peak_tflops > 0,
                 f"{setting(self, 'peak_tflops')} must be > 0 or null (auto)")

    def _check_intervals(self) -> None:
        """Intervals are step counts, 0 = off; probes need tasks to run."""
        _at_least(self, "eval_interval", 0, "0 turns it off")
        _at_least(self, "probe_interval", 0, "0 turns it off")
        _require(not self.probe_interval or self.probe_tasks,
                 f"{setting(self, 'probe_interval')} needs training.probe_tasks (the tasks to probe), got "
                 f"{setting(self, 'probe_tasks')}")

    def scheduler_decay_kwargs(self) -> dict:
        """The decay arguments of megatron's LR scheduler for these fields (``schedules``; WSD included)."""
        return schedules.scheduler_decay_kwargs(self.train_iters, self.lr_warmup_iters, self.lr_decay_style,
                                                self.lr_wsd_decay_iters, self.lr_wsd_decay_fraction,
                                                self.lr_wsd_decay_style)

    def batch_step_schedule(self, seq_length: int) -> str | None:
        """The batch-size warmup as a step schedule (thresholds in tokens); None for a constant batch."""
        return schedules.batch_step_schedule(self.step_batch_size_schedule, self.rampup_batch_size,
                                             self.global_batch_size, self.micro_batch_size, seq_length)

    @property
    def half_precision(self) -> bool:
        """bf16 parameters and activations (bf16, and fp8, whose non-GEMM math is bf16), with fp32 main
        weights in the optimizer; fp32 otherwise. The one owner of which precisions are half."""
        return self.precision != "fp32"


@dataclass
class CheckpointConfig:
    """Where and how often checkpoints are written and read."""

    SECTION: ClassVar[str] = "checkpoint"
    save_dir: str | None = None
    """Checkpoint root: holds iter_XXXXXXX/ directories and the 'latest' pointer."""
    save_interval: int = 0
    """Steps between saves (a final save always happens when save_dir is set); 0 = only at the end."""
    keep_last: int = 3
    """Checkpoints kept; older iter_ dirs are deleted after a newer save completes. 0 keeps all."""
    load_dir: str | None = None
    """Resume from this root (its 'latest'); None = save_dir when it has a checkpoint."""
    init_from: str | None = None
    """Start from these model weights only (e.g. a converted HF model), with a fresh optimizer."""
    async_save: bool = False
    """Write shards in background processes while training continues (megatron-core async save);
    'latest' and run_config.json are committed only after every rank finished writing."""
    async_writer: Literal["mcore", "nvrx"] = "mcore"
    """The writer of async saves: 'mcore' (megatron-core's own, on CPU and GPU) or 'nvrx' (NVIDIA Resiliency
    Extension's, GPU only; refused at start where it does not import). mcore until a cluster save and resume
    with NVRx has passed; docs/gpu.md says how to install NVRx on a GPU node."""
    resume_from: str | None = None
    """Resume from this checkpoint instead of the one 'latest' names: an iter_* name inside load_dir
    (or save_dir), or a path to an iter_* directory. The way out when 'latest' is missing or damaged."""
    overwrite: bool = False
    """Start over (or resume from resume_from) in a save_dir whose complete checkpoints would be in
    the way: they are moved, with 'latest', into save_dir/replaced_<UTC time>/ first (never deleted)."""
    allow_tokenizer_change: bool = False
    """Accept a tokenizer whose fingerprint differs from the checkpoint's or the dataset's (a warning
    instead of an error). Only for deliberate changes: ids then mean different tokens."""
    lr_schedule_on_resume: Literal["refuse", "checkpoint", "config"] = "refuse"
    """When a schedule field differs from the checkpoint's (train_iters, lr_warmup_iters, lr_decay_style, lr,
    min_lr, the WSD fields, the batch-size schedule, the masking-rate schedule; ``checkpoint.resume_schedule.SCHEDULE_FIELDS``):
    'refuse' stops with the differences listed; 'checkpoint' keeps the saved schedules; 'config' applies
    this run's values from the resumed step on. Every change is logged."""
    allow_data_change: bool = False
    """Resume on data that differs from the checkpoint's (datasets, blend weights, split, seq_length):
    logged with where the new sample stream starts, instead of refused. The stream continues at the
    checkpoint's consumed-sample count in the new data's order."""
    verify: Literal["full", "off"] = "full"
    """Check every file of a checkpoint against the hashes recorded when it was saved (checksums.json)
    before resuming or init_from. 'off' skips it: a flipped bit in a shard then trains on a changed
    weight without a word; use it only where the storage checksums data itself and load time matters.
    Checksums are recorded at every save either way."""

    def __post_init__(self) -> None:
        _at_least(self, "save_interval", 0, "0 saves only at the end")
        _at_least(self, "keep_last", 0, "0 keeps all")
        _check_choices(self)

    def check_saving(self) -> None:
        """At the start of a run (not in the YAML, whose ``save_dir`` often comes from ``--save``): periodic or
        background saves without a place to save are refused, so a preempted run never loses its steps."""
        for name in ("save_interval", "async_save"):
            _require(not getattr(self, name) or self.save_dir,
                     f"{setting(self, name)} needs checkpoint.save_dir (--save), got {setting(self, 'save_dir')}; "
                     "nothing would be saved (set it to 0/false for a run that saves nothing)")
