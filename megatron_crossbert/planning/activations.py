"""Bytes autograd keeps for backward in one micro-batch: the planner's activation model, term by term.

Counted the way the tests measure it (``planning.check``): every distinct tensor storage a forward hands to
``saved_tensors_hooks``, parameters excluded. Each term names a tensor megatron-core's local layer spec saves:

- a layer's two LayerNorm inputs and the two linear inputs they feed (the norm outputs), each
  ``rows x width``; TP ranks hold them whole unless sequence parallelism splits them;
- self-attention keeps the fused QKV output and the kernel's output (flash/efficient SDPA and FlexAttention
  keep no score matrix; megatron's unfused attention keeps its softmax); RoPE adds rotated copies of Q and K
  and their cos/sin tables (per row, not per head); cross-attention keeps Q, the memory's K/V and the output,
  and reads the encoder output once for all decoder layers;
- the MLP keeps the FC1 output (GELU's input) and FC2's input, or under GeGLU the 2*ffn FC1 output, GELU's
  output, the product and FC2's input (5*ffn per row);
- each residual's dropout keeps a mask (a bool on CUDA, a float on the CPU), and SDPA a dense mask per
  distinct mask shape when documents or windows apply (FlexAttention's block masks are negligible);
- attention dropout costs nothing per score on CUDA (the fused kernels replay it from a seed); on the CPU
  it sends SDPA to its math kernel, which keeps three fp32 ``[b, heads, q, k]`` tensors (probabilities,
  their dropout mask, the dropped probabilities) and scaled copies of Q and K instead of the log-sum-exp
  and the dense mask (``math_attention_bytes``);
- the LM head keeps its dense input, GELU and LayerNorm inputs and the output layer's input, and the
  vocab-parallel cross-entropy its fp32 softmax: logits exist only at the rows the head runs on (CrossBERT's
  targets, the MLM's masked positions under sparse prediction);
- with full recompute a layer keeps only its input; backward rebuilds one layer at a time (``recompute_peak``).

Views per sample multiply the encoder's and the decoder's rows (``RunConfig.pipeline_shape``).
"""

from __future__ import annotations

from dataclasses import dataclass

from megatron_crossbert.arch import get_arch, get_encoder
from megatron_crossbert.config import RunConfig
from megatron_crossbert.planning.device import Runtime

INDEX_BYTES = 8
"""int64 token ids and gather indices."""
LSE_BYTES = NORM_STAT_BYTES = MATH_BYTES = 4
"""Attention's log-sum-exp, LayerNorm's mean and 1/std, and the CPU's math attention are fp32 whatever the
precision."""


@dataclass(frozen=True)
class Block:
    """The shape one transformer stack runs at, on one TP rank."""

    rows: int
    """Tokens times sequences per micro-batch."""
    sequences: int
    """Sequences per micro-batch: b, or b * views for CrossBERT."""
    width: int
    """Hidden size of the stack (the decoder's may be narrower)."""
    ffn: int
    """MLP width (GeGLU's FC1 is twice that)."""
    heads: int
    """Attention heads (before the TP split)."""
    tp: int
    """Tensor-parallel size: attention and MLP interiors are split over it."""
    norm_split: int
    """TP under sequence parallelism (LayerNorm regions split), else 1."""


def _rows_bytes(rows: float, width: int, element: int, split: int = 1) -> int:
    return int(rows * width * element) // split


def norm_bytes(block: Block, rt: Runtime, norms: int = 1) -> int:
    """``norms`` LayerNorms: each keeps its input and, per row, its fp32 mean and 1/std."""
    per_norm = _rows_bytes(block.rows, block.width, rt.element_bytes) + 2 * block.rows * NORM_STAT_BYTES
    return norms * per_norm // block.norm_split


def attention_kernel_bytes(block: Block, rt: Runtime, rope: bool, keys: int | None = None) -> int:
    """Self-attention (``keys`` None): QKV, output, RoPE's rotated Q and K and cos/sin; cross-attention
    (``keys`` = memory rows): Q (or rotated Q), output, K/V of the memory, rotated K."""
    e, head_dim = rt.element_bytes, block.width // block.heads
    if keys is None:
        width_rows = block.rows * (3 + 1 + (2 if rope else 0))
        tables = 4 * block.rows * head_dim if rope else 0
    else:
        width_rows = block.rows * 2 + keys * (2 + (1 if rope else 0))
        tables = 2 * (block.rows + keys) * head_dim if rope else 0
    kernel = _rows_bytes(width_rows, block.width, e, block.tp) + tables * e
    return kernel + score_bytes(block, rt, keys) + kernel_extras(block, rt, keys, rope)


