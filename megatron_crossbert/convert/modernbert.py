"""The modern encoder <-> Hugging Face ``ModernBertModel`` / ``ModernBertForMaskedLM``: config and tensors.

The modern family is ModernBERT's layout (``arch.ENCODERS['modern']``), so the mapping is a rename
plus two layout changes:

- QKV: megatron's head-interleaved ``[heads, 3, d, h]`` -> ``Wqkv``'s ``[q | k | v]`` blocks
  (``layout.split_qkv`` / ``merge_qkv``);
- layer 0 has no attention norm on either side (``attn_norm`` is ``nn.Identity`` in HF).

GeGLU needs no change at TP=1: megatron computes ``gelu(fc1[:ffn]) * fc1[ffn:]`` and HF
``act(input) * gate`` with ``input, gate = Wi(x).chunk(2)``. Local/global attention is ModernBERT's
own (``attention_windows``): ``window_fields`` writes ``layer_types``, ``local_attention``,
``global_attn_every_n_layers`` and both RoPE bases, in transformers 5's form (``layer_types``,
``rope_parameters``) and in the flat keys older releases read; windows off is every layer global with
both bases equal to ``rotary_base``. Our norms have biases, so ``norm_bias=True``. Dropouts are
written as 0 (an inference export).

The functions take and return plain TP=1 state dicts with the local-spec names (what
``layout.gather_tensor_parallel`` produces); they plug into the convert package's format registry.
"""

from __future__ import annotations

import torch

from megatron_crossbert.attention_windows import GLOBAL, LOCAL, every_n_of_layer_types, hf_layer_types
from megatron_crossbert.config import ModelConfig
from megatron_crossbert.convert.errors import ConversionError
from megatron_crossbert.convert.layout import merge_qkv, split_qkv

GLOBAL_KEYS: dict[str, str] = {
    "embedding.word_embeddings.weight": "embeddings.tok_embeddings.weight",
    "embedding.norm.weight": "embeddings.norm.weight",
    "embedding.norm.bias": "embeddings.norm.bias",
    "encoder.final_layernorm.weight": "final_norm.weight",
    "encoder.final_layernorm.bias": "final_norm.bias",
}
LAYER_KEYS: dict[str, str] = {
    "encoder.layers.{i}.input_layernorm.weight": "layers.{i}.attn_norm.weight",
    "encoder.layers.{i}.input_layernorm.bias": "layers.{i}.attn_norm.bias",
    "encoder.layers.{i}.self_attention.linear_proj.weight": "layers.{i}.attn.Wo.weight",
    "encoder.layers.{i}.pre_mlp_layernorm.weight": "layers.{i}.mlp_norm.weight",
    "encoder.layers.{i}.pre_mlp_layernorm.bias": "layers.{i}.mlp_norm.bias",
    "encoder.layers.{i}.mlp.linear_fc1.weight": "layers.{i}.mlp.Wi.weight",
    "encoder.layers.{i}.mlp.linear_fc2.weight": "layers.{i}.mlp.Wo.weight",
}
QKV_KEYS = ("encoder.layers.{i}.self_attention.linear_qkv.weight", "layers.{i}.attn.Wqkv.weight")
MLM_HEAD_KEYS: dict[str, str] = {
    "lm_head.dense.weight": "head.dense.weight",
    "lm_head.layer_norm.weight": "head.norm.weight",
    "lm_head.layer_norm.bias": "head.norm.bias",
    "output_layer.bias": "decoder.bias",
}
HF_BASE_PREFIX = "model."
"""Prefix of the base model inside ``ModernBertForMaskedLM``."""
HF_DEFAULT_LOCAL_ATTENTION = 128
"""``ModernBertConfig.local_attention``'s default: what an all-global export writes there."""


def window_fields(model_cfg: ModelConfig) -> dict:
    """config.json entries of the encoder's attention pattern and both RoPE bases."""
    every = model_cfg.global_attn_every_n_layers if model_cfg.windowed else 1
    window = model_cfg.local_attention if model_cfg.windowed else HF_DEFAULT_LOCAL_ATTENTION
    global_base = float(model_cfg.rotary_base)
    local_base = float(model_cfg.local_rotary_base) if model_cfg.windowed else global_base
    return {"layer_types": hf_layer_types(model_cfg.num_layers, window, every), "local_attention": window,
            "global_attn_every_n_layers": every, "global_rope_theta": global_base, "local_rope_theta": local_base,
            "rope_parameters": {GLOBAL: {"rope_type": "default", "rope_theta": global_base},
                                LOCAL: {"rope_type": "default", "rope_theta": local_base}}}


