"""Model FLOPs per packed sequence (forward + backward), the numerator of MFU.

Conventions (the usual "model FLOPs", as in the Megatron-LM / PaLM MFU papers):
- only matrix multiplications count, 2 FLOPs per multiply-add; LayerNorm, softmax, GELU, dropout,
  embedding lookups and the cross-entropy are ignored;
- backward = 2x forward, so the total is 3x the forward count; activation recompute is NOT added
  (it is hardware work, not model work);
- attention counts both ``Q K^T`` and ``P V`` over the full bidirectional score matrix, except in local
  layers (``attention_windows``): a query there sees ``local_attention + 1`` positions, i.e. the
  fraction ``(local_attention + 1) / L`` of the keys spread over the ``L`` positions of the sample
  (deterministic; edges ignored). Document masks are data-dependent and not subtracted: MFU counts
  the dense score matrix of global layers, so masked runs are not credited with skipped blocks;
- the LM output projection uses the padded vocabulary at the run's TP size (the GEMM that runs).

Per architecture:
- CrossBERT, per view: encoder over Lv tokens; decoder (width d, possibly narrower than the encoder's
  h) over T = L - Lv queries (self-attention among queries, cross-attention to the Lv encoder states
  incl. their K/V projection from width h, MLP; cross-attention alone with
  ``model.decoder_cross_attention_only``); LM head (dense d -> h + tied h x V output projection)
  over the T targets only, and over the Lv visible tokens too when ``model.encoder_token_loss_weight`` is on.
  Times the number of views.
- MLM baselines (megatron BertModel; the modern MlmModel): encoder over all L tokens; LM head over the
  positions it runs on: the ``round(p * L)`` masked ones with ``model.sparse_prediction`` (the
  default), all L with the dense head (logits everywhere, loss masked).
- GeGLU (modern family): fc1 is 2*ffn wide, so an MLP costs 6*s*h*ffn instead of 4*s*h*ffn.
"""

from __future__ import annotations

from megatron_crossbert.arch import get_arch, get_encoder
from megatron_crossbert.arch_rules import sample_layout
from megatron_crossbert.attention_windows import layer_half_windows
from megatron_crossbert.config import RunConfig

BACKWARD_FACTOR = 3.0


def keys_per_query(keys: int, span: int, half_window: int) -> float:
    """Keys a query scores: all ``keys``, or in a local layer the share of them (spread over ``span``
    original positions) inside its ``2 * half_window + 1`` positions."""
    if not half_window:
        return float(keys)
    return min(float(keys), keys * (2 * half_window + 1) / span)


def self_attention_flops(seq: int, hidden: int, keys: float | None = None) -> float:
    """QKV projection, scores, weighted values and output projection for ``seq`` tokens (each query
    scoring ``keys`` keys; default all ``seq``)."""
    keys = seq if keys is None else keys
    return 2.0 * seq * hidden * 3 * hidden + 4.0 * seq * keys * hidden + 2.0 * seq * hidden * hidden


def cross_attention_flops(queries: int, memory: int, hidden: int, keys: float | None = None,
                          memory_width: int | None = None) -> float:
    """Q projection (d x d), K/V projection of the memory (its width -> 2d), scores and values over
    ``keys`` keys per query (default all ``memory``), output (d x d)."""
    width = hidden if memory_width is None else memory_width
    projections = 2.0 * queries * hidden * hidden * 2 + 2.0 * memory * width * 2 * hidden
    return projections + 4.0 * queries * (memory if keys is None else keys) * hidden


def _half_windows(run_cfg: RunConfig, layers: int) -> tuple[int, ...]:
    model = run_cfg.model
    return layer_half_windows(layers, model.local_attention, model.global_attn_every_n_layers)


def mlp_flops(seq: int, hidden: int, ffn: int, gated: bool = False) -> float:
    """fc1 (2*ffn wide when gated: GeGLU) and fc2 for ``seq`` tokens."""
    return 2.0 * seq * hidden * ffn * (3 if gated else 2)


