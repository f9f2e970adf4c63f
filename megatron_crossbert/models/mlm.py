"""The MLM baseline of the modern family: the same encoder module as CrossBERT-modern plus ModernBERT's head.

Head: dense (no bias, ModernBERT ``classifier_bias=False``), exact GELU, LayerNorm, then the vocab
projection tied to the word embeddings, with a bias (``decoder_bias=True``). Masking (15-30%, 80/10/10)
happens in the data (``arch_rules.mlm_sample``), so CrossBERT-modern against MLM-modern differs in the
objective only. The forward signature mirrors megatron's ``BertModel`` so both MLM baselines share one
forward step. megatron-core's ``BertModel`` stays the classic family's baseline. Sparse prediction
(``model.sparse_prediction``, default on): given a ``prediction_mask`` the head runs on those
positions only (``models.sparse_head``), as ModernBERT's ``masked_prediction`` does.
"""

from __future__ import annotations

import torch
from megatron.core import tensor_parallel
from megatron.core.transformer.transformer_config import TransformerConfig
from torch import Tensor

from megatron_crossbert.arch import EncoderFamily, get_encoder
from megatron_crossbert.config import RunConfig
from megatron_crossbert.models.attention_masks import sample_coords
from megatron_crossbert.models.attention_setup import AttentionSetup
from megatron_crossbert.models.encoder import EncoderLanguageModel, LMHead
from megatron_crossbert.models.sparse_head import sparse_lm_loss
from megatron_crossbert.models.transformer_config import transformer_config


class MlmModel(EncoderLanguageModel):
    """Encoder + MLM head; per-token LM loss ``[b, L]`` (last stage) or encoder states ``[L, b, h]``."""

    def __init__(self, config: TransformerConfig, *, family: EncoderFamily, vocab_size: int,
                 max_sequence_length: int, rotary_base: float, use_te: bool, attention: AttentionSetup,
                 pre_process: bool = True, post_process: bool = True) -> None:
        super().__init__(config, family=family, vocab_size=vocab_size, max_sequence_length=max_sequence_length,
                         rotary_base=rotary_base, use_te=use_te, attention=attention, pre_process=pre_process,
                         post_process=post_process)
        if post_process:
            self.lm_head = LMHead(config, use_te, bias=family.linear_bias)
            self.output_layer = tensor_parallel.ColumnParallelLinear(
                config.hidden_size, vocab_size, config=config, init_method=config.init_method, bias=True,
                skip_bias_add=False, gather_output=False,
                skip_weight_param_allocation=pre_process and self.share_embeddings_and_output_weights)
        self.setup_embeddings_and_output_layer()

    sparse_prediction: bool = True
    """Set by ``build_mlm_model`` from ``ModelConfig.sparse_prediction``."""

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None,
                lm_labels: Tensor | None = None, prediction_mask: Tensor | None = None,
                segments: Tensor | None = None) -> Tensor:
        """Loss ``float32 [b, L]`` with ``lm_labels``, else vocab-parallel logits ``[b, L, V/tp]``.

        With ``prediction_mask`` (and ``sparse_prediction``) the head runs on its nonzero positions only
        and the loss is zero elsewhere. ``segments [b, L]`` (packed pretraining samples): each position's
        document id, used when document masks are on; ``attention_mask`` (HF-style, 1 = keep) is for
        padded batches.
        """
        positions = torch.arange(input_ids.shape[1], device=input_ids.device).expand_as(input_ids)
        hidden = self.run_encoder(input_ids, positions, self._coords(input_ids, attention_mask, segments))
        if not self.post_process:
            return hidden
        if lm_labels is not None and prediction_mask is not None and self.sparse_prediction:
            return sparse_lm_loss(self, hidden, lm_labels, prediction_mask)
        logits, _ = self.output_layer(self.lm_head(hidden), weight=self.shared_embedding_or_output_weight())
        if lm_labels is None:
            return logits.transpose(0, 1).contiguous()
        return self.compute_language_model_loss(lm_labels, logits).float()

    def _coords(self, input_ids: Tensor, attention_mask: Tensor | None, segments: Tensor | None) -> Tensor | None:
        if segments is None or not self.attention.passes_coords:
            return self._key_padding_mask(attention_mask, input_ids)
        return sample_coords(segments if self.attention.document_mask else torch.zeros_like(segments))


def build_mlm_model(run_cfg: RunConfig, **common) -> MlmModel:
    """``TrainSpec.build_model`` of 'mlm'."""
    model = MlmModel(transformer_config(run_cfg), family=get_encoder(run_cfg.model.encoder),
                     rotary_base=run_cfg.model.rotary_base, **common)
    model.sparse_prediction = run_cfg.model.sparse_prediction
    return model
