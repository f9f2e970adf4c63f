"""What each architecture derives from a run's config: its sample builder, pipeline shape, supervised
token count, attention calls, FP8 GEMM rows and config check (the callables behind ``arch.ArchSpec``'s rule fields).

They live apart from ``arch.py`` because they read ``RunConfig``/``MaskingConfig``, and ``config``
validates against the registry: the registry names these functions by ``LazyRef``, so the import graph
runs one way (``config`` -> ``arch``; ``arch_rules`` -> ``config``, ``masking``) with no loop, not even a
type-only one. The masking rules themselves (views, 80/10/10, the visible length) stay in ``masking``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from megatron_crossbert import masking
from megatron_crossbert.config import MaskingConfig, RunConfig
from megatron_crossbert.masking import TokenIds


def crossbert_sample(mask_cfg: MaskingConfig, index: int, tokens: np.ndarray, ids: TokenIds) -> dict:
    """CrossBERT sample: ``tokens [L]``, ``visible [V, Lv]``, ``targets [V, L-Lv]`` (``ids`` unused)."""
    views = masking.complementary_views(mask_cfg.seed, index, len(tokens), mask_cfg.mask_ratio,
                                        complementary=mask_cfg.complementary,
                                        pinned=(0,) if mask_cfg.pin_cls else ())
    return {"tokens": np.asarray(tokens, dtype=np.int64), "visible": views.visible, "targets": views.targets}


def mlm_sample(mask_cfg: MaskingConfig, index: int, tokens: np.ndarray, ids: TokenIds) -> dict:
    """MLM sample (BERT and modern MLM): 80/10/10-masked ``tokens``, ``labels``, ``loss_mask``, ``padding_mask``."""
    masked, labels, loss_mask = masking.bert_mask(
        mask_cfg.seed, index, tokens, mask_prob=mask_cfg.bert_mask_prob_at(index, len(tokens)),
        replace_mask=mask_cfg.bert_replace_mask,
        replace_random=mask_cfg.bert_replace_random, mask_id=ids.mask_id, vocab_size=ids.vocab_size,
        special_ids=ids.special_ids)
    return {"tokens": masked, "labels": labels, "loss_mask": loss_mask,
            "padding_mask": np.ones(len(tokens), dtype=np.int64)}


def views_pipeline_shape(run_cfg: RunConfig) -> tuple[int, int]:
    """CrossBERT stages exchange the visible tokens of every view: ``[Lv, b*V, h]``."""
    seq, mbs = run_cfg.data.seq_length, run_cfg.training.micro_batch_size
    return run_cfg.masking.visible_length(seq), mbs * run_cfg.masking.num_views


def full_pipeline_shape(run_cfg: RunConfig) -> tuple[int, int]:
    """MLM stages exchange the whole packed sequence: ``[L, b, h]``."""
    return run_cfg.data.seq_length, run_cfg.training.micro_batch_size


def views_supervised(run_cfg: RunConfig) -> float:
    """CrossBERT: every target of every view gets a loss, ``(L - Lv) * V``."""
    seq, mask = run_cfg.data.seq_length, run_cfg.masking
    return float((seq - mask.visible_length(seq)) * mask.num_views)


def mlm_supervised(run_cfg: RunConfig) -> float:
    """MLM: ``round(p * L)`` selected positions (no special tokens in synthetic batches)."""
    return float(max(1, round(run_cfg.masking.bert_mask_prob * run_cfg.data.seq_length)))


def check_views(run_cfg: RunConfig) -> None:
    """Fail at config time when the views cannot be drawn (same checks as the data will run)."""
    mask, seq = run_cfg.masking, run_cfg.data.seq_length
    masking.check_view_shape(seq, mask.mask_ratio, mask.complementary)


def no_check(run_cfg: RunConfig) -> None:
    """Architectures without cross-section rules."""
    return None


@dataclass(frozen=True)
class AttentionCall:
    """One kind of core-attention call a training step makes (every layer of a stack makes it)."""

    stack: str
    """'encoder', 'decoder self' or 'decoder cross'."""
    batch: int
    """Rows of the batch it sees (micro-batch, times the views for CrossBERT)."""
    queries: int
    """Query length."""
    keys: int
    """Key length."""
    heads: int
    """Attention heads (before tensor parallelism splits them)."""
    head_dim: int
    """Channels per head."""
    layers: int
    """Layers of the stack making this call (windows: ``attention_windows.layer_half_windows``)."""


def views_attention_calls(run_cfg: RunConfig) -> tuple[AttentionCall, ...]:
    """CrossBERT: encoder self-attention over Lv visible tokens, decoder self-attention among the T = L - Lv
    targets and cross-attention from them to the Lv visible states, on ``b*V`` rows."""
    model, seq = run_cfg.model, run_cfg.data.seq_length
    visible, rows = views_pipeline_shape(run_cfg)
    targets, head_dim = seq - visible, model.hidden_size // model.num_attention_heads
    dec_dim, dec_layers = model.dec_hidden // model.dec_heads, model.decoder_num_layers
    self_layers = 0 if model.decoder_cross_attention_only else dec_layers
    return (AttentionCall("encoder", rows, visible, visible, model.num_attention_heads, head_dim, model.num_layers),
            AttentionCall("decoder self", rows, targets, targets, model.dec_heads, dec_dim, self_layers),
            AttentionCall("decoder cross", rows, targets, visible, model.dec_heads, dec_dim, dec_layers))


def full_attention_calls(run_cfg: RunConfig) -> tuple[AttentionCall, ...]:
    """MLM: encoder self-attention over the whole packed sequence on ``b`` rows."""
    model = run_cfg.model
    seq, rows = full_pipeline_shape(run_cfg)
    return (AttentionCall("encoder", rows, seq, seq, model.num_attention_heads,
                          model.hidden_size // model.num_attention_heads, model.num_layers),)


def views_gemm_rows(run_cfg: RunConfig) -> dict[str, int]:
    """Rows of the TE GEMMs of one CrossBERT micro-batch (FP8 needs each divisible by 8), named by fields."""
    visible, rows = views_pipeline_shape(run_cfg)
    targets = run_cfg.data.seq_length - visible
    return {"encoder rows (visible tokens x training.micro_batch_size x views)": visible * rows,
            "decoder rows (masked targets x training.micro_batch_size x views)": targets * rows,
            "cross-attention key rows (visible tokens x training.micro_batch_size x views)": visible * rows}


def full_gemm_rows(run_cfg: RunConfig) -> dict[str, int]:
    """Rows of the TE GEMMs of one MLM micro-batch: the encoder over every position (the sparse head is local)."""
    seq, rows = full_pipeline_shape(run_cfg)
    return {"encoder rows (data.seq_length x training.micro_batch_size)": seq * rows}

