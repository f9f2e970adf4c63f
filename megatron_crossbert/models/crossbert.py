"""CrossBERT: an encoder over the visible tokens only, and a throw-away cross-attention decoder.

Layout per pipeline stage (decided by ``pre_process`` / ``post_process`` from the caller):
- first stage: word + learned absolute position embeddings of the visible tokens, at their original
  position ids (no embedding LayerNorm, as HF MegatronBert);
- every stage: its share of the encoder layers (megatron's TransformerBlock does the split);
- last stage: encoder final LayerNorm, the reconstruction decoder, the BERT LM head, the output
  layer tied to the word embeddings, and vocab-parallel cross-entropy on the targets only.

Both views of a sequence run as separate rows of one batch: ``[b, V, Lv] -> b*V`` sequences of Lv
tokens, so the pipeline tensor is ``[Lv, b*V, h]``. There is no padding anywhere in pretraining.
"""

from __future__ import annotations

import torch
from megatron.core import tensor_parallel
from megatron.core.models.common.embeddings.language_model_embedding import LanguageModelEmbedding
from megatron.core.models.common.language_module.language_module import LanguageModule
from megatron.core.transformer.enums import ModelType
from megatron.core.transformer.transformer_block import TransformerBlock, get_num_layers_to_build
from megatron.core.transformer.transformer_config import TransformerConfig
from megatron.core.transformer.module import MegatronModule
from megatron.core.transformer.utils import get_linear_layer
from megatron.core.utils import get_pg_rank
from torch import Tensor

from megatron_crossbert.models.specs import decoder_block_spec, encoder_block_spec, final_norm


class CrossBertLMHead(MegatronModule):
    """Dense + exact GELU + LayerNorm (megatron BertLMHead's math and key names, SP-aware norm).

    megatron's BertLMHead hard-wires a norm that refuses sequence parallelism on CPU/without apex;
    this head keeps its ``dense.*`` / ``layer_norm.*`` keys and tags replicated params for SP.
    """

    def __init__(self, config: TransformerConfig, use_te: bool) -> None:
        super().__init__(config=config)
        self.dense = get_linear_layer(config.hidden_size, config.hidden_size, config.init_method,
                                      config.perform_initialization)
        self.layer_norm = final_norm(use_te)(config=config, hidden_size=config.hidden_size,
                                             eps=config.layernorm_epsilon)
        for param in (self.dense.weight, self.dense.bias):
            param.sequence_parallel = config.sequence_parallel

    def forward(self, hidden_states: Tensor) -> Tensor:
        return self.layer_norm(torch.nn.functional.gelu(self.dense(hidden_states)))


