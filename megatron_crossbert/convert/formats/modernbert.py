"""Format ``modernbert``: the modern encoder as HF ``ModernBertModel`` / ``ModernBertForMaskedLM``.

The modern family is ModernBERT's architecture (``arch.ENCODERS['modern']``), so the mapping is a rename
plus two tensor changes:

- QKV: megatron's head-interleaved ``[heads, 3, d, h]`` -> ``Wqkv``'s ``[q | k | v]`` blocks
  (``megatron_tensors.split_qkv`` / ``merge_qkv``);
- layer 0 has no attention norm on either side (``attn_norm`` is ``nn.Identity`` in HF).

GeGLU needs no change at TP=1: megatron computes ``gelu(fc1[:ffn]) * fc1[ffn:]`` and HF
``act(input) * gate`` with ``input, gate = Wi(x).chunk(2)``. Local/global attention is ModernBERT's
own (``attention_windows``): ``window_fields`` writes ``layer_types``, ``local_attention``,
``global_attn_every_n_layers`` and both RoPE bases, in transformers 5's form (``layer_types``,
``rope_parameters``) and in the flat keys older releases read; windows off is every layer global with
both bases equal to ``rotary_base``. Our norms have biases, so ``norm_bias=True``. Dropouts are
written as 0 (an inference export).

The functions take and return plain TP=1 state dicts with the local-spec names (what
``megatron_tensors.gather_tensor_parallel`` produces). ``ModernBertFormat`` plugs them into the format
table (``formats/table.py``; ``arch.ENCODERS['modern'].hf_formats`` names it). ModernBert supports eager,
SDPA and FlashAttention-2; its positions are ``0..s-1`` like ``encode``'s, and padded keys are masked,
so right- and left-padded batches are both exact.
"""

from __future__ import annotations

import dataclasses

import torch

from megatron_crossbert.attention_windows import GLOBAL, LOCAL, every_n_of_layer_types, hf_layer_types
from megatron_crossbert.config import ModelConfig
from megatron_crossbert.convert.errors import ConversionError
from megatron_crossbert.convert.formats.interface import ExportContext, HfFormat, encoder_reasons
from megatron_crossbert.convert.megatron_tensors import merge_qkv, split_qkv

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


_RECONSTRUCTION = ("decoder.", "decoder_position_embedding.", "context_position_embedding.", "mask_embedding",
                   "lm_head.", "output_layer.")
_REQUIRED = {"layer_types": None, "attention_bias": False, "mlp_bias": False, "norm_bias": True,
             "hidden_activation": "gelu", "classifier_activation": "gelu", "classifier_bias": False,
             "decoder_bias": True}


def _special_ids(ctx: ExportContext) -> dict[str, int]:
    tok = ctx.tokenizer
    ids = {"pad": tok.pad_token_id, "cls": tok.cls_token_id, "sep": tok.sep_token_id, "mask": tok.mask_token_id}
    return {role: (-1 if value is None else int(value)) for role, value in ids.items()}


class ModernBertFormat(HfFormat):
    name = "modernbert"
    model_type = "modernbert"
    base_class = "ModernBertModel"
    mlm_class = "ModernBertForMaskedLM"
    attention_backends = ("sdpa", "eager", "flash_attention_2")
    left_padding = True

    def unsupported(self, model_cfg: ModelConfig) -> list[str]:
        return encoder_reasons(self, model_cfg)

    def mlm_head_exact(self, model_cfg: ModelConfig) -> bool:
        return True  # dense (no bias), exact GELU, LayerNorm, tied decoder with bias: ModernBert's head

    def hf_config(self, model_cfg: ModelConfig, ctx: ExportContext, with_mlm_head: bool) -> dict:
        return modernbert_config(model_cfg, ctx.vocab_rows, _special_ids(ctx), with_mlm_head)

    def to_hf(self, state: dict, model_cfg: ModelConfig, ctx: ExportContext,
              with_mlm_head: bool) -> dict[str, torch.Tensor]:
        out = to_modernbert(state, model_cfg, with_mlm_head)
        skipped = () if with_mlm_head else _RECONSTRUCTION
        exported = set(from_modernbert(out, model_cfg, with_mlm_head))
        leftovers = sorted(k for k in state if k not in exported and not k.startswith(skipped)
                           and not k.endswith("_extra_state"))
        if leftovers:
            raise ConversionError(f"native tensors with no ModernBert counterpart: {leftovers[:5]}")
        return out

    def check_importable(self, hf_cfg: dict) -> None:
        wrong = [f"{key}={hf_cfg.get(key)!r} (needs {want!r})" for key, want in _REQUIRED.items()
                 if want is not None and hf_cfg.get(key, want) != want]
        try:
            windows_from_hf(hf_cfg)
        except (ValueError, KeyError) as err:
            wrong.append(str(err))
        if wrong:
            raise ConversionError(f"config.json: not importable as the modern encoder: {'; '.join(wrong)}")

    def model_config_from_hf(self, hf_cfg: dict, base: ModelConfig, vocab_size: int | None) -> ModelConfig:
        return dataclasses.replace(
            base, encoder="modern", vocab_size=vocab_size or hf_cfg["vocab_size"], hidden_size=hf_cfg["hidden_size"],
            num_layers=hf_cfg["num_hidden_layers"], num_attention_heads=hf_cfg["num_attention_heads"],
            ffn_hidden_size=hf_cfg["intermediate_size"],
            max_position_embeddings=hf_cfg.get("max_position_embeddings", base.max_position_embeddings),
            layernorm_epsilon=hf_cfg.get("norm_eps", base.layernorm_epsilon), **windows_from_hf(hf_cfg))

    def from_hf(self, hf_state: dict, hf_cfg: dict, model_cfg: ModelConfig) -> dict[str, torch.Tensor]:
        return from_modernbert(hf_state, model_cfg, self.has_mlm_head(hf_state))

    def has_mlm_head(self, hf_state: dict) -> bool:
        return "head.dense.weight" in hf_state

    def card_notes(self, model_cfg: ModelConfig) -> list[str]:
        if model_cfg.windowed:
            attention = (f"layer i global when i % {model_cfg.global_attn_every_n_layers} == 0 (RoPE theta "
                         f"{model_cfg.rotary_base:g}), else local with a {model_cfg.local_attention}-token window "
                         f"(RoPE theta {model_cfg.local_rotary_base:g})")
        else:
            attention = f"RoPE (theta {model_cfg.rotary_base:g}) in every layer (all global attention)"
        return [f"ModernBERT layout: {attention}, GeGLU MLP, no linear biases, LayerNorms with biases "
                "(norm_bias=true).",
                "Positions are 0..s-1 per row and padded keys are masked: right and left padding are exact."]

