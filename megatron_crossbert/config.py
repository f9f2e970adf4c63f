"""Typed, validated configuration: one dataclass per concern, plus the run bundle.

Nothing here imports torch or megatron, so configs can be built, validated and saved in any
process. ``RunConfig`` is what gets written next to every checkpoint (``run_config.json``) and what
the YAML files in ``examples/`` hold. Each ``__post_init__`` checks only its own fields; checks that
span concerns (e.g. sequence length against the position table) live in ``RunConfig``.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from megatron_crossbert import masking as masking_rules
from megatron_crossbert import schedules
from megatron_crossbert.attention_windows import check_window_options
from megatron_crossbert.arch import ENCODERS, REGISTRY, get_arch, get_encoder
from megatron_crossbert.fsutil import atomic_write_text

ArchName = Literal[tuple(REGISTRY)]
"""The registered architectures (``arch.REGISTRY``, the one owner of the names)."""
EncoderName = Literal[tuple(ENCODERS)]
"""The registered encoder families (``arch.ENCODERS``)."""
AttentionBackend = Literal["auto", "sdpa", "flex", "megatron"]
"""Core-attention kernels (``models.core_attention``): auto = flex on a GPU when masks apply, else sdpa."""
ATTENTION_KERNELS = tuple(name for name in typing.get_args(AttentionBackend) if name != "auto")
"""What ``model.attention_backend`` resolves to: its values but 'auto'."""
StripMode = Literal["auto", "always", "never"]
"""How ``DataConfig.strip_wrapper_tokens`` treats [CLS]/[SEP]/eod already around each document."""


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


@functools.cache
def _literal_fields(section_cls: type) -> dict[str, tuple]:
    """{field name: allowed values} of every ``Literal``-typed field of a config dataclass."""
    hints = typing.get_type_hints(section_cls)
    return {f.name: typing.get_args(hints[f.name]) for f in dataclasses.fields(section_cls)
            if typing.get_origin(hints[f.name]) is Literal}


def field_choices(section_cls: type, name: str) -> tuple:
    """The values a ``Literal`` field accepts (CLI ``choices`` come from here, never retyped)."""
    return _literal_fields(section_cls)[name]


def _check_choices(obj: Any) -> None:
    """Every ``Literal`` field of ``obj`` holds one of its values; one line naming the field otherwise."""
    for name, choices in _literal_fields(type(obj)).items():
        value = getattr(obj, name)
        _require(value in choices, f"{type(obj).__name__}.{name} must be one of {', '.join(map(str, choices))}, "
                                   f"got {value!r}")


def _positive(obj: Any, *names: str) -> None:
    for name in names:
        value = getattr(obj, name)
        _require(value is not None and value > 0, f"{type(obj).__name__}.{name} must be > 0, got {value!r}")


@dataclass
class ModelConfig:
    """Encoder (kept) and reconstruction decoder (discarded after pretraining) dimensions."""

    arch: ArchName = "crossbert"
    """A name in ``arch.REGISTRY``: 'crossbert' = encoder on visible tokens + cross-attention decoder;
    'bert' = megatron-core BertModel baseline (classic encoder); 'mlm' = modern encoder + MLM head."""
    encoder: EncoderName = "classic"
    """Encoder family (``arch.ENCODERS``): 'classic' = BERT layout (learned positions, GELU, biases);
    'modern' = ModernBERT layout (embedding norm, RoPE, GeGLU, no biases, no attention norm on layer 0)."""
    rotary_base: float = 160000.0
    """RoPE base (theta) of the modern encoder and decoder (ModernBERT's global layers use 160000)."""
    decoder_position_embedding: bool = True
    """CrossBERT decoder queries add a learned position embedding of their target position. With the
    modern encoder RoPE already places queries and keys, so this can be turned off."""
    vocab_size: int = 32768
    """Tokenizer vocabulary size; the embedding table is padded up (see make_vocab_size_divisible_by)."""
    make_vocab_size_divisible_by: int = 128
    """Embedding rows are padded to a multiple of this (GEMM-friendly). It must be divisible by the TP
    size, so the table height - and hence every checkpoint - is the same at any TP (resharding works)."""
    hidden_size: int = 768
    """Encoder width; also the width of the tied word embeddings."""
    num_layers: int = 12
    """Encoder layers (split across pipeline stages)."""
    num_attention_heads: int = 12
    """Encoder attention heads; must divide hidden_size."""
    ffn_hidden_size: int | None = None
    """Encoder MLP width; None means 4 * hidden_size."""
    max_position_embeddings: int = 512
    """Rows of the learned absolute position table; the packed sequence length must fit in it."""
    decoder_num_layers: int = 2
    """Reconstruction-branch layers (self-attn, cross-attn to the encoder, MLP). Ignored for 'bert'."""
    decoder_hidden_size: int | None = None
    """Decoder width; None means hidden_size. May be narrower (e.g. hidden_size/2): cross-attention keys and
    values project the encoder output from hidden_size, and the LM head's dense maps the decoder width back
    to hidden_size, so the output layer stays tied to the word embeddings."""
    decoder_num_attention_heads: int | None = None
    """Decoder heads; None keeps the encoder's head dim at the decoder width (num_attention_heads at full
    width, half of them at half width)."""
    decoder_ffn_hidden_size: int | None = None
    """Decoder MLP width; None means 4 * decoder width."""
    layernorm_epsilon: float = 1e-5
    """LayerNorm epsilon; exported verbatim to HF (whose default 1e-12 would be wrong)."""
    hidden_dropout: float = 0.1
    """Dropout after attention/MLP projections and on embeddings."""
    attention_dropout: float = 0.1
    """Dropout on attention probabilities."""
    init_method_std: float = 0.02
    """Std of the normal initialiser."""
    bias_gelu_fusion: bool = False
    """Fused bias+GELU uses the tanh approximation; exported as HF 'gelu_pytorch_tanh' when True."""
    transformer_impl: Literal["auto", "local", "transformer_engine"] = "auto"
    """Layer spec: 'auto' = Transformer Engine when CUDA and TE are present, else megatron-core's local spec."""
    sparse_prediction: bool = True
    """MLM baselines ('bert', 'mlm'): run the LM head and the vocab projection on the masked positions only
    (ModernBERT / HF ``sparse_prediction``); same loss and weights. False = Megatron-LM's dense head on
    all L positions, for parity. CrossBERT always predicts its targets only."""
    attention_backend: AttentionBackend = "auto"
    """Core attention of every layer (both specs): 'sdpa' = torch scaled_dot_product_attention (dense bool
    mask when documents/windows apply), 'flex' = compiled FlexAttention with a block mask (GPU; no attention
    dropout), 'megatron' = megatron-core's unfused DotProductAttention (the reference); 'auto' = flex on a
    GPU when masks apply and attention_dropout is 0, else sdpa. Resolved and logged once per run."""
    local_attention: int = 0
    """ModernBERT's sliding window in tokens (0 = every layer global; ModernBERT uses 128): a local layer's
    query sees keys within local_attention // 2 ORIGINAL positions. Modern encoder only."""
    global_attn_every_n_layers: int = 3
    """ModernBERT's pattern: layer i (0-based) is global when i % n == 0, local otherwise (with windows on).
    The decoder follows the same rule over its own layers."""
    local_rotary_base: float = 10000.0
    """RoPE base of the local layers (ModernBERT's local_rope_theta); rotary_base stays the global layers'."""

    def __post_init__(self) -> None:
        spec, _ = get_arch(self.arch), get_encoder(self.encoder)  # unknown names list the registered ones
        _check_choices(self)
        _require(self.encoder in spec.encoders,
                 f"arch={self.arch!r} is built with encoder {' or '.join(spec.encoders)}, not {self.encoder!r}")
        _positive(self, "vocab_size", "make_vocab_size_divisible_by", "hidden_size", "num_layers",
                  "num_attention_heads", "max_position_embeddings", "layernorm_epsilon")
        _require(self.hidden_size % self.num_attention_heads == 0,
                 f"num_attention_heads={self.num_attention_heads} must divide hidden_size={self.hidden_size}")
        _require(self.decoder_num_layers >= int(spec.has_reconstruction_decoder),
                 f"arch={self.arch!r} needs decoder_num_layers >= 1, got {self.decoder_num_layers}")
        _require(self.rotary_base > 0, f"ModelConfig.rotary_base must be > 0, got {self.rotary_base}")
        _require(get_encoder(self.encoder).linear_bias or not self.bias_gelu_fusion,
                 f"bias_gelu_fusion needs linear biases, which the {self.encoder!r} encoder does not have")
        _require(self.decoder_hidden_size is None or self.decoder_hidden_size > 0,
                 f"ModelConfig.decoder_hidden_size must be > 0, got {self.decoder_hidden_size}")
        _require(self.dec_hidden % self.dec_heads == 0,
                 f"decoder_num_attention_heads={self.dec_heads} must divide decoder width {self.dec_hidden}")
        for name in ("hidden_dropout", "attention_dropout"):
            _require(0.0 <= getattr(self, name) < 1.0, f"ModelConfig.{name} must be in [0, 1)")
        self._check_attention()

    def _check_attention(self) -> None:
        """Windows and backends that cannot work are refused here, before anything is built."""
        check_window_options(self.local_attention, self.global_attn_every_n_layers)
        _require(self.local_rotary_base > 0, f"ModelConfig.local_rotary_base must be > 0, got {self.local_rotary_base}")
        _require(not self.local_attention or not get_encoder(self.encoder).learned_positions,
                 f"model.local_attention needs the modern encoder (RoPE, as ModernBERT); the {self.encoder!r} "
                 "encoder has no exact Hugging Face target with windows")
        _require(self.attention_backend != "flex" or self.attention_dropout == 0,
                 f"model.attention_backend=flex has no attention dropout; set model.attention_dropout=0 "
                 f"(got {self.attention_dropout}) or use sdpa")

    @property
    def windowed(self) -> bool:
        """Some layers attend locally (``attention_windows`` owns which)."""
        return self.local_attention > 0 and self.global_attn_every_n_layers > 1

    @property
    def ffn(self) -> int:
        return self.ffn_hidden_size or 4 * self.hidden_size

    @property
    def dec_hidden(self) -> int:
        return self.decoder_hidden_size or self.hidden_size

    @property
    def dec_heads(self) -> int:
        head_dim = self.hidden_size // self.num_attention_heads
        return self.decoder_num_attention_heads or max(1, self.dec_hidden // head_dim)

    @property
    def dec_ffn(self) -> int:
        return self.decoder_ffn_hidden_size or 4 * self.dec_hidden

    def padded_vocab_size(self, tensor_parallel_size: int = 1) -> int:
        """Embedding rows: vocab_size rounded up to make_vocab_size_divisible_by, independent of TP.

        Megatron-LM pads to ``multiple * TP``, which changes the table height with the TP size and
        breaks resharded resume; we instead require the multiple itself to be TP-divisible.
        """
        multiple = self.make_vocab_size_divisible_by
        _require(multiple % tensor_parallel_size == 0,
                 f"make_vocab_size_divisible_by={multiple} must be divisible by the tensor-parallel size "
                 f"{tensor_parallel_size} so each rank holds an equal slice of the embedding table")
        return -(-self.vocab_size // multiple) * multiple


@dataclass
class MaskingConfig:
    """How each packed sequence is split into visible and target positions."""

    mask_ratio: float = 0.5
    """CrossBERT masking ratio r; the encoder sees round((1-r)*L) tokens. Must be in [0.5, 1)."""
    complementary: bool = True
    """Two views with disjoint visible sets per sequence (every token is a target at least once)."""
    pin_cls: bool = False
    """Keep position 0 ([CLS]) visible in every view; only possible without complementary views."""
    bert_mask_prob: float = 0.15
    """MLM baselines ('bert', 'mlm'): fraction of positions selected for prediction (BERT 0.15, ModernBERT 0.3)."""
    bert_replace_mask: float = 0.8
    """MLM baselines: of the selected, fraction replaced by [MASK]."""
    bert_replace_random: float = 0.1
    """MLM baselines: of the selected, fraction replaced by a random token (the rest stay unchanged)."""
    seed: int = 1234
    """Masks are a pure function of (seed, global sample index); resumed runs see the same masks."""
    bert_mask_prob_schedule: str | None = None
    """MLM baselines: the selection rate over training, 'THRESHOLD:RATE ...' with thresholds in tokens
    (K/M/B/T suffixes), first at 0; e.g. mmBERT's phases '0:0.3 2.3T:0.15 2.9T:0.05'. A pure function of
    the global sample index (resume-exact). Validation keeps bert_mask_prob, so its losses compare."""
    bert_mask_prob_schedule_style: Literal["step", "linear"] = "step"
    """step: hold each rate until the next threshold (mmBERT); linear: interpolate (Ankner et al. 2023)."""

    def __post_init__(self) -> None:
        _check_choices(self)
        _require(0.5 <= self.mask_ratio < 1.0, f"mask_ratio must be in [0.5, 1), got {self.mask_ratio}")
        _require(0.0 < self.bert_mask_prob < 1.0, f"bert_mask_prob must be in (0, 1), got {self.bert_mask_prob}")
        _require(self.bert_replace_mask >= 0 and self.bert_replace_random >= 0
                 and self.bert_replace_mask + self.bert_replace_random <= 1.0,
                 "bert_replace_mask + bert_replace_random must be within [0, 1]")
        _require(not (self.pin_cls and self.complementary),
                 "pin_cls=True is incompatible with complementary=True: a pinned position would be visible "
                 "in both views, breaking disjointness")
        if self.bert_mask_prob_schedule:
            schedules.mask_rate_schedule(self.bert_mask_prob_schedule, self.bert_mask_prob_schedule_style)

    @property
    def num_views(self) -> int:
        return 2 if self.complementary else 1

    def bert_mask_prob_at(self, index: int, seq_length: int) -> float:
        """The MLM selection rate of global sample ``index``: the schedule's, else ``bert_mask_prob``."""
        if not self.bert_mask_prob_schedule:
            return self.bert_mask_prob
        return schedules.mask_rate_schedule(self.bert_mask_prob_schedule,
                                            self.bert_mask_prob_schedule_style).at(index, seq_length)

    def at_fixed_rate(self) -> MaskingConfig:
        """This masking without the rate schedule: validation masks at ``bert_mask_prob`` all run long
        (comparable losses; ModernBERT evaluates at one rate too)."""
        return dataclasses.replace(self, bert_mask_prob_schedule=None)

    def visible_length(self, seq_length: int) -> int:
        """Lv for ``seq_length``; the rule lives in ``masking.visible_length``."""
        return masking_rules.visible_length(seq_length, self.mask_ratio)


@dataclass
class DataConfig:
    """Where samples come from and how they are packed."""

    data_path: list[str] = field(default_factory=list)
    """Megatron blend: ['prefix'] or ['w1', 'prefix1', 'w2', 'prefix2', ...] (prefix without _document.bin)."""
    split: str = "969,30,1"
    """Train/valid/test proportions of each prefix's documents."""
    seq_length: int = 512
    """Packed sample length L (exactly L tokens, no padding)."""
    tokenizer: str = ""
    """Tokenizer directory written by crossbert-train-tokenizer (or any HF tokenizer dir)."""
    static_masks: str | None = None
    """Optional prefix of static mask pairs written by crossbert-preprocess --emit-mask-pairs."""
    cache_dir: str | None = None
    """Where megatron-core caches the sample index; None = next to the data."""
    num_workers: int = 0
    """DataLoader worker processes."""
    strip_wrapper_tokens: StripMode = "auto"
    """[CLS]/[SEP]/eod already around each document (Megatron-LM-written data): auto (strip when every
    sampled document has them), always (when most do), never (keep the data's tokens)."""
    document_mask: bool = True
    """Every attention stays inside the query's document: samples carry each position's document
    (fragment) id from the packing index and the models mask attention with it. False = every token of
    a packed sample attends to every other (the pre-issue-21 behaviour)."""

    def __post_init__(self) -> None:
        _positive(self, "seq_length")
        _check_choices(self)
        _require(self.num_workers >= 0, "DataConfig.num_workers must be >= 0")
        parts = self.split.replace("/", ",").split(",")
        _require(all(p.strip().replace(".", "", 1).isdigit() for p in parts) and 1 <= len(parts) <= 3,
                 f"split must look like '969,30,1', got {self.split!r}")


@dataclass
class ParallelConfig:
    """The parallel layout; chosen here and nowhere else."""

    tensor_model_parallel_size: int = 1
    """TP degree (heads, FFN and vocab split across ranks)."""
    pipeline_model_parallel_size: int = 1
    """PP degree; encoder layers are split across stages, decoder and LM head live on the last."""
    sequence_parallel: bool = False
    """Shard LayerNorm/dropout activations along the sequence across TP ranks (needs TP > 1)."""
    use_distributed_optimizer: bool = False
    """Shard optimizer state across data-parallel ranks (ZeRO-1)."""
    overlap_grad_reduce: bool = False
    """Overlap the data-parallel gradient reduce with the backward pass."""
    recompute_activations: bool = False
    """Full activation recompute per layer (trade compute for memory)."""

    def __post_init__(self) -> None:
        _positive(self, "tensor_model_parallel_size", "pipeline_model_parallel_size")
        _require(not self.sequence_parallel or self.tensor_model_parallel_size > 1,
                 "sequence_parallel needs tensor_model_parallel_size > 1")


@dataclass
class TrainingConfig:
    """Optimisation, precision, logging and fault handling."""

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
    ``mteb:DIR[:TASKS]`` (MTEB-lite folders scored by mteb; evaluation/suite.py)."""

    def __post_init__(self) -> None:
        _positive(self, "micro_batch_size", "global_batch_size", "train_iters", "lr", "log_interval",
                  "max_nonfinite_steps", "eval_iters")
        _require(self.global_batch_size % self.micro_batch_size == 0,
                 f"global_batch_size={self.global_batch_size} must be a multiple of "
                 f"micro_batch_size={self.micro_batch_size}")
        _require(0 <= self.min_lr <= self.lr, "min_lr must be in [0, lr]")
        _require(0 <= self.lr_warmup_iters <= self.train_iters, "lr_warmup_iters must be in [0, train_iters]")
        if self.lr_decay_style == "wsd":  # the and ModernBERT's spelling; megatron's is 'WSD'
            self.lr_decay_style = "WSD"
        _check_choices(self)
        if self.lr_decay_style == "WSD":
            schedules.wsd_decay_steps(self.train_iters, self.lr_warmup_iters, self.lr_wsd_decay_iters,
                                      self.lr_wsd_decay_fraction)
        wsd_fields = (self.lr_wsd_decay_iters, self.lr_wsd_decay_fraction)
        _require(self.lr_decay_style == "WSD" or wsd_fields == (None, None),
                 f"lr_wsd_decay_iters / lr_wsd_decay_fraction apply only with lr_decay_style=WSD, "
                 f"not {self.lr_decay_style!r}")

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
    min_lr, the WSD fields, the batch-size schedule, the masking-rate schedule; ``verify.SCHEDULE_FIELDS``):
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
        _require(self.save_interval >= 0 and self.keep_last >= 0, "save_interval and keep_last must be >= 0")
        _check_choices(self)


@dataclass
class RunConfig:
    """Everything one pretraining run needs; saved as run_config.json beside each checkpoint."""

    model: ModelConfig = field(default_factory=ModelConfig)
    masking: MaskingConfig = field(default_factory=MaskingConfig)
    data: DataConfig = field(default_factory=DataConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)

    def __post_init__(self) -> None:
        seq, model, tp = self.data.seq_length, self.model, self.parallel.tensor_model_parallel_size
        _require(seq <= model.max_position_embeddings,
                 f"seq_length={seq} does not fit the position table (max_position_embeddings="
                 f"{model.max_position_embeddings}); raise max_position_embeddings or shorten sequences")
        get_arch(model.arch).check_run(self)
        encoder_length = get_arch(model.arch).pipeline_shape(self)[0]
        _require(model.num_attention_heads % tp == 0 and model.dec_heads % tp == 0,
                 f"tensor_model_parallel_size={tp} must divide the attention heads")
        model.padded_vocab_size(tp)  # raises when the padding multiple is not TP-divisible
        self.training.batch_step_schedule(seq)  # raises on a bad batch-size schedule
        _require(model.num_layers % self.parallel.pipeline_model_parallel_size == 0,
                 f"pipeline_model_parallel_size={self.parallel.pipeline_model_parallel_size} must divide "
                 f"num_layers={model.num_layers}")
        _require(not self.parallel.sequence_parallel or (encoder_length % tp == 0 and seq % tp == 0),
                 f"sequence_parallel needs seq_length ({seq}) and the encoder length ({encoder_length}) "
                 f"divisible by TP={tp}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> RunConfig:
        unknown = set(raw) - {f.name for f in dataclasses.fields(cls)}
        _require(not unknown, f"unknown config sections: {sorted(unknown)}")
        parts = {}
        for f in dataclasses.fields(cls):
            section_cls = f.default_factory  # type: ignore[misc]
            parts[f.name] = _build_section(section_cls, raw.get(f.name) or {}, f.name)
        return cls(**parts)

    def to_json(self) -> str:
        """The text ``save_json`` writes (a checkpoint's checksum record hashes it before it is written)."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    def save_json(self, path: str | Path) -> None:
        """Atomically: a checkpoint's run_config.json marks its save complete, so never half-written."""
        atomic_write_text(path, self.to_json())

    @classmethod
    def load_json(cls, path: str | Path) -> RunConfig:
        return cls.from_dict(json.loads(Path(path).read_text()))


def _build_section(section_cls: type, values: dict[str, Any], name: str) -> Any:
    fields = {f.name: f for f in dataclasses.fields(section_cls)}
    unknown = set(values) - set(fields)
    _require(not unknown, f"unknown keys in [{name}]: {sorted(unknown)}; valid keys: {sorted(fields)}")
    return section_cls(**{key: _coerce_number(value, fields[key], name) for key, value in values.items()})


def _coerce_number(value: Any, spec: dataclasses.Field, section: str) -> Any:
    """YAML 1.1 reads '3e-4' as a string; numeric fields accept such strings, anything else is an error."""
    annotation = str(spec.type)
    if not isinstance(value, str) or not ("float" in annotation or annotation.startswith("int")):
        return value
    try:
        return float(value) if "float" in annotation else int(value)
    except ValueError:
        raise ValueError(f"{section}.{spec.name} must be a number ({annotation}), got {value!r}") from None


def parse_override(text: str) -> tuple[str, str, Any]:
    """'training.lr=3e-4' -> ('training', 'lr', 0.0003). Values are parsed as YAML scalars/lists."""
    key, sep, value = text.partition("=")
    section, dot, name = key.strip().partition(".")
    _require(bool(sep and dot and section and name),
             f"override {text!r} must look like section.key=value (e.g. training.lr=3e-4)")
    return section, name, yaml.safe_load(value)


def load_run_config(path: str | Path | None = None, overrides: list[str] = ()) -> RunConfig:
    """YAML file (optional) plus 'section.key=value' overrides, validated as a whole."""
    raw: dict[str, Any] = {}
    if path is not None:
        loaded = yaml.safe_load(Path(path).read_text())
        _require(loaded is None or isinstance(loaded, dict), f"{path}: top level must be a mapping of sections")
        raw = loaded or {}
    for text in overrides:
        section, name, value = parse_override(text)
        raw.setdefault(section, {})[name] = value
    return RunConfig.from_dict(raw)
