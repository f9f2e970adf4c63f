"""The interface of one Hugging Face export format (``HfFormat``), and what every format asks of the
native model: its architecture's traits and which encoder family the format serves.

A format owns everything that differs between HF targets: its name (``--format``), the config.json
builder and the import-side config reader, the literal key map and the state-dict adapters in both
directions, which native configs it represents *exactly* (others are refused with the reasons), the
attention backends of the HF class (for the model card) and whether left padding is exact. Which
encoder family a format serves is not the format's to say: ``arch.EncoderFamily.hf_formats`` says it
(``encoder_of``, ``encoder_reasons``). The formats themselves are listed in ``formats.FORMATS``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from megatron_crossbert.arch import ENCODERS, REGISTRY, ArchSpec, get_arch, get_encoder
from megatron_crossbert.config import ModelConfig
from megatron_crossbert.convert.artifacts import TokenizerInfo
from megatron_crossbert.convert.errors import ConversionError


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


def encoder_of(fmt: HfFormat) -> str:
    """The encoder family (``arch.ENCODERS`` key) whose ``hf_formats`` lists ``fmt``: its HF class imports as it."""
    return next(name for name, family in ENCODERS.items() if fmt.name in family.hf_formats)


def encoder_reasons(fmt: HfFormat, model_cfg: ModelConfig) -> list[str]:
    """Empty when ``fmt`` serves ``model_cfg``'s encoder family, else the one reason it cannot."""
    if fmt.name in get_encoder(model_cfg.encoder).hf_formats:
        return []
    return [f"model.encoder={model_cfg.encoder!r} is not {fmt.base_class}'s layout (needs {encoder_of(fmt)!r})"]
