"""ModelConfig <-> Hugging Face ``MegatronBertConfig`` (config.json), with the exactness rules.

Export writes only configs whose HF forward equals ours: pre-LN LayerNorm encoder, learned absolute
positions, biases, erf GELU (``gelu``) or megatron's fused tanh GELU (``gelu_pytorch_tanh``), the
training ``layer_norm_eps`` (HF's default 1e-12 would be wrong) and zero token-type rows. Any
``ModelConfig`` field this module does not know is refused rather than ignored, so a future option
(say RMSNorm or RoPE) cannot be exported silently wrong. Import is the inverse, from config.json.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from megatron_crossbert.arch import get_encoder
from megatron_crossbert.config import ModelConfig
from megatron_crossbert.convert.adapter import DEFAULT_TYPE_VOCAB_SIZE
from megatron_crossbert.convert.errors import ConversionError

# ModelConfig fields that shape the HF forward and are written to config.json.
EXPORTED_FIELDS = frozenset({
    "arch", "vocab_size", "make_vocab_size_divisible_by", "hidden_size", "num_layers", "num_attention_heads",
    "ffn_hidden_size", "max_position_embeddings", "layernorm_epsilon", "bias_gelu_fusion"})
# Fields that do not change the exported encoder's eval-mode forward (decoder is discarded; dropout is
# off at inference; init and kernel choice do not change the math).
NEUTRAL_FIELDS = frozenset({
    "decoder_num_layers", "decoder_hidden_size", "decoder_num_attention_heads", "decoder_ffn_hidden_size",
    "hidden_dropout", "attention_dropout", "init_method_std", "transformer_impl", "rotary_base",
    "decoder_position_embedding", "encoder"})

HIDDEN_ACT = {False: "gelu", True: "gelu_pytorch_tanh"}
"""bias_gelu_fusion -> HF hidden_act (megatron's fused bias-GELU is the tanh approximation)."""
IMPORTABLE_ACTS = {"gelu": False, "gelu_pytorch_tanh": True, "gelu_new": True}


def check_exportable(model_cfg: ModelConfig) -> None:
    """Raise ``ConversionError`` unless every ModelConfig field has an exact HF MegatronBert meaning."""
    formats = get_encoder(model_cfg.encoder).hf_formats
    if "megatron-bert" not in formats:
        raise ConversionError(f"model.encoder={model_cfg.encoder!r} has no HF MegatronBert equivalent; "
                              f"its export formats are {list(formats)}")
    unknown = {f.name for f in dataclasses.fields(model_cfg)} - EXPORTED_FIELDS - NEUTRAL_FIELDS
    if unknown:
        raise ConversionError(f"ModelConfig fields {sorted(unknown)} have no known HF MegatronBert equivalent; "
                              "the exporter refuses rather than guessing (extend convert/hf_config.py)")


def mlm_head_exportable(model_cfg: ModelConfig) -> bool:
    """Whether the BERT MLM head maps exactly: megatron's head always uses erf GELU while HF's head uses
    ``hidden_act``, so with the tanh (fused) encoder GELU only the encoder has an exact target."""
    return model_cfg.arch == "bert" and not model_cfg.bias_gelu_fusion


def hf_config_dict(model_cfg: ModelConfig, vocab_rows: int, pad_token_id: int, with_mlm_head: bool) -> dict[str, Any]:
    """The config.json of the export; ``vocab_rows`` is the padded embedding table height."""
    return {
        "architectures": ["MegatronBertForMaskedLM" if with_mlm_head else "MegatronBertModel"],
        "model_type": "megatron-bert",
        "vocab_size": vocab_rows,
        "hidden_size": model_cfg.hidden_size,
        "num_hidden_layers": model_cfg.num_layers,
        "num_attention_heads": model_cfg.num_attention_heads,
        "intermediate_size": model_cfg.ffn,
        "hidden_act": HIDDEN_ACT[model_cfg.bias_gelu_fusion],
        "hidden_dropout_prob": model_cfg.hidden_dropout,
        "attention_probs_dropout_prob": model_cfg.attention_dropout,
        "max_position_embeddings": model_cfg.max_position_embeddings,
        "type_vocab_size": DEFAULT_TYPE_VOCAB_SIZE,
        "initializer_range": model_cfg.init_method_std,
        "layer_norm_eps": model_cfg.layernorm_epsilon,
        "pad_token_id": pad_token_id,
        "position_embedding_type": "absolute",
        "tie_word_embeddings": True,
        "torch_dtype": "float32",
    }


def _require_value(hf_cfg: dict, key: str, allowed: tuple, default: Any) -> None:
    value = hf_cfg.get(key, default)
    if value not in allowed:
        raise ConversionError(f"config.json {key}={value!r} has no megatron-crossbert equivalent "
                              f"(supported: {list(allowed)})")


def check_importable(hf_cfg: dict) -> None:
    """Refuse HF configs whose forward our encoder cannot reproduce exactly."""
    _require_value(hf_cfg, "model_type", ("megatron-bert",), None)
    _require_value(hf_cfg, "hidden_act", tuple(IMPORTABLE_ACTS), "gelu")
    _require_value(hf_cfg, "position_embedding_type", ("absolute",), "absolute")
    _require_value(hf_cfg, "is_decoder", (False,), False)
    _require_value(hf_cfg, "add_cross_attention", (False,), False)
    _require_value(hf_cfg, "tie_word_embeddings", (True,), True)


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


def model_config_from_hf(hf_cfg: dict, base: ModelConfig, vocab_size: int | None) -> ModelConfig:
    """HF config.json (checked by ``check_importable``) over ``base`` (decoder, dropout, arch defaults)."""
    rows = int(hf_cfg["vocab_size"])
    vocab, multiple = vocab_layout(rows, vocab_size or rows, base.make_vocab_size_divisible_by)
    return dataclasses.replace(
        base, vocab_size=vocab, make_vocab_size_divisible_by=multiple,
        hidden_size=int(hf_cfg["hidden_size"]), num_layers=int(hf_cfg["num_hidden_layers"]),
        num_attention_heads=int(hf_cfg["num_attention_heads"]),
        ffn_hidden_size=int(hf_cfg["intermediate_size"]),
        max_position_embeddings=int(hf_cfg["max_position_embeddings"]),
        layernorm_epsilon=float(hf_cfg.get("layer_norm_eps", 1e-12)),
        bias_gelu_fusion=IMPORTABLE_ACTS[hf_cfg.get("hidden_act", "gelu")],
    )
