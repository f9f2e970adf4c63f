"""Which models a throughput benchmark compares, and at which shape.

A comparison is only fair if the MLM baseline and every CrossBERT setting share the encoder (width,
depth, heads, MLP), the vocabulary and the packed sequence length L; only the masking and the
reconstruction branch differ. Each encoder family has its own reference, its strongest MLM baseline:
megatron's BertModel for the classic family, the modern encoder + MLM head for the modern one, both
with sparse prediction (the head on the masked positions only, as ModernBERT runs it). The dense-head
baseline (Megatron-LM's) is an extra row, and CrossBERT rows with a narrower or shallower decoder
(width h/2, 1 layer) show what the decoder costs. ``SIZES`` holds the shapes:

* ``cpu``: BERT-base *shape ratios* scaled down so a 2-core run takes a few minutes. What sets
  the CrossBERT/BERT ratio is the split of work between the encoder's dense GEMMs, attention
  (~L/6h of the dense work), and the LM head (~V/(12·layers·h) of the encoder); BERT-base has
  L/6h = 0.11 and V/(12·12·768) = 0.28. ``cpu`` (h=256, 8 layers, L=192, V=8192) gives 0.125 and
  0.33, close to both.
* ``base`` / ``large``: the real BERT-base / BERT-large encoders at L=512 (GPU).
* ``claims``: the small model of the GPU claims run (``experiments/device_check/claims.py``): trained
  for minutes per arm on one H200, and timed here first to size the equal-FLOPs budget.
* ``tiny``: smoke tests only.
"""

from __future__ import annotations

from dataclasses import dataclass

from megatron_crossbert.arch import get_arch
from megatron_crossbert.arch_rules import sample_layout
from megatron_crossbert.config import RunConfig

SIZES: dict[str, dict] = {
    "tiny": dict(hidden_size=64, num_layers=2, num_attention_heads=2, vocab_size=512, seq_length=32,
                 decoder_num_layers=1, micro_batch_size=2),
    "cpu": dict(hidden_size=256, num_layers=8, num_attention_heads=4, vocab_size=8192, seq_length=192,
                decoder_num_layers=2, micro_batch_size=8),
    "base": dict(hidden_size=768, num_layers=12, num_attention_heads=12, vocab_size=30522, seq_length=512,
                 decoder_num_layers=2, micro_batch_size=32),
    "large": dict(hidden_size=1024, num_layers=24, num_attention_heads=16, vocab_size=30522, seq_length=512,
                  decoder_num_layers=2, micro_batch_size=32),
    "claims": dict(hidden_size=512, num_layers=8, num_attention_heads=8, vocab_size=16384, seq_length=128,
                   decoder_num_layers=2, micro_batch_size=128),
}



@dataclass(frozen=True)
class BenchSetting:
    """One row of the comparison before the shape is applied."""

    name: str
    arch: str
    """A name in ``arch.REGISTRY``."""
    encoder: str = "classic"
    """Encoder family; each family's MLM baseline is the reference of its rows."""
    mask_ratio: float = 0.5
    complementary: bool = True
    sparse_prediction: bool = True
    """MLM rows: the head on the masked positions only (the reference) or on all L (the dense row)."""
    decoder_width: float = 1.0
    """CrossBERT rows: decoder width as a fraction of the encoder's (heads scale with it)."""
    decoder_layers: int | None = None
    """CrossBERT rows: decoder layers; None = the size's ``decoder_num_layers``."""


# The settings the issues ask for, each family's sparse MLM baseline first (its reference).
SETTINGS: list[BenchSetting] = [
    BenchSetting("bert", "bert"),
    BenchSetting("bert dense", "bert", sparse_prediction=False),
    BenchSetting("crossbert r=0.5 single", "crossbert", complementary=False),
    BenchSetting("crossbert r=0.5 compl", "crossbert"),
    BenchSetting("crossbert r=0.75 compl", "crossbert", mask_ratio=0.75),
    BenchSetting("crossbert r=0.5 compl dec h/2", "crossbert", decoder_width=0.5),
    BenchSetting("crossbert r=0.5 compl dec 1L", "crossbert", decoder_layers=1),
    BenchSetting("crossbert r=0.5 compl dec h/2x1L", "crossbert", decoder_width=0.5, decoder_layers=1),
    BenchSetting("crossbert r=0.75 compl dec h/2x1L", "crossbert", mask_ratio=0.75, decoder_width=0.5,
                 decoder_layers=1),
    BenchSetting("mlm-modern", "mlm", "modern"),
    BenchSetting("mlm-modern dense", "mlm", "modern", sparse_prediction=False),
    BenchSetting("crossbert-modern r=0.5 single", "crossbert", "modern", complementary=False),
    BenchSetting("crossbert-modern r=0.5 compl", "crossbert", "modern"),
    BenchSetting("crossbert-modern r=0.5 compl dec h/2x1L", "crossbert", "modern", decoder_width=0.5,
                 decoder_layers=1),
]


