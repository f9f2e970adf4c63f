"""Registry of Hugging Face export formats: one ``HfFormat`` object per HF target class family.

A format owns everything that differs between HF targets: its name (``--format``), the config.json
builder and the import-side config reader, the literal key map and the state-dict adapters in both
directions, which native configs it represents *exactly* (others are refused with the reasons), the
attention backends of the HF class (for the model card) and whether left padding is exact. The export
and import drivers (``export.py``, ``importer.py``) and the benchmarks look a format up here and never
branch on a target or architecture name.

Registered today: ``xlmr-xl`` (``XLMRobertaXLModel``: SDPA/flash, the classic encoder's default) and
``megatron-bert`` (``MegatronBertModel``: eager only, kept for compatibility). The default format of a
model is the first entry of ``FORMAT_MODULES`` whose ``unsupported(model_cfg)`` is empty.

How to add a format (e.g. ModernBert for the modern encoder):
1. Create ``convert/<target>.py`` with a subclass of ``HfFormat`` (see ``classic.ClassicFormat`` for a
   table-driven one). Reuse ``layout.split_qkv``/``merge_qkv`` for megatron's head-interleaved QKV and
   the strict helpers of ``adapter.py`` (``clean_megatron``, ``take``, ``reject_leftovers``, ``clean_hf``).
2. At the end of that module call ``register_format(YourFormat())``.
3. Add the module path to ``FORMAT_MODULES`` (its position sets its default-priority).
4. ``unsupported`` must name every native config field it cannot represent, and ``check_importable``
   every config.json value it cannot import, so nothing is ever exported or imported silently wrong.
5. Tests: follow ``tests/test_convert.py`` (AutoModel at every backend in ``attention_backends``,
   left padding when ``left_padding``, SentenceTransformer, round trip) and ``tests/test_convert_tp.py``.

When ``ModelConfig`` gains a field, the classic formats refuse every config until ``classic.py`` knows
it: add it to ``classic.REQUIRED_VALUES`` or ``classic.NEUTRAL_FIELDS``. What an architecture's export
holds (decoder dropped, MLM head kept) comes from its ``arch.ArchSpec`` (``model_traits``).
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from megatron_crossbert.arch import REGISTRY, ArchSpec, get_arch
from megatron_crossbert.config import ModelConfig
from megatron_crossbert.convert.artifacts import TokenizerInfo
from megatron_crossbert.convert.errors import ConversionError

FORMAT_MODULES: tuple[str, ...] = (
    "megatron_crossbert.convert.xlmr_xl",
    "megatron_crossbert.convert.megatron_bert",
    "megatron_crossbert.convert.modernbert_format",
)
"""Modules that register a format when imported, in default-priority order (fast and exact first)."""


def model_traits(model_cfg: ModelConfig) -> ArchSpec:
    """The architecture spec of ``model_cfg`` (the one lookup convert/ makes on ``arch``): its
    ``has_reconstruction_decoder``, ``encoder_mlm_head`` and ``description`` decide what an export holds."""
    try:
        return get_arch(model_cfg.arch)
    except ValueError as err:
        raise ConversionError(str(err)) from None


def arch_for_foreign_import(encoder_mlm_head: bool, encoder: str) -> str:
    """The architecture an HF model we did not write is imported as: the first registered one built on
    ``encoder`` whose encoder MLM head matches what the files hold (a bare encoder becomes CrossBERT's)."""
    return next(spec.name for spec in REGISTRY.values()
                if spec.encoder_mlm_head == encoder_mlm_head and encoder in spec.encoders)


@dataclass(frozen=True)
class ExportContext:
    """Facts of one export beyond the model config (needed by config builders and adapters)."""

    vocab_rows: int
    """Height of the (padded) word-embedding table."""
    tokenizer: TokenizerInfo
    """The tokenizer shipped with the export (pad/cls/sep/mask ids)."""


class HfFormat(ABC):
    """One Hugging Face target. Subclasses set the class attributes and implement the methods."""

    name: ClassVar[str]
    """``--format`` value, e.g. ``xlmr-xl``."""
    model_type: ClassVar[str]
    """config.json ``model_type`` written on export and recognised on import."""
    base_class: ClassVar[str]
    """HF class of the encoder (``AutoModel`` loads it)."""
    mlm_class: ClassVar[str | None]
    """HF class with the MLM head, or None when the format has no exact MLM head target."""
    attention_backends: ClassVar[tuple[str, ...]]
    """``attn_implementation`` values the HF class supports (stated in the model card)."""
    left_padding: ClassVar[bool]
    """Whether left-padded batches are exact (positions derived from the mask, not the index)."""
    native_encoder: ClassVar[str] = "classic"
    """The encoder family (``arch.ENCODERS`` key) this format's HF class imports as."""

    @abstractmethod
    def unsupported(self, model_cfg: ModelConfig) -> list[str]:
        """Reasons this format cannot represent ``model_cfg`` exactly (empty = exportable)."""

    def check_exportable(self, model_cfg: ModelConfig) -> None:
        """Raise ``ConversionError`` listing every reason ``model_cfg`` has no exact target here."""
        reasons = self.unsupported(model_cfg)
        if reasons:
            raise ConversionError(f"format {self.name!r} ({self.base_class}) cannot represent this model "
                                  f"exactly: {'; '.join(reasons)}")

    @abstractmethod
    def mlm_head_exact(self, model_cfg: ModelConfig) -> bool:
        """Whether the encoder MLM head maps exactly onto ``mlm_class`` (callers check the traits)."""

    @abstractmethod
    def hf_config(self, model_cfg: ModelConfig, ctx: ExportContext, with_mlm_head: bool) -> dict[str, Any]:
        """The config.json of the export."""

    @abstractmethod
    def to_hf(self, state: dict, model_cfg: ModelConfig, ctx: ExportContext,
              with_mlm_head: bool) -> dict[str, torch.Tensor]:
        """TP=1 native state dict -> HF state dict (strict: unmapped native tensors raise)."""

    @abstractmethod
    def check_importable(self, hf_cfg: dict) -> None:
        """Raise ``ConversionError`` for config.json values the native model cannot reproduce."""

    @abstractmethod
    def model_config_from_hf(self, hf_cfg: dict, base: ModelConfig, vocab_size: int | None) -> ModelConfig:
        """config.json (already checked) over ``base`` -> the native ModelConfig."""

    @abstractmethod
    def from_hf(self, hf_state: dict, hf_cfg: dict, model_cfg: ModelConfig) -> dict[str, torch.Tensor]:
        """HF state dict -> native state dict of the encoder (+ MLM head); strict like ``to_hf``."""

    @abstractmethod
    def has_mlm_head(self, hf_state: dict) -> bool:
        """Whether an HF state dict of this format carries the MLM head."""

    def card_notes(self, model_cfg: ModelConfig) -> list[str]:
        """Format-specific facts for the model card (padding, positions, token types...)."""
        return []


_REGISTRY: dict[str, HfFormat] = {}


def register_format(fmt: HfFormat) -> HfFormat:
    """Add ``fmt`` to the registry (called at the end of each format module)."""
    if fmt.name in _REGISTRY and type(_REGISTRY[fmt.name]) is not type(fmt):
        raise ValueError(f"HF export format {fmt.name!r} registered twice")
    _REGISTRY[fmt.name] = fmt
    return fmt


def _load() -> dict[str, HfFormat]:
    for module in FORMAT_MODULES:
        importlib.import_module(module)
    return _REGISTRY


def all_formats() -> list[HfFormat]:
    """Every registered format, in ``FORMAT_MODULES`` order (not import order: any module may have
    been imported first); formats registered from elsewhere come last."""
    rank = {module: i for i, module in enumerate(FORMAT_MODULES)}
    return sorted(_load().values(), key=lambda fmt: rank.get(type(fmt).__module__, len(rank)))


def format_names() -> list[str]:
    return [fmt.name for fmt in all_formats()]


def get_format(name: str) -> HfFormat:
    """The format called ``name``; unknown names list the known ones."""
    formats = _load()
    if name not in formats:
        raise ConversionError(f"unknown HF export format {name!r}; choose one of {format_names()}")
    return formats[name]


def default_format(model_cfg: ModelConfig) -> HfFormat:
    """The first format (priority order) that represents ``model_cfg`` exactly."""
    reasons = {}
    for fmt in all_formats():
        reasons[fmt.name] = fmt.unsupported(model_cfg)
        if not reasons[fmt.name]:
            return fmt
    detail = "; ".join(f"{name}: {', '.join(why)}" for name, why in reasons.items())
    raise ConversionError(f"no HF export format represents this model exactly ({detail})")


def format_for_hf_config(hf_cfg: dict, source: str = "config.json") -> HfFormat:
    """The format whose ``model_type`` matches an HF config.json (import side)."""
    model_type = hf_cfg.get("model_type")
    for fmt in all_formats():
        if fmt.model_type == model_type:
            return fmt
    known = [fmt.model_type for fmt in all_formats()]
    raise ConversionError(f"{source}: model_type={model_type!r} is not importable (supported: {known})")
