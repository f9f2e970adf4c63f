"""Format ``megatron-bert``: the classic encoder as HF ``MegatronBertModel`` / ``...ForMaskedLM``.

Exact (measured in ``../shared/notes/hf-megatronbert-mapping.md``) but eager attention only:
transformers' MegatronBert supports neither SDPA nor FlashAttention, so it is kept behind
``--format megatron-bert`` for users who already depend on it; ``xlmr-xl`` is the default.
Positions are the row index (0..s-1), so only right padding is exact.
"""

from __future__ import annotations

from megatron_crossbert.config import ModelConfig
from megatron_crossbert.convert.formats.classic import BERT_FAMILY_LAYER_KEYS, HF_LAYER, ClassicFormat


class MegatronBertFormat(ClassicFormat):
    name = "megatron-bert"
    model_type = "megatron-bert"
    base_class = "MegatronBertModel"
    mlm_class = "MegatronBertForMaskedLM"
    attention_backends = ("eager",)
    left_padding = False
    base_prefix = "bert."
    global_keys = {
        "embedding.word_embeddings.weight": "embeddings.word_embeddings.weight",
        "embedding.position_embeddings.weight": "embeddings.position_embeddings.weight",
        "encoder.final_layernorm.weight": "encoder.ln.weight",
        "encoder.final_layernorm.bias": "encoder.ln.bias",
    }
    layer_keys = {
        "input_layernorm.weight": HF_LAYER + "attention.ln.weight",
        "input_layernorm.bias": HF_LAYER + "attention.ln.bias",
        "pre_mlp_layernorm.weight": HF_LAYER + "ln.weight",
        "pre_mlp_layernorm.bias": HF_LAYER + "ln.bias",
        **BERT_FAMILY_LAYER_KEYS,
    }
    mlm_head_keys = {
        "lm_head.dense.weight": "cls.predictions.transform.dense.weight",
        "lm_head.dense.bias": "cls.predictions.transform.dense.bias",
        "lm_head.layer_norm.weight": "cls.predictions.transform.LayerNorm.weight",
        "lm_head.layer_norm.bias": "cls.predictions.transform.LayerNorm.bias",
        "output_layer.bias": "cls.predictions.bias",
    }
    mlm_decoder_keys = ("cls.predictions.decoder.weight", "cls.predictions.decoder.bias")

    def mlm_head_exact(self, model_cfg: ModelConfig) -> bool:
        """megatron's LM head always uses erf GELU while HF MegatronBert's applies ``hidden_act``, so the
        head is exact only when the encoder GELU is erf too (no bias-GELU fusion)."""
        return not model_cfg.bias_gelu_fusion

    def card_notes(self, model_cfg: ModelConfig) -> list[str]:
        return ["Use right padding: positions are the absolute index (0..s-1), as in pretraining.",
                "Attention is eager only (transformers' MegatronBert has no SDPA/FlashAttention); export "
                "with the default `--format xlmr-xl` for the same model on an SDPA/flash-capable class."]

