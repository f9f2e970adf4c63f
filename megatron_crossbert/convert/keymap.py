"""Native (megatron) side of the key tables, shared by every HF format.

The per-format literal HF key maps live in the format modules (``formats/megatron_bert.py``, ``formats/xlmr_xl.py``):
each lists (native, HF) pairs, ``{i}`` standing for the layer number, so a reviewer can check a mapping
against both codebases line by line. Here: the Transformer Engine spellings normalised onto local-spec
names, the prefixes knowingly left out of exports, and the tensor-parallel partition dims.
"""

from __future__ import annotations

# Transformer Engine names of the norms fused into the following GEMM -> local-spec names.
TE_ALIASES: dict[str, str] = {
    "self_attention.linear_qkv.layer_norm_weight": "input_layernorm.weight",
    "self_attention.linear_qkv.layer_norm_bias": "input_layernorm.bias",
    "mlp.linear_fc1.layer_norm_weight": "pre_mlp_layernorm.weight",
    "mlp.linear_fc1.layer_norm_bias": "pre_mlp_layernorm.bias",
}

# Megatron prefixes that are knowingly not exported: a reconstruction branch (thrown away after
# pretraining) and an LM head that has no exact HF target (e.g. one that reads decoder outputs).
RECONSTRUCTION_PREFIXES: tuple[str, ...] = ("decoder.", "mask_embedding", "decoder_position_embedding.",
                                           "context_position_embedding.")
HEAD_PREFIXES: tuple[str, ...] = ("lm_head.", "output_layer.")

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

# Gated (GeGLU) fc1 tensors: megatron shards each half separately, so a TP rank holds
# ``[gate_r | up_r]`` and a plain concatenation would give ``[gate_0 | up_0 | gate_1 | up_1]``.
GATED_FC1: frozenset[str] = frozenset({"encoder.layers.{i}.mlp.linear_fc1.weight",
                                       "encoder.layers.{i}.mlp.linear_fc1.bias"})


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
