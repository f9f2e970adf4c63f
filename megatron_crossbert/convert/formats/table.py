"""The table of Hugging Face export formats: one ``HfFormat`` object per HF target class family.

``FORMATS`` is a literal table (no registration, nothing happens on import but building it). Which
formats serve which encoder family, and in which default priority, is said once, by
``arch.EncoderFamily.hf_formats``: the default format of a model is the first of its encoder's
``hf_formats`` that represents it exactly. The export and import drivers (``convert/export.py``,
``convert/importer.py``) and the benchmarks look a format up here and never branch on a target or
architecture name.

Listed today: ``xlmr-xl`` (``XLMRobertaXLModel``: SDPA/flash, the classic encoder's default),
``megatron-bert`` (``MegatronBertModel``: eager only, kept for compatibility) and ``modernbert``
(``ModernBertModel``: the modern encoder).

How to add a format:
1. Create ``convert/formats/<target>.py`` with a subclass of ``interface.HfFormat`` (see
   ``classic.ClassicFormat`` for a table-driven one). Reuse ``megatron_tensors.split_qkv``/``merge_qkv`` for
   megatron's head-interleaved QKV and the strict helpers of ``strict_mapping.py`` (``clean_megatron``,
   ``take``, ``reject_leftovers``, ``clean_hf``).
2. Add an instance to ``FORMATS`` below and its name to the ``hf_formats`` of the encoder family it
   serves in ``arch.ENCODERS`` (its position there sets its default priority).
3. ``unsupported`` must name every native config field it cannot represent (start from
   ``interface.encoder_reasons``), and ``check_importable`` every config.json value it cannot
   import, so nothing is ever exported or imported silently wrong.
4. Tests: the contract test (``tests/convert/test_contract.py``) covers every (arch, encoder, format)
   of the registries on its own; follow ``tests/convert/test_classic.py`` for AutoModel at every backend in
   ``attention_backends`` and ``tests/convert/test_tensor_parallel.py`` for TP shards.

When ``ModelConfig`` gains a field, the classic formats refuse every config until ``classic.py`` knows
it: add it to ``classic.EXPORTED_FIELDS`` or ``classic.NEUTRAL_FIELDS``. What an architecture's export
holds (decoder dropped, MLM head kept) comes from its ``arch.ArchSpec`` (``model_traits``).
"""

from __future__ import annotations

from megatron_crossbert.arch import ENCODERS, get_encoder
from megatron_crossbert.config import ModelConfig
from megatron_crossbert.convert.errors import ConversionError
from megatron_crossbert.convert.formats.interface import HfFormat
from megatron_crossbert.convert.formats.megatron_bert import MegatronBertFormat
from megatron_crossbert.convert.formats.modernbert import ModernBertFormat
from megatron_crossbert.convert.formats.xlmr_xl import XlmrXlFormat

FORMATS: dict[str, HfFormat] = {fmt.name: fmt for fmt in (XlmrXlFormat(), MegatronBertFormat(), ModernBertFormat())}
"""Every format by its ``--format`` name (the order of priority is ``hf_formats``', not this table's)."""


def format_names() -> list[str]:
    """Every format name, encoder family by family, each in its default priority."""
    return [name for family in ENCODERS.values() for name in family.hf_formats]


def all_formats() -> list[HfFormat]:
    """Every format, in ``format_names`` order."""
    return [FORMATS[name] for name in format_names()]


def get_format(name: str) -> HfFormat:
    """The format called ``name``; unknown names list the known ones."""
    if name not in FORMATS:
        raise ConversionError(f"unknown HF export format {name!r}; choose one of {format_names()}")
    return FORMATS[name]


def default_format(model_cfg: ModelConfig) -> HfFormat:
    """The first of the encoder's ``hf_formats`` (priority order) that represents ``model_cfg`` exactly."""
    reasons = {}
    for name in get_encoder(model_cfg.encoder).hf_formats:
        reasons[name] = FORMATS[name].unsupported(model_cfg)
        if not reasons[name]:
            return FORMATS[name]
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