class CrossBertModel(LanguageModule):
    """The CrossBERT pretraining model (a megatron LanguageModule: DDP, schedules and dist-ckpt work)."""

    def __init__(self, config: TransformerConfig, decoder_config: TransformerConfig, *, vocab_size: int,
                 max_sequence_length: int, use_te: bool, pre_process: bool = True,
                 post_process: bool = True) -> None:
        super().__init__(config=config)
        self.pre_process, self.post_process = pre_process, post_process
        self.vocab_size, self.max_sequence_length = vocab_size, max_sequence_length
        self.share_embeddings_and_output_weights = True
        self.use_te = use_te
        self.model_type = ModelType.encoder_or_decoder
        if pre_process:
            self.embedding = LanguageModelEmbedding(config=config, vocab_size=vocab_size,
                                                    max_sequence_length=max_sequence_length,
                                                    position_embedding_type="learned_absolute",
                                                    num_tokentypes=0)
        num_layers = get_num_layers_to_build(config, pp_rank=get_pg_rank(self.pp_group))
        self.encoder = TransformerBlock(config=config, spec=encoder_block_spec(use_te, num_layers),
                                        pre_process=pre_process, post_process=post_process)
        if post_process:
            self._build_reconstruction_branch(decoder_config, use_te)
        self.setup_embeddings_and_output_layer()

    def _build_reconstruction_branch(self, dec_cfg: TransformerConfig, use_te: bool) -> None:
        """Queries (mask embedding + decoder positions), decoder block, LM head, tied output layer."""
        cfg = self.config
        self.mask_embedding = torch.nn.Parameter(torch.empty(dec_cfg.hidden_size, dtype=cfg.params_dtype))
        self.decoder_position_embedding = torch.nn.Embedding(self.max_sequence_length, dec_cfg.hidden_size,
                                                             dtype=cfg.params_dtype)
        if cfg.perform_initialization:
            dec_cfg.init_method(self.mask_embedding.data.view(1, -1))
            dec_cfg.init_method(self.decoder_position_embedding.weight.data)
        # Not tagged ``sequence_parallel``: queries are built whole on every TP rank and only then
        # scattered, so the scatter's backward (all-gather) already gives each rank the full gradient.
        self.decoder = TransformerBlock(config=dec_cfg,
                                        spec=decoder_block_spec(use_te, dec_cfg.num_layers))
        self.lm_head = CrossBertLMHead(cfg, use_te)
        self.output_layer = tensor_parallel.ColumnParallelLinear(
            cfg.hidden_size, self.vocab_size, config=cfg, init_method=cfg.init_method, bias=True,
            skip_bias_add=False, gather_output=False,
            skip_weight_param_allocation=self.pre_process and self.share_embeddings_and_output_weights)

    def set_input_tensor(self, input_tensor) -> None:
        """Pipeline schedules hand the previous stage's activations here."""
        if isinstance(input_tensor, (list, tuple)):
            assert len(input_tensor) == 1, "CrossBERT stages exchange exactly one tensor"
            input_tensor = input_tensor[0]
        self.encoder.set_input_tensor(input_tensor)

    def forward(self, tokens: Tensor, visible: Tensor, targets: Tensor) -> Tensor:
        """Per-target-token LM loss ``float32 [b*V, T]`` (last stage) or encoder states ``[Lv, b*V, h]``.

        Every stage receives the full batch (tokens, visible, targets are tiny); only the first
        stage embeds and only the last stage reconstructs.
        """
        batch, views = visible.shape[:2]
        rows = tokens.repeat_interleave(views, dim=0)                  # [b*V, L], row = b_i*V + v
        visible = visible.reshape(batch * views, -1)
        targets = targets.reshape(batch * views, -1)
        embedded = None
        if self.pre_process:
            embedded = self.embedding(input_ids=torch.gather(rows, 1, visible), position_ids=visible)
        hidden = self.encoder(hidden_states=embedded, attention_mask=None)
        if not self.post_process:
            return hidden
        logits = self._reconstruct(hidden, targets)
        labels = torch.gather(rows, 1, targets)
        return self.compute_language_model_loss(labels, logits).float()   # CE upcasts logits itself

    def _reconstruct(self, memory: Tensor, targets: Tensor) -> Tensor:
        """Decoder queries at the target positions attend to the encoder output -> vocab logits [T, bV, V/tp]."""
        queries = self.mask_embedding + self.decoder_position_embedding(targets)   # [bV, T, h]
        queries = queries.transpose(0, 1).contiguous()
        if self.config.sequence_parallel:
            queries = tensor_parallel.scatter_to_sequence_parallel_region(queries, group=self.tp_group)
        decoded = self.decoder(hidden_states=queries, attention_mask=None, context=memory,
                               context_mask=None)
        weight = self.shared_embedding_or_output_weight()
        logits, _ = self.output_layer(self.lm_head(decoded), weight=weight)
        return logits

    def encode(self, input_ids: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        """Full-sequence encoder output ``[b, s, h]`` (positions 0..s-1, final LayerNorm applied).

        Evaluation/export path; needs the whole encoder on this rank (PP=1). ``attention_mask`` is
        HF-style (1 = keep); padded keys are masked out, padded query rows are left as computed.
        Under sequence parallelism the batch is right-padded to a multiple of TP and trimmed back.
        """
        if not (self.pre_process and self.post_process):
            raise RuntimeError("CrossBertModel.encode needs the whole encoder on one stage (PP=1)")
        length = input_ids.shape[1]
        input_ids, attention_mask = self._pad_for_sequence_parallel(input_ids, attention_mask)
        positions = torch.arange(input_ids.shape[1], device=input_ids.device).expand_as(input_ids)
        embedded = self.embedding(input_ids=input_ids, position_ids=positions)
        hidden = self.encoder(hidden_states=embedded, attention_mask=self._key_padding_mask(attention_mask))
        if self.config.sequence_parallel:
            hidden = tensor_parallel.gather_from_sequence_parallel_region(
                hidden, tensor_parallel_output_grad=False, group=self.tp_group)
        return hidden[:length].transpose(0, 1).contiguous()

    def _pad_for_sequence_parallel(self, input_ids: Tensor, attention_mask: Tensor | None):
        tp = self.config.tensor_model_parallel_size
        pad = (-input_ids.shape[1]) % tp if self.config.sequence_parallel else 0
        if not pad:
            return input_ids, attention_mask
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        pad_fn = torch.nn.functional.pad
        return pad_fn(input_ids, (0, pad)), pad_fn(attention_mask, (0, pad))

    def _key_padding_mask(self, attention_mask: Tensor | None) -> Tensor | None:
        """HF mask (1 = keep) -> megatron's ``[b, 1, 1, s]`` bool (True = masked out); None when unpadded."""
        if attention_mask is None or bool(attention_mask.bool().all()):
            return None
        if self.use_te:
            raise NotImplementedError("padded encode() batches need the local spec: the TE spec is built "
                                      "mask-free for pretraining speed")
        return (attention_mask < 0.5)[:, None, None, :]