def encoder_forward_flops(run_cfg: RunConfig, seq: int) -> float:
    """One forward pass of the whole encoder stack over ``seq`` tokens (of the ``L`` positions of a sample)."""
    model, span = run_cfg.model, run_cfg.data.seq_length
    mlp = mlp_flops(seq, model.hidden_size, model.ffn, get_encoder(model.encoder).gated_mlp)
    return sum(self_attention_flops(seq, model.hidden_size, keys_per_query(seq, span, half)) + mlp
               for half in _half_windows(run_cfg, model.num_layers))


def decoder_forward_flops(run_cfg: RunConfig, queries: int, memory: int) -> float:
    """One forward pass of the reconstruction decoder (``queries`` targets over ``memory`` visible states);
    its layers are ``dec_hidden`` wide, their cross-attention K/V read the encoder's ``hidden_size``."""
    model, span = run_cfg.model, run_cfg.data.seq_length
    hidden, full = model.dec_hidden, not model.decoder_cross_attention_only
    mlp = mlp_flops(queries, hidden, model.dec_ffn, get_encoder(model.encoder).gated_mlp) if full else 0.0
    return sum((self_attention_flops(queries, hidden, keys_per_query(queries, span, half)) if full else 0.0)
               + cross_attention_flops(queries, memory, hidden, keys_per_query(memory, span, half),
                                       memory_width=model.hidden_size) + mlp
               for half in _half_windows(run_cfg, model.decoder_num_layers))


def lm_head_forward_flops(run_cfg: RunConfig, positions: float, input_width: int | None = None) -> float:
    """Dense (input width -> h) plus the tied output projection (h x padded vocab) at ``positions`` rows."""
    model = run_cfg.model
    vocab = model.padded_vocab_size(run_cfg.parallel.tensor_model_parallel_size)
    width = model.hidden_size if input_width is None else input_width
    return 2.0 * positions * model.hidden_size * (width + vocab)


def forward_flops_per_view(run_cfg: RunConfig) -> float:
    """CrossBERT forward FLOPs for one view of one packed sequence."""
    seq = run_cfg.data.seq_length
    visible = run_cfg.masking.visible_length(seq)
    targets = seq - visible
    head_rows = targets + (visible if run_cfg.model.encoder_token_loss_weight else 0)
    return (encoder_forward_flops(run_cfg, visible) + decoder_forward_flops(run_cfg, targets, visible)
            + lm_head_forward_flops(run_cfg, head_rows, input_width=run_cfg.model.dec_hidden))


def crossbert_flops_per_sample(run_cfg: RunConfig) -> float:
    """CrossBERT's model FLOPs: forward + backward over all views of one packed sequence."""
    return BACKWARD_FACTOR * run_cfg.masking.num_views * forward_flops_per_view(run_cfg)


def predicted_positions(run_cfg: RunConfig) -> float:
    """Rows the MLM head runs on: the supervised count with sparse prediction (``SampleLayout.supervised_tokens``,
    ``round(p * L)``), else all L positions."""
    if run_cfg.model.sparse_prediction:
        return sample_layout(run_cfg.model.arch).supervised_tokens(run_cfg)
    return float(run_cfg.data.seq_length)


def mlm_flops_per_sample(run_cfg: RunConfig) -> float:
    """The MLM baselines' model FLOPs: encoder over all L positions, head over the predicted ones."""
    seq = run_cfg.data.seq_length
    head = lm_head_forward_flops(run_cfg, predicted_positions(run_cfg))
    return BACKWARD_FACTOR * (encoder_forward_flops(run_cfg, seq) + head)


def model_flops_per_sample(run_cfg: RunConfig) -> float:
    """Forward + backward model FLOPs for one packed sequence of ``data.seq_length`` tokens (all views): the
    views' encoder, decoder and head (CrossBERT), else the MLMs' encoder and head."""
    if get_arch(run_cfg.model.arch).uses_views:
        return crossbert_flops_per_sample(run_cfg)
    return mlm_flops_per_sample(run_cfg)
