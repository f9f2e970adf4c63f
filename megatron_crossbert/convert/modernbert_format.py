"""Format ``modernbert``: the modern encoder as HF ``ModernBertModel`` / ``ModernBertForMaskedLM``.

Plugs the tensor and config maps of ``convert/modernbert.py`` into the convert package's format
table (``convert/formats.FORMATS``; ``arch.ENCODERS['modern'].hf_formats`` names it). ModernBert supports eager,
SDPA and FlashAttention-2; its positions are ``0..s-1`` like ``encode``'s, and padded keys are masked,
so right- and left-padded batches are both exact.
"""

from __future__ import annotations

import dataclasses

import torch

from megatron_crossbert.config import ModelConfig
from megatron_crossbert.convert.errors import ConversionError
from megatron_crossbert.convert.hf_format import ExportContext, HfFormat, encoder_reasons
from megatron_crossbert.convert.modernbert import from_modernbert, modernbert_config, to_modernbert, windows_from_hf

_RECONSTRUCTION = ("decoder.", "decoder_position_embedding.", "mask_embedding", "lm_head.", "output_layer.")
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

