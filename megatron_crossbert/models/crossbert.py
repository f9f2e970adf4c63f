"""CrossBERT: an encoder over the visible tokens only, and a throw-away cross-attention decoder.

Layout per pipeline stage (decided by ``pre_process`` / ``post_process`` from the caller):
- first stage: the embeddings of the visible tokens at their original positions (``models.encoder``:
  a learned position table for the classic family, per-row RoPE for the modern one);
- every stage: its share of the encoder layers (megatron's TransformerBlock does the split);
- last stage: encoder final LayerNorm, the reconstruction decoder, the BERT LM head, the output
  layer tied to the word embeddings, and vocab-parallel cross-entropy on the targets only (in training with
  ``model.encoder_token_loss_weight``, the same head also decodes the visible tokens' own ids from the encoder
  states, a gradient-only term).

Both views of a sequence run as separate rows of one batch: ``[b, V, Lv] -> b*V`` sequences of Lv
tokens, so the pipeline tensor is ``[Lv, b*V, h]``. There is no padding anywhere in pretraining.

Document masks and windows (``attention_setup``): the views' document ids are gathered from the
sample's ``segments`` exactly as their tokens are, and each attention gets its token coordinates
(``attention_masks.view_coords``): encoder self-attention over the visible tokens, decoder
self-attention among the targets, decoder cross-attention from targets to visible tokens.
"""

from __future__ import annotations

import torch
from megatron.core import tensor_parallel
from megatron.core.transformer.transformer_block import TransformerBlock
from megatron.core.transformer.transformer_config import TransformerConfig
from torch import Tensor

from megatron_crossbert.arch import EncoderFamily, get_encoder
from megatron_crossbert.config import RunConfig
from megatron_crossbert.models.attention_masks import view_coords
from megatron_crossbert.models.attention_setup import AttentionSetup
from megatron_crossbert.models.encoder import EncoderLanguageModel, LMHead
from megatron_crossbert.models.rotary import KindRotary
from megatron_crossbert.models.specs import decoder_block_spec
from megatron_crossbert.models.transformer_config import transformer_config


