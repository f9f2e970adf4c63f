"""The encoder both encoder families share: embeddings, position handling, the layer stack, ``encode``.

``EncoderLanguageModel`` is a megatron ``LanguageModule`` (DDP, schedules, dist-ckpt, tied output
weights work) that owns the encoder half of a model; ``CrossBertModel`` adds the reconstruction branch
and ``MlmModel`` the MLM head. What differs between the families is read from their ``EncoderFamily``:

- classic: word + learned absolute position embeddings (no embedding norm, as HF MegatronBert);
- modern: word embeddings -> LayerNorm -> dropout (ModernBERT), no position table; every attention
  rotates queries and keys at the tokens' positions (``RowRotary``; ``KindRotary`` when local layers
  have their own base), so visible tokens keep their original positions exactly as the learned table
  gives them in the classic family.

Masks reach attention as token coordinates (``attention_masks``): the subclasses' forwards pass the
samples' documents, ``encode`` padding coordinates when the batch is padded or layers are windowed.
"""

from __future__ import annotations

import torch
from megatron.core import tensor_parallel
from megatron.core.models.common.embeddings.language_model_embedding import LanguageModelEmbedding
from megatron.core.models.common.language_module.language_module import LanguageModule
from megatron.core.transformer.enums import ModelType
from megatron.core.transformer.module import MegatronModule
from megatron.core.transformer.transformer_block import TransformerBlock, get_num_layers_to_build
from megatron.core.transformer.transformer_config import TransformerConfig
from megatron.core.utils import get_pg_rank
from torch import Tensor

from megatron_crossbert.arch import EncoderFamily
from megatron_crossbert.models.attention_masks import padding_coords
from megatron_crossbert.models.attention_setup import AttentionSetup
from megatron_crossbert.models.encode_padding import encode_length_multiple, pad_length
from megatron_crossbert.models.rotary import KindRotary
from megatron_crossbert.models.specs import encoder_block_spec, final_norm


class NormedWordEmbedding(MegatronModule):
    """ModernBERT's embedding: token embeddings, LayerNorm, dropout; ``[b, s] -> [s, b, h]`` (SP-scattered)."""

    def __init__(self, config: TransformerConfig, vocab_size: int, use_te: bool) -> None:
        super().__init__(config=config)
        self.word_embeddings = tensor_parallel.VocabParallelEmbedding(
            vocab_size, config.hidden_size, init_method=config.embedding_init_method, config=config)
        self.norm = final_norm(use_te)(config=config, hidden_size=config.hidden_size, eps=config.layernorm_epsilon)
        self.dropout = torch.nn.Dropout(config.hidden_dropout)

    def forward(self, input_ids: Tensor, position_ids: Tensor | None = None) -> Tensor:
        """``position_ids`` is accepted for interface parity and unused: positions enter through RoPE."""
        embedded = self.word_embeddings(input_ids).transpose(0, 1).contiguous()
        if not self.config.sequence_parallel:
            return self.dropout(self.norm(embedded))
        embedded = tensor_parallel.scatter_to_sequence_parallel_region(embedded)
        with tensor_parallel.get_cuda_rng_tracker().fork():
            return self.dropout(self.norm(embedded))


def build_embedding(family: EncoderFamily, config: TransformerConfig, vocab_size: int,
                    max_sequence_length: int, use_te: bool) -> MegatronModule:
    """The first stage's embedding module of ``family``; both expose ``word_embeddings`` (tied output)."""
    if family.embedding_norm:
        return NormedWordEmbedding(config, vocab_size, use_te)
    return LanguageModelEmbedding(config=config, vocab_size=vocab_size, max_sequence_length=max_sequence_length,
                                  position_embedding_type="learned_absolute", num_tokentypes=0)


