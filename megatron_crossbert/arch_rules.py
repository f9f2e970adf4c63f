"""What each sample layout derives from a run's config: its sample builder, supervised token count and
attention calls, as real functions in one ``SampleLayout`` per layout (``sample_layout(arch)`` picks it by
``ArchSpec.uses_views``).

They live apart from ``arch.py`` because they read ``RunConfig``/``MaskingConfig``, and ``config`` validates
against the registry: the import graph runs one way (``config`` -> ``arch``; ``arch_rules`` -> ``config``,
``masking``). The shape rules that the config itself checks (pipeline shape, FP8 GEMM rows, the views' check)
are ``RunConfig``'s; the masking rules themselves (views, 80/10/10, the visible length) stay in ``masking``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from megatron_crossbert import masking
from megatron_crossbert.arch import get_arch
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


def views_supervised(run_cfg: RunConfig) -> float:
    """CrossBERT: every target of every view gets a loss, ``(L - Lv) * V``."""
    seq, mask = run_cfg.data.seq_length, run_cfg.masking
    return float((seq - mask.visible_length(seq)) * mask.num_views)


def mlm_supervised(run_cfg: RunConfig) -> float:
    """MLM: ``round(p * L)`` selected positions (no special tokens in synthetic batches)."""
    return float(max(1, round(run_cfg.masking.bert_mask_prob * run_cfg.data.seq_length)))


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
    visible, rows = run_cfg.pipeline_shape()
    targets, head_dim = seq - visible, model.hidden_size // model.num_attention_heads
    dec_dim, dec_layers = model.dec_hidden // model.dec_heads, model.decoder_num_layers
    self_layers = 0 if model.decoder_cross_attention_only else dec_layers
    return (AttentionCall("encoder", rows, visible, visible, model.num_attention_heads, head_dim, model.num_layers),
            AttentionCall("decoder self", rows, targets, targets, model.dec_heads, dec_dim, self_layers),
            AttentionCall("decoder cross", rows, targets, visible, model.dec_heads, dec_dim, dec_layers))


def full_attention_calls(run_cfg: RunConfig) -> tuple[AttentionCall, ...]:
    """MLM: encoder self-attention over the whole packed sequence on ``b`` rows."""
    model = run_cfg.model
    seq, rows = run_cfg.pipeline_shape()
    return (AttentionCall("encoder", rows, seq, seq, model.num_attention_heads,
                          model.hidden_size // model.num_attention_heads, model.num_layers),)


@dataclass(frozen=True)
class SampleLayout:
    """The rules one sample layout implies, as real functions (views: CrossBERT; whole sequences: the MLMs)."""

    make_sample: Callable[..., dict]
    """``(masking_cfg, index, tokens, TokenIds) -> sample dict``: pure numpy, shared by data and benchmarks."""
    supervised_tokens: Callable[[RunConfig], float]
    """``(run_cfg) ->`` tokens with a reconstruction loss per packed sequence."""
    attention_calls: Callable[[RunConfig], tuple[AttentionCall, ...]]
    """``(run_cfg) ->`` each kind of core-attention call of a training step (its shapes: what compiled
    FlexAttention makes one kernel for)."""


VIEWS = SampleLayout(make_sample=crossbert_sample, supervised_tokens=views_supervised,
                     attention_calls=views_attention_calls)
SEQUENCE = SampleLayout(make_sample=mlm_sample, supervised_tokens=mlm_supervised,
                        attention_calls=full_attention_calls)


def sample_layout(arch: str) -> SampleLayout:
    """The layout of architecture ``arch``'s samples (``ArchSpec.uses_views``)."""
    return VIEWS if get_arch(arch).uses_views else SEQUENCE