class CrossBertModel(EncoderLanguageModel):
    """The CrossBERT pretraining model on either encoder family (a megatron LanguageModule)."""

    def __init__(self, config: TransformerConfig, decoder_config: TransformerConfig, *, family: EncoderFamily,
                 vocab_size: int, max_sequence_length: int, rotary_base: float, use_te: bool,
                 attention: AttentionSetup, decoder_position_embedding: bool = True,
                 decoder_cross_attention_only: bool = False, decoder_context_position_embedding: bool = False,
                 encoder_token_loss_weight: float = 0.0, pre_process: bool = True, post_process: bool = True) -> None:
        super().__init__(config, family=family, vocab_size=vocab_size, max_sequence_length=max_sequence_length,
                         rotary_base=rotary_base, use_te=use_te, attention=attention, pre_process=pre_process,
                         post_process=post_process)
        if post_process:
            self._build_reconstruction_branch(decoder_config, use_te, decoder_position_embedding,
                                              decoder_cross_attention_only, decoder_context_position_embedding)
            self.decoder_rotary = (None if self.rotary is None
                                   else KindRotary(decoder_config, rotary_base, attention.local_rotary_base))
        self.encoder_token_loss_weight = encoder_token_loss_weight
        self.setup_embeddings_and_output_layer()

    def _build_reconstruction_branch(self, dec_cfg: TransformerConfig, use_te: bool, positions: bool,
                                     cross_only: bool = False, context_positions: bool = False) -> None:
        """Queries (mask embedding [+ decoder positions]), [context positions,] decoder block, LM head, tied
        output layer."""
        cfg = self.config
        self.mask_embedding = torch.nn.Parameter(torch.empty(dec_cfg.hidden_size, dtype=cfg.params_dtype))
        self.decoder_position_embedding = (torch.nn.Embedding(self.max_sequence_length, dec_cfg.hidden_size,
                                                              dtype=cfg.params_dtype) if positions else None)
        # At the encoder's width: it is added to the encoder states before cross-attention projects them.
        self.context_position_embedding = (torch.nn.Embedding(self.max_sequence_length, cfg.hidden_size,
                                                              dtype=cfg.params_dtype) if context_positions else None)
        if cfg.perform_initialization:
            dec_cfg.init_method(self.mask_embedding.data.view(1, -1))
            for table in (self.decoder_position_embedding, self.context_position_embedding):
                if table is not None:
                    dec_cfg.init_method(table.weight.data)
        # Not tagged ``sequence_parallel``: queries are built whole on every TP rank and only then
        # scattered, so the scatter's backward (all-gather) already gives each rank the full gradient.
        # The decoder may be narrower than the encoder: its cross-attention projects keys/values from the
        # encoder width, and the head maps the decoder width back to the tied embeddings' width.
        self.decoder = TransformerBlock(config=dec_cfg, spec=decoder_block_spec(
            use_te, dec_cfg.num_layers, self.attention.decoder, memory_size=cfg.hidden_size, cross_only=cross_only))
        self.lm_head = LMHead(cfg, use_te, bias=True, input_size=dec_cfg.hidden_size)
        self.output_layer = tensor_parallel.ColumnParallelLinear(
            cfg.hidden_size, self.vocab_size, config=cfg, init_method=cfg.init_method, bias=True,
            skip_bias_add=False, gather_output=False,
            skip_weight_param_allocation=self.pre_process and self.share_embeddings_and_output_weights)

    def forward(self, tokens: Tensor, visible: Tensor, targets: Tensor, segments: Tensor | None = None) -> Tensor:
        """Per-target-token LM loss ``float32 [b*V, T]`` (last stage) or encoder states ``[Lv, b*V, h]``.

        Every stage receives the full batch (tokens, visible, targets, segments are tiny); only the
        first stage embeds and only the last stage reconstructs. ``segments [b, L]``: each position's
        document (fragment) id; used when document masks are on (None = one document per sample).
        """
        batch, views = visible.shape[:2]
        rows = tokens.repeat_interleave(views, dim=0)                  # [b*V, L], row = b_i*V + v
        visible = visible.reshape(batch * views, -1)
        targets = targets.reshape(batch * views, -1)
        row_segments = None if segments is None else segments.repeat_interleave(views, dim=0)
        coords = self._view_coords(row_segments, rows, visible, targets)
        visible_ids = torch.gather(rows, 1, visible)
        hidden = self.run_encoder(visible_ids, visible, coords[0])
        if not self.post_process:
            return hidden
        logits = self._reconstruct(hidden, visible, targets, *coords[1:])
        labels = torch.gather(rows, 1, targets)
        loss = self.compute_language_model_loss(labels, logits).float()   # CE upcasts logits itself
        if self.training and self.encoder_token_loss_weight:
            loss = loss + self._visible_token_term(hidden, visible_ids)
        return loss

    def _visible_token_term(self, hidden: Tensor, visible_ids: Tensor) -> Tensor:
        """A term that is exactly 0 but carries the gradient of ``model.encoder_token_loss_weight`` x the mean
        cross-entropy of decoding each visible token's own id from its encoder state (LM head, tied output).

        Added to each of the ``n`` per-target losses, whose sum is the micro-batch's loss, it contributes
        ``weight x n x`` that mean: at weight 1 the visible tokens weigh as much in all as the targets, the reported and held-out
        losses stay the reconstruction loss, and any loss scaling applies to both alike.
        """
        logits, _ = self.output_layer(self.lm_head(hidden), weight=self.shared_embedding_or_output_weight())
        mean = self.compute_language_model_loss(visible_ids, logits).float().mean()
        return self.encoder_token_loss_weight * (mean - mean.detach())

    def _view_coords(self, row_segments: Tensor | None, rows: Tensor, visible: Tensor, targets: Tensor) -> tuple:
        """(encoder, decoder self, decoder cross) token coordinates, or Nones when no mask applies."""
        if not self.attention.passes_coords:
            return None, None, None
        if row_segments is None or not self.attention.document_mask:
            row_segments = torch.zeros_like(rows)
        return view_coords(row_segments, visible, targets)

    def _queries(self, targets: Tensor) -> Tensor:
        """Decoder input ``[T, bV, h]``: the mask embedding, plus the target's learned position if enabled."""
        queries = self.mask_embedding.expand(*targets.shape, -1)
        if self.decoder_position_embedding is not None:
            queries = queries + self.decoder_position_embedding(targets)
        return queries.transpose(0, 1).contiguous()

    def _context(self, memory: Tensor, visible: Tensor) -> Tensor:
        """The encoder states ``[Lv, bV, h]`` the decoder cross-attends to, plus the learned position of each
        visible token when ``model.decoder_context_position_embedding`` is on (built whole, then scattered like
        the queries under sequence parallelism)."""
        if self.context_position_embedding is None:
            return memory
        positions = self.context_position_embedding(visible).transpose(0, 1).contiguous()
        if self.config.sequence_parallel:
            positions = tensor_parallel.scatter_to_sequence_parallel_region(positions, group=self.tp_group)
        return memory + positions

    def _reconstruct(self, memory: Tensor, visible: Tensor, targets: Tensor, self_coords: Tensor | None = None,
                     cross_coords: Tensor | None = None) -> Tensor:
        """Decoder queries at the target positions attend to the encoder output -> vocab logits [T, bV, V/tp].

        Modern family: self-attention rotates at the targets, cross-attention rotates queries at the
        targets and keys at the visible positions (``RotaryDecoderLayer``).
        """
        queries = self._queries(targets)
        if self.config.sequence_parallel:
            queries = tensor_parallel.scatter_to_sequence_parallel_region(queries, group=self.tp_group)
        rotary = None
        if self.decoder_rotary is not None:
            rotary = (self.decoder_rotary(targets), self.decoder_rotary(visible))
        decoded = self.decoder(hidden_states=queries, attention_mask=self_coords, context=self._context(memory, visible),
                               context_mask=cross_coords, rotary_pos_emb=rotary)
        weight = self.shared_embedding_or_output_weight()
        logits, _ = self.output_layer(self.lm_head(decoded), weight=weight)
        return logits


def build_crossbert_model(run_cfg: RunConfig, **common) -> CrossBertModel:
    """``TrainSpec.build_model`` of 'crossbert': encoder + decoder TransformerConfigs of this run."""
    model = run_cfg.model
    return CrossBertModel(transformer_config(run_cfg), transformer_config(run_cfg, decoder=True),
                          family=get_encoder(model.encoder), rotary_base=model.rotary_base,
                          decoder_position_embedding=model.decoder_position_embedding,
                          decoder_cross_attention_only=model.decoder_cross_attention_only,
                          decoder_context_position_embedding=model.decoder_context_position_embedding,
                          encoder_token_loss_weight=model.encoder_token_loss_weight, **common)
