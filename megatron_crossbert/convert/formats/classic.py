"""The classic encoder (pre-LN BERT: learned absolute positions, biases, GELU MLP) as a table-driven format.

Both classic targets (``MegatronBertModel``, ``XLMRobertaXLModel``) compute the same forward as ours:
pre-LN layers, a final LayerNorm, no embedding LayerNorm, zero token types. They differ only in key
names, the MLM head's names and activation, and the position table (XLM-R shifts it by ``pad + 1``
rows). ``ClassicFormat`` does the mapping from literal per-format tables plus those two hooks;
the exactness rules of the classic encoder (which ``ModelConfig`` fields it can represent) live here.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import torch

from megatron_crossbert.config import ModelConfig
from megatron_crossbert.convert import hf_config, strict_mapping
from megatron_crossbert.convert.errors import ConversionError
from megatron_crossbert.convert.formats.interface import ExportContext, HfFormat, encoder_reasons, model_traits
from megatron_crossbert.convert.keymap import expand
from megatron_crossbert.convert.megatron_tensors import merge_qkv, split_qkv

# ModelConfig fields that shape the classic encoder's forward and are written to config.json.
EXPORTED_FIELDS = frozenset({
    "vocab_size", "make_vocab_size_divisible_by", "hidden_size", "num_layers", "num_attention_heads",
    "ffn_hidden_size", "max_position_embeddings", "layernorm_epsilon", "bias_gelu_fusion"})
# Fields that do not change the exported encoder's eval-mode forward (the decoder is discarded; dropout
# is off at inference; init and kernel choice (transformer_impl, attention_backend) do not change the math;
# arch decides traits only; windows and RoPE exist only on the modern encoder: ModelConfig refuses
# local_attention on the classic one).
NEUTRAL_FIELDS = frozenset({
    "arch", "decoder_num_layers", "decoder_hidden_size", "decoder_num_attention_heads",
    "decoder_ffn_hidden_size", "decoder_cross_attention_only", "hidden_dropout", "attention_dropout",
    "init_method_std", "transformer_impl", "attention_backend", "rotary_base", "local_rotary_base", "local_attention",
    "global_attn_every_n_layers",
    "decoder_position_embedding", "decoder_context_position_embedding", "encoder_token_loss_weight",
    "sparse_prediction"})
# Fields checked against the registry: which encoder families a format serves is ``arch.EncoderFamily.hf_formats``.
REGISTRY_FIELDS = frozenset({"encoder"})

# Megatron tensors of the classic encoder (local-spec names; TE names are normalised before).
NATIVE_GLOBAL = ("embedding.word_embeddings.weight", "embedding.position_embeddings.weight",
                 "encoder.final_layernorm.weight", "encoder.final_layernorm.bias")
NATIVE_LAYER = ("input_layernorm.weight", "input_layernorm.bias", "self_attention.linear_proj.weight",
                "self_attention.linear_proj.bias", "pre_mlp_layernorm.weight", "pre_mlp_layernorm.bias",
                "mlp.linear_fc1.weight", "mlp.linear_fc1.bias", "mlp.linear_fc2.weight", "mlp.linear_fc2.bias")
NATIVE_QKV = ("self_attention.linear_qkv.weight", "self_attention.linear_qkv.bias")
NATIVE_MLM_HEAD = ("lm_head.dense.weight", "lm_head.dense.bias", "lm_head.layer_norm.weight",
                   "lm_head.layer_norm.bias", "output_layer.bias")
POSITION_KEY = "embedding.position_embeddings.weight"
WORD_KEY = "embedding.word_embeddings.weight"

# HF names every BERT-family class shares (relative to the base model): the formats add their own
# LayerNorm and head names to these.
HF_LAYER = "encoder.layer.{i}."
BERT_FAMILY_LAYER_KEYS: dict[str, str] = {
    "self_attention.linear_proj.weight": HF_LAYER + "attention.output.dense.weight",
    "self_attention.linear_proj.bias": HF_LAYER + "attention.output.dense.bias",
    "mlp.linear_fc1.weight": HF_LAYER + "intermediate.dense.weight",
    "mlp.linear_fc1.bias": HF_LAYER + "intermediate.dense.bias",
    "mlp.linear_fc2.weight": HF_LAYER + "output.dense.weight",
    "mlp.linear_fc2.bias": HF_LAYER + "output.dense.bias",
}
BERT_FAMILY_QKV_KEYS: dict[str, tuple[str, str, str]] = {
    f"self_attention.linear_qkv.{p}": tuple(f"{HF_LAYER}attention.self.{part}.{p}"
                                            for part in ("query", "key", "value"))
    for p in ("weight", "bias")
}


def classic_unsupported(model_cfg: ModelConfig) -> list[str]:
    """Why the classic HF targets cannot represent ``model_cfg``'s fields (unknown fields are refused, not ignored)."""
    names = {f.name for f in dataclasses.fields(model_cfg)}
    unknown = sorted(names - EXPORTED_FIELDS - NEUTRAL_FIELDS - REGISTRY_FIELDS)
    return [f"ModelConfig fields {unknown} have no known classic-encoder equivalent "
            "(extend convert/formats/classic.py)"] if unknown else []