class EncoderLanguageModel(LanguageModule):
    """Embedding (first stage), this stage's encoder layers, final LayerNorm (last stage), tied vocab."""

    def __init__(self, config: TransformerConfig, *, family: EncoderFamily, vocab_size: int,
                 max_sequence_length: int, rotary_base: float, use_te: bool, attention: AttentionSetup,
                 pre_process: bool = True, post_process: bool = True) -> None:
        super().__init__(config=config)
        self.pre_process, self.post_process, self.attention = pre_process, post_process, attention
        self.vocab_size, self.max_sequence_length = vocab_size, max_sequence_length
        self.share_embeddings_and_output_weights = True
        self.use_te, self.family = use_te, family
        self.model_type = ModelType.encoder_or_decoder
        if pre_process:
            self.embedding = build_embedding(family, config, vocab_size, max_sequence_length, use_te)
        self.rotary = None if family.learned_positions else KindRotary(config, rotary_base, attention.local_rotary_base)
        num_layers = get_num_layers_to_build(config, pp_rank=get_pg_rank(self.pp_group))
        spec = encoder_block_spec(use_te, num_layers, attention.encoder, family, first_stage=pre_process)
        self.encoder = TransformerBlock(config=config, spec=spec, pre_process=pre_process, post_process=post_process)

    def set_input_tensor(self, input_tensor) -> None:
        """Pipeline schedules hand the previous stage's activations here."""
        if isinstance(input_tensor, (list, tuple)):
            assert len(input_tensor) == 1, "encoder stages exchange exactly one tensor"
            input_tensor = input_tensor[0]
        self.encoder.set_input_tensor(input_tensor)

    def rotary_at(self, positions: Tensor) -> Tensor | None:
        """RoPE frequencies ``[s, b, 1, d]`` (``[2, s, b, 1, d]`` with a local base) at ``positions [b, s]``;
        None for learned positions."""
        return None if self.rotary is None else self.rotary(positions)

    def run_encoder(self, input_ids: Tensor, positions: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        """This stage's encoder output ``[s, b, h]`` for tokens ``[b, s]`` at ``positions [b, s]``;
        ``attention_mask`` is token coordinates ``[b, 2, s]`` or None (every token sees every other)."""
        embedded = self.embedding(input_ids=input_ids, position_ids=positions) if self.pre_process else None
        return self.encoder(hidden_states=embedded, attention_mask=attention_mask,
                            rotary_pos_emb=self.rotary_at(positions))

    def encode(self, input_ids: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        """Full-sequence encoder output ``[b, s, h]`` (positions 0..s-1, final LayerNorm applied).

        Evaluation/export path; needs the whole encoder on this rank (PP=1). ``attention_mask`` is
        HF-style (1 = keep); real tokens never see padding (padded rows see only padding and are
        not meant to be read). Local layers keep their windows (positions 0..s-1).
        The batch is right-padded to ``encode_length_multiple`` (TP under sequence parallelism, 16 under FP8)
        and trimmed back.
        """
        if not (self.pre_process and self.post_process):
            raise RuntimeError(f"{type(self).__name__}.encode needs the whole encoder on one stage (PP=1)")
        length = input_ids.shape[1]
        input_ids, attention_mask = pad_length(input_ids, attention_mask, encode_length_multiple(self.config))
        positions = torch.arange(input_ids.shape[1], device=input_ids.device).expand_as(input_ids)
        hidden = self.run_encoder(input_ids, positions, self._key_padding_mask(attention_mask, input_ids))
        if self.config.sequence_parallel:
            hidden = tensor_parallel.gather_from_sequence_parallel_region(
                hidden, tensor_parallel_output_grad=False, group=self.tp_group)
        return hidden[:length].transpose(0, 1).contiguous()

    def _key_padding_mask(self, attention_mask: Tensor | None, input_ids: Tensor) -> Tensor | None:
        """HF mask (1 = keep) -> padding coordinates ``[b, 2, s]``; None when unpadded and every layer global
        (then SDPA runs its unmasked kernels)."""
        padded = attention_mask is not None and not bool(attention_mask.bool().all())
        if not padded and not self.attention.windowed:
            return None
        return padding_coords(torch.ones_like(input_ids) if attention_mask is None else attention_mask)


class LMHead(MegatronModule):
    """Dense + exact GELU + LayerNorm before the tied vocab projection (BERT's and ModernBERT's head).

    Keeps megatron BertLMHead's ``dense.*`` / ``layer_norm.*`` keys with an SP-aware norm (megatron's
    hard-wires a norm that refuses sequence parallelism without apex). ``bias`` on the dense layer:
    BERT has one, ModernBERT (``classifier_bias=False``) has none. ``input_size``: the width it reads
    (a narrow CrossBERT decoder's); the dense maps it to ``hidden_size``, the tied vocab projection's width.
    """

    def __init__(self, config: TransformerConfig, use_te: bool, bias: bool, input_size: int | None = None) -> None:
        super().__init__(config=config)
        self.dense = torch.nn.Linear(input_size or config.hidden_size, config.hidden_size, bias=bias,
                                     dtype=config.params_dtype)
        if config.perform_initialization:
            config.init_method(self.dense.weight)
        if bias:
            torch.nn.init.zeros_(self.dense.bias)
        self.layer_norm = final_norm(use_te)(config=config, hidden_size=config.hidden_size,
                                             eps=config.layernorm_epsilon)
        for param in self.dense.parameters():
            param.sequence_parallel = config.sequence_parallel

    def forward(self, hidden_states: Tensor) -> Tensor:
        return self.layer_norm(torch.nn.functional.gelu(self.dense(hidden_states)))


def model_encode(model: torch.nn.Module, input_ids: torch.Tensor,
                 attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """``[b, s, h]`` encoder features of any architecture: every model class has ``encode``."""
    return model.encode(input_ids, attention_mask)
