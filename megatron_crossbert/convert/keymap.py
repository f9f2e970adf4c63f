"""Literal key tables between our megatron state dicts and Hugging Face ``MegatronBert*`` ones.

Every renamed tensor is listed here as a (megatron template, HF template) pair, ``{i}`` standing for
the layer number, so a reviewer can check the mapping against both codebases line by line. Tensors
that need more than a rename (the fused QKV, synthesised token-type and pooler rows) are named here
too but transformed in ``adapter.py``. Megatron keys use the local-spec names; ``TE_ALIASES`` maps the
Transformer Engine spelling of the fused-norm parameters onto them.
"""

from __future__ import annotations

# Whole-model tensors of the encoder (HF keys relative to MegatronBertModel).
ENCODER_GLOBAL_KEYS: dict[str, str] = {
    "embedding.word_embeddings.weight": "embeddings.word_embeddings.weight",
    "embedding.position_embeddings.weight": "embeddings.position_embeddings.weight",
    "encoder.final_layernorm.weight": "encoder.ln.weight",
    "encoder.final_layernorm.bias": "encoder.ln.bias",
}

# Per-layer tensors that are plain copies.
ENCODER_LAYER_KEYS: dict[str, str] = {
    "encoder.layers.{i}.input_layernorm.weight": "encoder.layer.{i}.attention.ln.weight",
    "encoder.layers.{i}.input_layernorm.bias": "encoder.layer.{i}.attention.ln.bias",
    "encoder.layers.{i}.self_attention.linear_proj.weight": "encoder.layer.{i}.attention.output.dense.weight",
    "encoder.layers.{i}.self_attention.linear_proj.bias": "encoder.layer.{i}.attention.output.dense.bias",
    "encoder.layers.{i}.pre_mlp_layernorm.weight": "encoder.layer.{i}.ln.weight",
    "encoder.layers.{i}.pre_mlp_layernorm.bias": "encoder.layer.{i}.ln.bias",
    "encoder.layers.{i}.mlp.linear_fc1.weight": "encoder.layer.{i}.intermediate.dense.weight",
    "encoder.layers.{i}.mlp.linear_fc1.bias": "encoder.layer.{i}.intermediate.dense.bias",
    "encoder.layers.{i}.mlp.linear_fc2.weight": "encoder.layer.{i}.output.dense.weight",
    "encoder.layers.{i}.mlp.linear_fc2.bias": "encoder.layer.{i}.output.dense.bias",
}

# Fused QKV (megatron, one tensor) -> separate q/k/v (HF); split/merge in adapter.py.
ENCODER_QKV_KEYS: dict[str, tuple[str, str, str]] = {
    f"encoder.layers.{{i}}.self_attention.linear_qkv.{p}": tuple(
        f"encoder.layer.{{i}}.attention.self.{part}.{p}" for part in ("query", "key", "value"))
    for p in ("weight", "bias")
}

# BERT baseline MLM head (HF keys relative to MegatronBertForMaskedLM). The HF decoder weight is tied
# to the word embeddings exactly as megatron's output layer is, so it is not stored.
MLM_HEAD_KEYS: dict[str, str] = {
    "lm_head.dense.weight": "cls.predictions.transform.dense.weight",
    "lm_head.dense.bias": "cls.predictions.transform.dense.bias",
    "lm_head.layer_norm.weight": "cls.predictions.transform.LayerNorm.weight",
    "lm_head.layer_norm.bias": "cls.predictions.transform.LayerNorm.bias",
    "output_layer.bias": "cls.predictions.bias",
}

# HF tensors with no megatron counterpart: written as zeros on export, checked and dropped on import.
HF_TOKEN_TYPE_KEY = "embeddings.token_type_embeddings.weight"
HF_POOLER_KEYS: tuple[str, str] = ("pooler.dense.weight", "pooler.dense.bias")

# Prefix of the base model inside MegatronBertFor* heads (MegatronBertPreTrainedModel.base_model_prefix).
HF_BASE_PREFIX = "bert."

# Transformer Engine names of the norms fused into the following GEMM -> local-spec names.
TE_ALIASES: dict[str, str] = {
    "self_attention.linear_qkv.layer_norm_weight": "input_layernorm.weight",
    "self_attention.linear_qkv.layer_norm_bias": "input_layernorm.bias",
    "mlp.linear_fc1.layer_norm_weight": "pre_mlp_layernorm.weight",
    "mlp.linear_fc1.layer_norm_bias": "pre_mlp_layernorm.bias",
}

# Megatron prefixes that are knowingly not exported: the CrossBERT reconstruction branch (thrown away
# after pretraining) and, for CrossBERT, its LM head, which reads decoder outputs, not encoder ones.
RECONSTRUCTION_PREFIXES: tuple[str, ...] = ("decoder.", "mask_embedding", "decoder_position_embedding.")
HEAD_PREFIXES: tuple[str, ...] = ("lm_head.", "output_layer.")
CROSSBERT_DISCARDED_PREFIXES: tuple[str, ...] = RECONSTRUCTION_PREFIXES + HEAD_PREFIXES

# Tensor-parallel partition dim of each sharded megatron tensor (others are replicated across TP).
TP_PARTITION_DIMS: dict[str, int] = {
    "embedding.word_embeddings.weight": 0,
    "encoder.layers.{i}.self_attention.linear_qkv.weight": 0,
    "encoder.layers.{i}.self_attention.linear_qkv.bias": 0,
    "encoder.layers.{i}.self_attention.linear_proj.weight": 1,
    "encoder.layers.{i}.mlp.linear_fc1.weight": 0,
    "encoder.layers.{i}.mlp.linear_fc1.bias": 0,
    "encoder.layers.{i}.mlp.linear_fc2.weight": 1,
    "output_layer.bias": 0,
}


def expand(template: str, layer: int) -> str:
    """Fill the layer number into a key template."""
    return template.replace("{i}", str(layer))


def layer_template(key: str) -> tuple[str, int | None]:
    """'encoder.layers.3.mlp.x' -> ('encoder.layers.{i}.mlp.x', 3); other keys come back unchanged."""
    parts = key.split(".")
    if len(parts) > 2 and parts[0] == "encoder" and parts[1] == "layers" and parts[2].isdigit():
        return ".".join(parts[:2] + ["{i}"] + parts[3:]), int(parts[2])
    return key, None


def normalize_te_key(key: str) -> str:
    """Rewrite a Transformer Engine fused-norm key to the local-spec spelling (identity otherwise)."""
    for te_name, local_name in TE_ALIASES.items():
        if key.endswith("." + te_name):
            return key[: -len(te_name)] + local_name
    return key
