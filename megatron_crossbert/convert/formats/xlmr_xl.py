"""Format ``xlmr-xl``: the classic encoder as HF ``XLMRobertaXLModel`` / ``...ForMaskedLM`` (default).

``XLMRobertaXL`` has our block order exactly (pre-LN layers, final LayerNorm, no embedding
LayerNorm) and supports eager, SDPA, FlashAttention and flex attention, so it is the fast, exact
target of the classic encoder. Two differences from the native model are absorbed here:
- RoBERTa positions start at ``pad_token_id + 1``: the HF table has ``pad + 1`` zero rows before
  native position 0 (``max_position_embeddings = P + pad + 1``); import drops them.
- HF derives positions from ``input_ids != pad_token_id``, so left-padded batches are exact (each row
  counts from its first real token), but a real token equal to the pad id would shift later positions.
The MLM head applies exact (erf) GELU like megatron's, so it is exact under either encoder GELU.
"""

from __future__ import annotations

from megatron_crossbert.config import ModelConfig
from megatron_crossbert.convert.formats.classic import BERT_FAMILY_LAYER_KEYS, HF_LAYER, ClassicFormat
from megatron_crossbert.convert.formats.interface import ExportContext


class XlmrXlFormat(ClassicFormat):
    name = "xlmr-xl"
    model_type = "xlm-roberta-xl"
    base_class = "XLMRobertaXLModel"
    mlm_class = "XLMRobertaXLForMaskedLM"
    attention_backends = ("sdpa", "eager", "flash_attention_2", "flex_attention")
    left_padding = True
    base_prefix = "roberta."
    global_keys = {
        "embedding.word_embeddings.weight": "embeddings.word_embeddings.weight",
        "embedding.position_embeddings.weight": "embeddings.position_embeddings.weight",
        "encoder.final_layernorm.weight": "encoder.LayerNorm.weight",
        "encoder.final_layernorm.bias": "encoder.LayerNorm.bias",
    }
    layer_keys = {
        "input_layernorm.weight": HF_LAYER + "attention.self_attn_layer_norm.weight",
        "input_layernorm.bias": HF_LAYER + "attention.self_attn_layer_norm.bias",
        "pre_mlp_layernorm.weight": HF_LAYER + "LayerNorm.weight",
        "pre_mlp_layernorm.bias": HF_LAYER + "LayerNorm.bias",
        **BERT_FAMILY_LAYER_KEYS,
    }
    mlm_head_keys = {
        "lm_head.dense.weight": "lm_head.dense.weight",
        "lm_head.dense.bias": "lm_head.dense.bias",
        "lm_head.layer_norm.weight": "lm_head.layer_norm.weight",
        "lm_head.layer_norm.bias": "lm_head.layer_norm.bias",
        "output_layer.bias": "lm_head.bias",
    }
    mlm_decoder_keys = ("lm_head.decoder.weight", "lm_head.decoder.bias")

    def position_offset(self, pad_token_id: int) -> int:
        """RoBERTa numbers positions from ``pad_token_id + 1``."""
        return pad_token_id + 1

    def mlm_head_exact(self, model_cfg: ModelConfig) -> bool:
        """Both heads use erf GELU whatever the encoder's ``hidden_act``: always exact."""
        return True

    def hf_config(self, model_cfg: ModelConfig, ctx: ExportContext, with_mlm_head: bool) -> dict:
        config = self.common_config(model_cfg, ctx, with_mlm_head)
        tok = ctx.tokenizer
        config.update({key: value for key, value in (("bos_token_id", tok.cls_token_id),
                                                     ("eos_token_id", tok.sep_token_id)) if value is not None})
        config["use_cache"] = False
        return config

    def card_notes(self, model_cfg: ModelConfig) -> list[str]:
        return ["Left and right padding are both exact: positions count from each row's first non-pad "
                "token (RoBERTa style, table shifted by `pad_token_id + 1` zero rows). A real token equal "
                "to the pad id would shift the positions after it; our tokenizers never emit one.",
                "`attn_implementation` may be `sdpa` (default), `eager`, `flash_attention_2` or "
                "`flex_attention`; all compute the same encoder."]