def kernel_extras(block: Block, rt: Runtime, keys: int | None, rope: bool = False) -> int:
    """A fused kernel's fp32 log-sum-exp per query and head, and the dense ``[b, 1, q, k]`` mask SDPA
    builds from a boolean one in every call (so one per layer, in the activation dtype); SDPA's math
    kernel keeps neither but its own (``math_attention_bytes``)."""
    if rt.attention_backend == "megatron":
        return 0
    if rt.math_attention:
        return math_attention_bytes(block, rt, keys, rope)
    queries = block.rows // block.sequences
    lse = block.sequences * (block.heads // block.tp) * queries * LSE_BYTES
    if rt.attention_backend != "sdpa" or not rt.masked:
        return lse
    per_sequence_keys = queries if keys is None else keys // block.sequences
    return lse + block.sequences * queries * per_sequence_keys * rt.element_bytes


def math_attention_bytes(block: Block, rt: Runtime, keys: int | None, rope: bool) -> int:
    """SDPA's unfused math kernel (the CPU with attention dropout), computed in fp32 whatever the precision.
    It keeps Q and K scaled by sqrt(scale) (and V upcast when the activations are not fp32) in place of what
    a fused kernel keeps of them: the rotated Q and K, and cross-attention's own Q, are then not saved (a
    view of the fused QKV or KV output is, for V). Per score it keeps the softmax probabilities, the
    dropout mask (a float) and the dropped probabilities."""
    key_rows = block.rows if keys is None else keys
    copies = block.rows + key_rows + (key_rows if rt.element_bytes != MATH_BYTES else 0)
    replaced = (block.rows if rope or keys is not None else 0) + (key_rows if rope else 0)
    queries = block.rows // block.sequences
    scores = block.sequences * (block.heads // block.tp) * queries * (key_rows // block.sequences)
    return (_rows_bytes(copies, block.width, MATH_BYTES, block.tp) + 3 * scores * MATH_BYTES
            - _rows_bytes(replaced, block.width, rt.element_bytes, block.tp))


def score_bytes(block: Block, rt: Runtime, keys: int | None) -> int:
    """megatron's unfused attention keeps the softmax (and with dropout its mask and the dropped probs)."""
    if rt.attention_backend != "megatron":
        return 0
    per_score = rt.element_bytes + (rt.dropout_mask_bytes + rt.element_bytes if rt.attention_dropout else 0)
    queries = block.rows // block.sequences
    per_sequence_keys = queries if keys is None else keys // block.sequences
    return block.sequences * (block.heads // block.tp) * queries * per_sequence_keys * per_score


def mlp_bytes(block: Block, rt: Runtime, gated: bool) -> int:
    """Norm input, FC1 input, and what GELU (GeGLU) and FC2 keep."""
    inner = _rows_bytes(block.rows * (5 if gated else 2), block.ffn, rt.element_bytes, block.tp)
    return norm_bytes(block, rt) + _rows_bytes(block.rows, block.width, rt.element_bytes, block.norm_split) + inner


def layer_bytes(block: Block, rt: Runtime, *, gated: bool, rope: bool, memory_rows: int | None = None) -> int:
    """One layer: norms and linear inputs, attention(s), MLP, residual dropout masks."""
    norm_pair = norm_bytes(block, rt) + _rows_bytes(block.rows, block.width, rt.element_bytes, block.norm_split)
    total = norm_pair + attention_kernel_bytes(block, rt, rope) + mlp_bytes(block, rt, gated)
    residuals = 2
    if memory_rows is not None:
        total += norm_pair + attention_kernel_bytes(block, rt, rope, keys=memory_rows)
        residuals = 3
    if rt.hidden_dropout:
        total += residuals * _rows_bytes(block.rows, block.width, rt.dropout_mask_bytes, block.norm_split)
    return total


@dataclass(frozen=True)
class MicroBatchActivations:
    """Saved bytes of one micro-batch on one TP rank, by part (the planner's JSON keys)."""

    embedding_bytes: int
    """Token ids and the embedding dropout's mask (first stage)."""
    encoder_layer_bytes: int
    """One encoder layer (the input only, under full recompute)."""
    encoder_final_norm_bytes: int
    """The encoder's final LayerNorm input (last stage)."""
    decoder_bytes: int
    """CrossBERT's reconstruction decoder: memory, all its layers and its final norm (last stage)."""
    lm_head_bytes: int
    """Dense, GELU, LayerNorm and output-layer inputs at the predicted rows (last stage)."""
    logits_bytes: int
    """The cross-entropy's fp32 softmax, predicted rows x vocab / TP (last stage)."""
    recompute_peak_bytes: int
    """Extra during backward under full recompute: one layer rebuilt at a time (0 without recompute)."""

    def stage_bytes(self, stage: int, stages: int, encoder_layers: int) -> int:
        """What stage ``stage`` of ``stages`` keeps for this micro-batch (its ``encoder_layers`` layers)."""
        total = encoder_layers * self.encoder_layer_bytes
        if stage == 0:
            total += self.embedding_bytes
        if stage == stages - 1:
            total += self.encoder_final_norm_bytes + self.decoder_bytes + self.lm_head_bytes + self.logits_bytes
        return total


def encoder_block(run_cfg: RunConfig) -> Block:
    """The encoder at this run's micro-batch: every token (MLM) or each view's visible ones (CrossBERT)."""
    model, parallel = run_cfg.model, run_cfg.parallel
    seq, rows = run_cfg.pipeline_shape()
    tp = parallel.tensor_model_parallel_size
    return Block(seq * rows, rows, model.hidden_size, model.ffn, model.num_attention_heads, tp,
                 tp if parallel.sequence_parallel else 1)


def decoder_block(run_cfg: RunConfig) -> Block:
    """CrossBERT's decoder: the targets of each view as queries, at the decoder's width."""
    model, enc = run_cfg.model, encoder_block(run_cfg)
    seq = run_cfg.data.seq_length
    targets = seq - run_cfg.masking.visible_length(seq)
    views = run_cfg.training.micro_batch_size * run_cfg.masking.num_views
    return Block(targets * views, views, model.dec_hidden, model.dec_ffn, model.dec_heads, enc.tp, enc.norm_split)


def head_rows(run_cfg: RunConfig) -> int:
    """Rows the LM head and the logits exist at: CrossBERT's targets, or the MLM head's predicted positions."""
    spec = get_arch(run_cfg.model.arch)
    if spec.has_reconstruction_decoder:
        return decoder_block(run_cfg).rows
    from megatron_crossbert.models.flops import predicted_positions

    return round(predicted_positions(run_cfg)) * run_cfg.training.micro_batch_size


def micro_batch_activations(run_cfg: RunConfig, rt: Runtime) -> MicroBatchActivations:
    """Every term of one micro-batch on one TP rank (``MicroBatchActivations``)."""
    model, family = run_cfg.model, get_encoder(run_cfg.model.encoder)
    enc, recompute = encoder_block(run_cfg), run_cfg.parallel.recompute_activations
    rope, gated, e = not family.learned_positions, family.gated_mlp, rt.element_bytes
    full_layer = layer_bytes(enc, rt, gated=gated, rope=rope)
    layer_input = _rows_bytes(enc.rows, enc.width, e, enc.norm_split)
    rows = head_rows(run_cfg)
    decoder = recompute_peak = 0
    head_in = model.hidden_size
    if get_arch(model.arch).has_reconstruction_decoder:
        dec = decoder_block(run_cfg)
        decoder, dec_layer = _decoder_bytes(run_cfg, rt, enc, dec, rope, gated, recompute)
        recompute_peak = dec_layer if recompute else 0
        head_in = model.dec_hidden
    embedding = enc.rows * INDEX_BYTES + (_rows_bytes(enc.rows, enc.width, rt.dropout_mask_bytes, enc.norm_split)
                                          if rt.hidden_dropout else 0)
    if recompute:  # layer 0 then keeps only its input, so the embedding norm's own input shows, and the
        # frequencies handed to every checkpointed layer are kept once
        embedding += (norm_bytes(enc, rt) if family.embedding_norm else 0) + rotary_table_bytes(run_cfg, enc.rows)
    return MicroBatchActivations(
        embedding_bytes=embedding, encoder_layer_bytes=layer_input if recompute else full_layer,
        encoder_final_norm_bytes=norm_bytes(enc, rt), decoder_bytes=decoder,
        lm_head_bytes=(_rows_bytes(rows, head_in + 3 * model.hidden_size, e) + 2 * rows * NORM_STAT_BYTES) // enc.norm_split,
        logits_bytes=rows * run_cfg.model.padded_vocab_size(enc.tp) // enc.tp * LOGIT_BYTES,
        recompute_peak_bytes=max(full_layer, recompute_peak) if recompute else 0)


def rotary_table_bytes(run_cfg: RunConfig, rows: int) -> int:
    """RoPE frequencies ``[s, b, 1, head_dim]`` (fp32; twice with a local base): what a checkpointed layer
    receives besides its input. None for learned positions."""
    model = run_cfg.model
    if get_encoder(model.encoder).learned_positions:
        return 0
    kinds = 2 if model.windowed else 1
    return kinds * rows * (model.hidden_size // model.num_attention_heads) * ROTARY_BYTES


ROTARY_BYTES = 4
"""RoPE frequencies are computed in fp32."""
LOGIT_BYTES = 4
"""The cross-entropy upcasts logits and keeps its softmax in fp32 whatever the precision."""


def _decoder_bytes(run_cfg: RunConfig, rt: Runtime, enc: Block, dec: Block, rope: bool, gated: bool,
                   recompute: bool) -> tuple[int, int]:
    """(the decoder's saved bytes, one decoder layer's full bytes): the encoder output it reads (once for
    every layer), its layers, its final norm's input."""
    layer = layer_bytes(dec, rt, gated=gated, rope=rope, memory_rows=enc.rows)
    layer_input = _rows_bytes(dec.rows, dec.width, rt.element_bytes, dec.norm_split)
    memory = _rows_bytes(enc.rows, enc.width, rt.element_bytes, enc.norm_split)
    kept = layer_input if recompute else layer
    if recompute:
        memory += rotary_table_bytes(run_cfg, dec.rows + enc.rows)
    return memory + run_cfg.model.decoder_num_layers * kept + norm_bytes(dec, rt), layer
