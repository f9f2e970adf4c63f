"""The baseline: megatron-core's own ``BertModel`` with CrossBERT's encoder dimensions and layer spec.

It is megatron's class (a subclass only narrows the return value and adds sparse prediction), so
the baseline is not a home-made BERT. Masking (15%, 80/10/10) happens in the data pipeline;
``bert_mask_tokens`` below is a tiny torch version for tests. No NSP: ``add_binary_head=False``,
``num_tokentypes=0``.

Sparse prediction (``model.sparse_prediction``, default on): with a ``prediction_mask`` the LM head
and the vocab projection run on the predicted positions only (``models.sparse_head``), as ModernBERT
and HF's ``sparse_prediction`` do; same modules, same checkpoint keys, same loss. megatron's
``BertModel.forward`` has no hook between the encoder and ``lm_head``, so ``bert_encoder_states``
repeats its first half; ``bert_encode`` (evaluation) uses it too, since megatron's
``return_embeddings=True`` raises.

Document masks: megatron's ``bert_extended_attention_mask`` turns a ``[b, s]`` padding mask into a
bool mask; token coordinates ``[b, 2, s]`` (``attention_masks``) pass through it untouched to our
``CoreAttention``, so ``forward(input_ids, None, lm_labels=, segments=)`` keeps attention inside
each document with megatron's own class.
"""

from __future__ import annotations

import torch
from megatron.core.models.bert.bert_model import BertModel
from torch import Tensor

from megatron_crossbert.config import RunConfig
from megatron_crossbert.models.attention_masks import sample_coords
from megatron_crossbert.models.attention_setup import AttentionSetup
from megatron_crossbert.models.encode_padding import encode_length_multiple, pad_length
from megatron_crossbert.models.sparse_head import sparse_lm_loss
from megatron_crossbert.models.specs import encoder_layer_spec
from megatron_crossbert.models.transformer_config import transformer_config