@dataclass
class BenchCase:
    """One model in the comparison: a display name plus the full RunConfig it trains with."""

    name: str
    run_cfg: RunConfig

    @property
    def arch(self) -> str:
        return self.run_cfg.model.arch

    @property
    def encoder(self) -> str:
        return self.run_cfg.model.encoder

    @property
    def is_mlm(self) -> bool:
        """An MLM baseline (sparse or dense head)."""
        return get_arch(self.arch).encoder_mlm_head

    @property
    def is_reference(self) -> bool:
        """The sparse MLM baseline: the reference row of its encoder family (the strongest BERT)."""
        return self.is_mlm and self.run_cfg.model.sparse_prediction

    @property
    def seq_length(self) -> int:
        return self.run_cfg.data.seq_length

    @property
    def micro_batch_size(self) -> int:
        return self.run_cfg.training.micro_batch_size

    def input_tokens_per_sample(self) -> int:
        """Tokens of the packed sequence consumed per sample (L for every model)."""
        return self.seq_length

    def supervised_tokens_per_sample(self) -> float:
        """Tokens that receive a reconstruction loss per sample (``SampleLayout.supervised_tokens``)."""
        return sample_layout(self.arch).supervised_tokens(self.run_cfg)


def size_overrides(size: str, **changes) -> dict:
    """The shape dict for ``size`` with explicit changes (e.g. seq_length=128) applied."""
    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}; choose one of {sorted(SIZES)}")
    shape = dict(SIZES[size])
    shape.update({key: value for key, value in changes.items() if value is not None})
    return shape


def make_run_config(shape: dict, setting: BenchSetting, precision: str = "fp32",
                    transformer_impl: str = "auto", attention_backend: str = "auto",
                    document_mask: bool = True) -> RunConfig:
    """A RunConfig for one benchmark model; dropout off so timings do not depend on RNG work.

    ``train_iters``/``global_batch_size`` are irrelevant for timing but must validate; one
    micro-batch per step keeps the step a single forward/backward plus one optimizer update.
    """
    model = dict(arch=setting.arch, encoder=setting.encoder, hidden_size=shape["hidden_size"],
                 num_layers=shape["num_layers"],
                 num_attention_heads=shape["num_attention_heads"], vocab_size=shape["vocab_size"],
                 max_position_embeddings=max(512, shape["seq_length"]), hidden_dropout=0.0,
                 attention_dropout=0.0, transformer_impl=transformer_impl, attention_backend=attention_backend,
                 sparse_prediction=setting.sparse_prediction, **_decoder_fields(shape, setting))
    raw = {
        "model": model,
        "masking": {"mask_ratio": setting.mask_ratio, "complementary": setting.complementary},
        "data": {"seq_length": shape["seq_length"], "document_mask": document_mask},
        "training": {"micro_batch_size": shape["micro_batch_size"],
                     "global_batch_size": shape["micro_batch_size"], "train_iters": 1000,
                     "lr_warmup_iters": 10, "precision": precision, "log_interval": 1000},
    }
    return RunConfig.from_dict(raw)


def _decoder_fields(shape: dict, setting: BenchSetting) -> dict:
    """Decoder depth and (for a narrower decoder) width and heads; none for the MLM baselines."""
    layers = shape["decoder_num_layers"] if setting.decoder_layers is None else setting.decoder_layers
    return decoder_fields(setting.arch, shape["hidden_size"], shape["num_attention_heads"], layers,
                          setting.decoder_width)


def decoder_fields(arch: str, hidden_size: int, num_heads: int, layers: int, width: float = 1.0,
                   cross_attention_only: bool = False, context_positions: bool = False) -> dict:
    """The model section's decoder keys: depth and, below full width, width and heads scaled by ``width``;
    with ``cross_attention_only`` layers of cross-attention alone, with ``context_positions`` the decoder's own
    positions of the states it reads (the benchmark's rows and the study's arms both build their decoders
    here)."""
    if not get_arch(arch).has_reconstruction_decoder:
        return {"decoder_num_layers": 0}
    fields = {"decoder_num_layers": layers}
    if width != 1.0:
        fields.update(decoder_hidden_size=round(hidden_size * width),
                      decoder_num_attention_heads=max(1, round(num_heads * width)))
    if cross_attention_only:
        fields["decoder_cross_attention_only"] = True
    if context_positions:
        fields["decoder_context_position_embedding"] = True
    return fields


def default_cases(size: str = "cpu", precision: str = "fp32", transformer_impl: str = "auto",
                  settings: list[BenchSetting] | None = None, attention_backend: str = "auto",
                  document_mask: bool = True, **changes) -> list[BenchCase]:
    """Every setting (each family's MLM baselines and its CrossBERT rows) at the same encoder shape and L."""
    shape = size_overrides(size, **changes)
    return [BenchCase(s.name, make_run_config(shape, s, precision, transformer_impl, attention_backend, document_mask))
            for s in (settings or SETTINGS)]