def _shapes(cfg: ModelConfig, rows: int) -> dict[str, tuple[int, ...]]:
    """Expected native shapes of the tensors whose size the HF config depends on."""
    h, layer = cfg.hidden_size, "encoder.layers.{i}."
    return {WORD_KEY: (rows, h), POSITION_KEY: (cfg.max_position_embeddings, h),
            layer + "self_attention.linear_qkv.weight": (3 * h, h),
            layer + "self_attention.linear_qkv.bias": (3 * h,),
            layer + "mlp.linear_fc1.weight": (cfg.ffn, h), layer + "mlp.linear_fc2.weight": (h, cfg.ffn)}


class ClassicFormat(HfFormat):
    """Table-driven classic-encoder format; subclasses give the literal HF names and two hooks."""

    global_keys: ClassVar[dict[str, str]]
    """``NATIVE_GLOBAL`` key -> HF key (relative to the base model)."""
    layer_keys: ClassVar[dict[str, str]]
    """``NATIVE_LAYER`` suffix -> HF per-layer template (``{i}`` = layer)."""
    qkv_keys: ClassVar[dict[str, tuple[str, str, str]]] = BERT_FAMILY_QKV_KEYS
    """``NATIVE_QKV`` suffix -> HF (query, key, value) templates."""
    mlm_head_keys: ClassVar[dict[str, str]]
    """``NATIVE_MLM_HEAD`` key -> HF key (relative to the MLM class)."""
    mlm_decoder_keys: ClassVar[tuple[str, str]]
    """HF (decoder weight, decoder bias) keys: tied to the embeddings / the head bias, so not stored."""
    token_type_key: ClassVar[str] = "embeddings.token_type_embeddings.weight"
    """Synthesised all-zero token-type table (our models have none)."""
    pooler_keys: ClassVar[tuple[str, str]] = ("pooler.dense.weight", "pooler.dense.bias")
    """Synthesised zero pooler (untrained; loading then reports nothing missing)."""
    base_prefix: ClassVar[str]
    """Prefix of the base model inside the MLM class."""

    def position_offset(self, pad_token_id: int) -> int:
        """Rows of the HF position table before native position 0."""
        return 0

    def unsupported(self, model_cfg: ModelConfig) -> list[str]:
        return encoder_reasons(self, model_cfg) + classic_unsupported(model_cfg)

    def common_config(self, model_cfg: ModelConfig, ctx: ExportContext, with_mlm_head: bool) -> dict[str, Any]:
        """The config.json fields both classic targets share."""
        offset = self.position_offset(ctx.tokenizer.pad_token_id)
        return {
            "architectures": [self.mlm_class if with_mlm_head else self.base_class],
            "model_type": self.model_type, "vocab_size": ctx.vocab_rows,
            "hidden_size": model_cfg.hidden_size, "num_hidden_layers": model_cfg.num_layers,
            "num_attention_heads": model_cfg.num_attention_heads, "intermediate_size": model_cfg.ffn,
            "hidden_act": hf_config.HIDDEN_ACT[model_cfg.bias_gelu_fusion],
            "hidden_dropout_prob": model_cfg.hidden_dropout,
            "attention_probs_dropout_prob": model_cfg.attention_dropout,
            "max_position_embeddings": model_cfg.max_position_embeddings + offset,
            "type_vocab_size": hf_config.DEFAULT_TYPE_VOCAB_SIZE,
            "initializer_range": model_cfg.init_method_std, "layer_norm_eps": model_cfg.layernorm_epsilon,
            "pad_token_id": ctx.tokenizer.pad_token_id, "position_embedding_type": "absolute",
            "tie_word_embeddings": True, "torch_dtype": "float32",
        }

    def hf_config(self, model_cfg: ModelConfig, ctx: ExportContext, with_mlm_head: bool) -> dict[str, Any]:
        return self.common_config(model_cfg, ctx, with_mlm_head)

    # ---- native -> HF -------------------------------------------------------------------------
    def _encoder_to_hf(self, src: dict, cfg: ModelConfig, shapes: dict) -> dict[str, torch.Tensor]:
        out = {hf: strict_mapping.take(src, mg, shapes.get(mg)) for mg, hf in self.global_keys.items()}
        for i in range(cfg.num_layers):
            for suffix, hf in self.layer_keys.items():
                mg = "encoder.layers.{i}." + suffix
                out[expand(hf, i)] = strict_mapping.take(src, expand(mg, i), shapes.get(mg))
            for suffix, hf_parts in self.qkv_keys.items():
                mg = "encoder.layers.{i}." + suffix
                fused = strict_mapping.take(src, expand(mg, i), shapes.get(mg))
                for hf, part in zip(hf_parts, split_qkv(fused, cfg.num_attention_heads)):
                    out[expand(hf, i)] = part
        return out

    def to_hf(self, state: dict, model_cfg: ModelConfig, ctx: ExportContext,
              with_mlm_head: bool) -> dict[str, torch.Tensor]:
        """Native -> HF base model keys (+ a zero, untrained pooler), or MLM-class keys with the head."""
        traits = model_traits(model_cfg)
        if with_mlm_head and not (traits.encoder_mlm_head and self.mlm_class):
            raise ConversionError(f"this model has no MLM head on the encoder output for {self.name}")
        src = strict_mapping.clean_megatron(state)
        out = self._encoder_to_hf(src, model_cfg, _shapes(model_cfg, src.get(WORD_KEY, torch.empty(0)).shape[0]))
        positions = out[self.global_keys[POSITION_KEY]]
        offset = self.position_offset(ctx.tokenizer.pad_token_id)
        out[self.global_keys[POSITION_KEY]] = torch.cat([positions.new_zeros(offset, positions.shape[1]), positions])
        out[self.token_type_key] = torch.zeros(hf_config.DEFAULT_TYPE_VOCAB_SIZE, model_cfg.hidden_size)
        if with_mlm_head:
            strict_mapping.check_tied(src.pop("output_layer.weight", None), out[self.global_keys[WORD_KEY]],
                               "output_layer.weight")
            out = {self.base_prefix + key: value for key, value in out.items()}
            out.update({hf: strict_mapping.take(src, mg) for mg, hf in self.mlm_head_keys.items()})
        else:
            h = model_cfg.hidden_size
            out.update(zip(self.pooler_keys, (torch.zeros(h, h), torch.zeros(h))))
        strict_mapping.reject_leftovers(src, strict_mapping.discarded_prefixes(traits, with_mlm_head), self.base_class)
        return out

    # ---- HF -> native -------------------------------------------------------------------------
    def has_mlm_head(self, hf_state: dict) -> bool:
        heads = {key.split(".")[0] + "." for key in self.mlm_head_keys.values()}
        return any(key.startswith(tuple(heads)) for key in hf_state)

    def _encoder_from_hf(self, src: dict, cfg: ModelConfig, offset: int) -> dict[str, torch.Tensor]:
        out = {mg: strict_mapping.take(src, hf) for mg, hf in self.global_keys.items()}
        if out[POSITION_KEY].shape[0] <= offset:
            raise ConversionError(f"position table has {out[POSITION_KEY].shape[0]} rows, not more than "
                                  f"the {offset} rows before position 0")
        out[POSITION_KEY] = out[POSITION_KEY][offset:].clone()
        for i in range(cfg.num_layers):
            for suffix, hf in self.layer_keys.items():
                out[expand("encoder.layers.{i}." + suffix, i)] = strict_mapping.take(src, expand(hf, i))
            for suffix, hf_parts in self.qkv_keys.items():
                q, k, v = (strict_mapping.take(src, expand(hf, i)) for hf in hf_parts)
                out[expand("encoder.layers.{i}." + suffix, i)] = merge_qkv(q, k, v, cfg.num_attention_heads)
        return out

    def _mlm_head_from_hf(self, src: dict, word_embeddings: torch.Tensor) -> dict[str, torch.Tensor]:
        weight_key, bias_key = self.mlm_decoder_keys
        strict_mapping.check_tied(src.pop(weight_key, None), word_embeddings, weight_key)
        src.pop(bias_key, None)  # tied to the head bias in HF
        return {mg: strict_mapping.take(src, hf) for mg, hf in self.mlm_head_keys.items()}

    def from_hf(self, hf_state: dict, hf_cfg: dict, model_cfg: ModelConfig) -> dict[str, torch.Tensor]:
        """HF base or MLM state -> native encoder (+ LM head). The pooler is dropped (unused by our
        models); token-type rows must be zero; a head is refused for models without an encoder head."""
        src = strict_mapping.clean_hf(hf_state, self.base_prefix)
        strict_mapping.drop_zero_rows(src, self.token_type_key)
        for key in self.pooler_keys:
            src.pop(key, None)
        src.pop("embeddings.position_ids", None)  # a non-persistent buffer some old exports stored
        out = self._encoder_from_hf(src, model_cfg, self.position_offset(int(hf_cfg.get("pad_token_id") or 0)))
        if self.has_mlm_head(src):
            if not model_traits(model_cfg).encoder_mlm_head:
                raise ConversionError(f"an HF MLM head can only be imported into a model whose MLM head reads "
                                      f"the encoder (model.arch={model_cfg.arch!r} has none)")
            out.update(self._mlm_head_from_hf(src, out[WORD_KEY]))
        if src:
            raise ConversionError(f"HF tensors with no megatron target: {sorted(src)[:6]}")
        return out

    def check_importable(self, hf_cfg: dict) -> None:
        hf_config.require_value(hf_cfg, "model_type", (self.model_type,), None)
        hf_config.require_value(hf_cfg, "hidden_act", tuple(hf_config.IMPORTABLE_ACTS), "gelu")
        hf_config.require_value(hf_cfg, "position_embedding_type", ("absolute",), "absolute")
        hf_config.require_value(hf_cfg, "is_decoder", (False,), False)
        hf_config.require_value(hf_cfg, "add_cross_attention", (False,), False)
        hf_config.require_value(hf_cfg, "tie_word_embeddings", (True,), True)

    def model_config_from_hf(self, hf_cfg: dict, base: ModelConfig, vocab_size: int | None) -> ModelConfig:
        rows = int(hf_cfg["vocab_size"])
        vocab, multiple = hf_config.vocab_layout(rows, vocab_size or rows, base.make_vocab_size_divisible_by)
        offset = self.position_offset(int(hf_cfg.get("pad_token_id") or 0))
        return dataclasses.replace(
            base, vocab_size=vocab, make_vocab_size_divisible_by=multiple,
            hidden_size=int(hf_cfg["hidden_size"]), num_layers=int(hf_cfg["num_hidden_layers"]),
            num_attention_heads=int(hf_cfg["num_attention_heads"]),
            ffn_hidden_size=int(hf_cfg["intermediate_size"]),
            max_position_embeddings=int(hf_cfg["max_position_embeddings"]) - offset,
            layernorm_epsilon=float(hf_cfg.get("layer_norm_eps", 1e-12)),
            bias_gelu_fusion=hf_config.IMPORTABLE_ACTS[hf_cfg.get("hidden_act", "gelu")])