class BaselineBertModel(BertModel):
    """megatron BertModel whose forward returns only the per-token loss ``[b, L]`` when labels are given.

    BertModel returns ``(lm_loss, binary_logits)``; with no binary head the second is always None,
    and the training loop's contract (docs/architecture.md) is a single loss tensor. With
    ``prediction_mask`` and ``sparse_prediction`` the head runs on the masked positions only.
    """

    sparse_prediction: bool = True
    """Set by ``build_bert_model`` from ``ModelConfig.sparse_prediction``."""
    attention: AttentionSetup = AttentionSetup()
    """Set by ``build_bert_model``: the backend, windows and whether documents are masked."""

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, tokentype_ids: Tensor | None = None,
                lm_labels: Tensor | None = None, prediction_mask: Tensor | None = None,
                segments: Tensor | None = None, **kwargs):
        if segments is not None and self.attention.document_mask:
            attention_mask = sample_coords(segments)
        if lm_labels is not None and prediction_mask is not None and self.sparse_prediction:
            hidden = bert_encoder_states(self, input_ids, attention_mask)
            return sparse_lm_loss(self, hidden, lm_labels, prediction_mask) if self.post_process else hidden
        out = super().forward(input_ids, attention_mask, tokentype_ids=tokentype_ids, lm_labels=lm_labels,
                              **kwargs)
        if isinstance(out, tuple) and lm_labels is not None:
            return out[0].float()
        return out

    def bert_extended_attention_mask(self, attention_mask: Tensor | None) -> Tensor | None:
        """Token coordinates (3-D integer) and None pass through; HF ``[b, s]`` masks get megatron's treatment."""
        if attention_mask is None or attention_mask.dim() == 3:
            return attention_mask
        return super().bert_extended_attention_mask(attention_mask)

    def _sanity_check_attention_and_get_attn_mask_dimension(self) -> str:
        """``[b, 1, 1, s]`` padding masks: CoreAttention broadcasts them on every backend, and the
        choice no longer depends on whether (and which) Transformer Engine is installed."""
        return "b11s"

    def encode(self, input_ids: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        """``[b, s, h]`` features, the same contract as ``EncoderLanguageModel.encode``."""
        return bert_encode(self, input_ids, attention_mask)


def build_bert_model(run_cfg: RunConfig, *, vocab_size: int, max_sequence_length: int, use_te: bool,
                     attention: AttentionSetup, pre_process: bool = True,
                     post_process: bool = True) -> BaselineBertModel:
    """``TrainSpec.build_model`` of 'bert': megatron BertModel with the tied LM head (as Megatron-LM builds it).

    Sequence parallelism needs apex: megatron's BertLMHead (and BertModel's final norm without TE)
    fall back to a torch norm that refuses SP, so we refuse early with a readable message.
    """
    from megatron.core.fusions.fused_layer_norm import HAVE_FUSED_LAYER_NORM

    config = transformer_config(run_cfg)
    if config.sequence_parallel and not HAVE_FUSED_LAYER_NORM:
        raise ValueError("the BERT baseline with sequence_parallel needs NVIDIA apex (megatron's BertLMHead "
                         "uses apex FusedLayerNorm for SP); disable parallel.sequence_parallel for arch=bert")
    spec = encoder_layer_spec(use_te, attention.encoder)
    model = BaselineBertModel(
        config=config, num_tokentypes=0, transformer_layer_spec=spec, vocab_size=vocab_size,
        max_sequence_length=max_sequence_length, pre_process=pre_process, post_process=post_process,
        parallel_output=True, share_embeddings_and_output_weights=True,
        position_embedding_type="learned_absolute", add_binary_head=False)
    model.sparse_prediction = run_cfg.model.sparse_prediction
    model.attention = attention
    return model


def bert_encoder_states(model: BertModel, input_ids: Tensor, attention_mask: Tensor | None) -> Tensor:
    """This stage's encoder output ``[s(/tp), b, h]`` of a learned-position BertModel: the first half
    of ``BertModel.forward`` (extended mask, position ids and embedding on the first stage, encoder).
    ``attention_mask`` None means no padding and no documents: the fastest kernel, unmasked."""
    embedded = None
    if model.pre_process:
        embedded = model.embedding(input_ids=input_ids, position_ids=model.bert_position_ids(input_ids))
    mask = None if attention_mask is None else model.bert_extended_attention_mask(attention_mask)
    return model.encoder(hidden_states=embedded, attention_mask=mask)


def bert_encode(model: BertModel, input_ids: Tensor, attention_mask: Tensor | None = None) -> Tensor:
    """Final-LayerNorm encoder output ``[b, s, h]`` of a BertModel, like ``CrossBertModel.encode`` (PP=1), the
    length padded to ``encode_length_multiple`` and trimmed back."""
    if not (model.pre_process and model.post_process):
        raise RuntimeError("bert_encode needs the whole encoder on one stage (PP=1)")
    length = input_ids.shape[1]
    input_ids, attention_mask = pad_length(input_ids, attention_mask, encode_length_multiple(model.config))
    padded = attention_mask is not None and not bool(attention_mask.bool().all())
    hidden = bert_encoder_states(model, input_ids, attention_mask if padded else None)
    if model.config.sequence_parallel:
        from megatron.core import tensor_parallel

        hidden = tensor_parallel.gather_from_sequence_parallel_region(
            hidden, tensor_parallel_output_grad=False, group=model.tp_group)
    return hidden[:length].transpose(0, 1).contiguous()


def bert_mask_tokens(tokens: Tensor, *, mask_id: int, vocab_size: int, mask_prob: float = 0.15,
                     generator: torch.Generator | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """Test helper: BERT 80/10/10 masking -> (masked tokens, labels, float loss mask), each [b, L]."""
    draw = torch.rand(tokens.shape, generator=generator)
    selected = draw < mask_prob
    action = torch.rand(tokens.shape, generator=generator)
    masked = tokens.clone()
    masked[selected & (action < 0.8)] = mask_id
    random_ids = torch.randint(0, vocab_size, tokens.shape, generator=generator)
    swap = selected & (action >= 0.8) & (action < 0.9)
    masked[swap] = random_ids[swap]
    return masked, tokens.clone(), selected.float()
