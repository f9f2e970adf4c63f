"""config.json helpers shared by every HF format: activation names, value checks, vocab layout.

Per-format config builders live in the format modules (``formats/megatron_bert.py``, ``formats/xlmr_xl.py``, ...);
what is common to all of them lives here once.
"""

from __future__ import annotations

from typing import Any

from megatron_crossbert.convert.errors import ConversionError

DEFAULT_TYPE_VOCAB_SIZE = 2
"""Zero token-type rows written on export: 2 so BERT-style tokenizers' pair ids (0/1) stay harmless."""

HIDDEN_ACT = {False: "gelu", True: "gelu_pytorch_tanh"}
"""bias_gelu_fusion -> HF hidden_act (megatron's fused bias-GELU is the tanh approximation)."""
IMPORTABLE_ACTS = {"gelu": False, "gelu_pytorch_tanh": True, "gelu_new": True}
"""HF hidden_act -> bias_gelu_fusion (``gelu_new`` is the same tanh formula)."""


def require_value(hf_cfg: dict, key: str, allowed: tuple, default: Any) -> None:
    """Refuse a config.json value outside ``allowed`` (``default`` when the key is absent)."""
    value = hf_cfg.get(key, default)
    if value not in allowed:
        raise ConversionError(f"config.json {key}={value!r} has no megatron-crossbert equivalent "
                              f"(supported: {list(allowed)})")


def vocab_layout(rows: int, vocab_size: int, multiple_hint: int = 128) -> tuple[int, int]:
    """(vocab_size, make_vocab_size_divisible_by) whose TP=1 padding reproduces ``rows`` embedding rows.

    The hint (the exporting run's multiple) is tried first, then powers of two dividing ``rows`` from
    small to large: the smallest multiple that works keeps ``padded_vocab_size(tp) == rows`` for the most
    TP sizes, so the imported checkpoint can be trained on at TP > 1 too.
    """
    if vocab_size > rows:
        raise ConversionError(f"tokenizer/vocab size {vocab_size} exceeds the {rows} embedding rows")
    powers = [1 << k for k in range(rows.bit_length()) if rows % (1 << k) == 0]
    for multiple in [multiple_hint, *powers, rows]:
        if -(-vocab_size // multiple) * multiple == rows:
            return vocab_size, multiple
    return rows, rows  # unreachable: multiple == rows always reproduces rows