def windows_from_hf(hf_cfg: dict) -> dict:
    """``ModelConfig`` fields (windows and RoPE bases) of an HF ModernBert config (all global: only
    ``rotary_base``); ValueError when its ``layer_types`` is not ModernBERT's global-every-n pattern."""
    layers = hf_cfg["num_hidden_layers"]
    rope = hf_cfg.get("rope_parameters") or {}
    global_base = rope.get(GLOBAL, {}).get("rope_theta", hf_cfg.get("global_rope_theta", 160000.0))
    local_base = rope.get(LOCAL, {}).get("rope_theta", hf_cfg.get("local_rope_theta", 10000.0))
    window = int(hf_cfg.get("local_attention", HF_DEFAULT_LOCAL_ATTENTION))
    types = hf_cfg.get("layer_types") or hf_layer_types(layers, window, hf_cfg.get("global_attn_every_n_layers", 3))
    every = every_n_of_layer_types(list(types), window)
    if every == 1:  # all global: the window options stay the base config's
        return {"local_attention": 0, "rotary_base": float(global_base)}
    return {"local_attention": window, "global_attn_every_n_layers": every, "rotary_base": float(global_base),
            "local_rotary_base": float(local_base)}


def modernbert_config(model_cfg: ModelConfig, vocab_rows: int, special_ids: dict[str, int],
                      masked_lm: bool) -> dict:
    """config.json of the export; ``vocab_rows`` is the (padded) embedding height that is written."""
    layers = model_cfg.num_layers
    return {
        "architectures": ["ModernBertForMaskedLM" if masked_lm else "ModernBertModel"],
        "model_type": "modernbert", "vocab_size": vocab_rows, "hidden_size": model_cfg.hidden_size,
        "intermediate_size": model_cfg.ffn, "num_hidden_layers": layers,
        "num_attention_heads": model_cfg.num_attention_heads, "hidden_activation": "gelu",
        "max_position_embeddings": model_cfg.max_position_embeddings, "norm_eps": model_cfg.layernorm_epsilon,
        "norm_bias": True, "attention_bias": False, "mlp_bias": False, "decoder_bias": True,
        "classifier_bias": False, "classifier_activation": "gelu", "tie_word_embeddings": True,
        **window_fields(model_cfg),
        "embedding_dropout": 0.0, "attention_dropout": 0.0, "mlp_dropout": 0.0,
        "initializer_range": model_cfg.init_method_std,
        "pad_token_id": special_ids["pad"], "cls_token_id": special_ids["cls"], "bos_token_id": special_ids["cls"],
        "sep_token_id": special_ids["sep"], "eos_token_id": special_ids["sep"], "mask_token_id": special_ids["mask"],
    }


def _layer_pairs(model_cfg: ModelConfig) -> list[tuple[str, str]]:
    """(native, HF) names of every plain-copy tensor; layer 0 has no attention norm."""
    pairs = list(GLOBAL_KEYS.items())
    for i in range(model_cfg.num_layers):
        pairs += [(n.format(i=i), h.format(i=i)) for n, h in LAYER_KEYS.items()
                  if i > 0 or "input_layernorm" not in n]
    return pairs


def _take(source: dict[str, torch.Tensor], key: str, where: str) -> torch.Tensor:
    if key not in source:
        raise ConversionError(f"{where}: missing tensor {key!r}")
    return source[key]


def to_modernbert(native: dict[str, torch.Tensor], model_cfg: ModelConfig,
                  masked_lm: bool) -> dict[str, torch.Tensor]:
    """TP=1 native state dict -> ModernBert state dict (``decoder.weight`` is tied, not stored)."""
    prefix = HF_BASE_PREFIX if masked_lm else ""
    out = {prefix + hf: _take(native, n, "native checkpoint").clone() for n, hf in _layer_pairs(model_cfg)}
    for i in range(model_cfg.num_layers):
        fused = _take(native, QKV_KEYS[0].format(i=i), "native checkpoint")
        out[prefix + QKV_KEYS[1].format(i=i)] = torch.cat(split_qkv(fused, model_cfg.num_attention_heads))
    if masked_lm:
        out.update({hf: _take(native, n, "native checkpoint").clone() for n, hf in MLM_HEAD_KEYS.items()})
    return out


def from_modernbert(hf: dict[str, torch.Tensor], model_cfg: ModelConfig,
                    masked_lm: bool) -> dict[str, torch.Tensor]:
    """Inverse of ``to_modernbert`` (tied ``decoder.weight`` ignored); unknown HF tensors are an error."""
    prefix = HF_BASE_PREFIX if masked_lm else ""
    hf = {k: v for k, v in hf.items() if k != "decoder.weight"}
    out = {n: _take(hf, prefix + h, "HF checkpoint").clone() for n, h in _layer_pairs(model_cfg)}
    used = {prefix + h for _, h in _layer_pairs(model_cfg)}
    for i in range(model_cfg.num_layers):
        key = prefix + QKV_KEYS[1].format(i=i)
        query, keys, values = _take(hf, key, "HF checkpoint").chunk(3)
        out[QKV_KEYS[0].format(i=i)] = merge_qkv(query, keys, values, model_cfg.num_attention_heads)
        used.add(key)
    if masked_lm:
        out.update({n: _take(hf, h, "HF checkpoint").clone() for n, h in MLM_HEAD_KEYS.items()})
        used.update(MLM_HEAD_KEYS.values())
    leftovers = sorted(set(hf) - used)
    if leftovers:
        raise ConversionError(f"HF checkpoint: tensors with no native counterpart: {leftovers[:5]}")
    return out
