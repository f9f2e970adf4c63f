"""Attention-adjusted model FLOPs: only the query-key pairs the document masks and windows allow.

``models.flops`` counts the dense score matrix of every global layer (the usual MFU convention), but
FlexAttention skips the masked blocks: with packed documents at 8k context a dense count overstates the work
done about 1.4x, and so MFU. This module reports the count of the pairs that are allowed beside the dense one:
per packed sample, a global layer scores the pairs inside each document (``sum n_d^2``), a local layer the
pairs inside each document within its window. CrossBERT's stacks see a uniform random subset of the
positions (``Lv`` visible, ``T`` targets), so their allowed pairs are the sample's allowed pairs scaled by
``(queries / L) * (keys / L)``: the expectation under uniform masking, exact for the MLM encoder.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from megatron_crossbert.arch_rules import sample_layout
from megatron_crossbert.attention_windows import layer_half_windows
from megatron_crossbert.config import RunConfig
from megatron_crossbert.models.flops import BACKWARD_FACTOR, keys_per_query, model_flops_per_sample


def window_pairs(length: int, half_window: int) -> int:
    """Ordered pairs ``(i, j)`` of one document of ``length`` tokens with ``|i - j| <= half_window``
    (0: no window, all ``length^2``)."""
    if not half_window or half_window >= length - 1:
        return length * length
    return length + 2 * sum(length - d for d in range(1, half_window + 1))


def allowed_pairs(document_lengths: Sequence[int], half_window: int = 0) -> int:
    """Query-key pairs one packed sample's document mask (and window) allows."""
    return sum(window_pairs(int(n), half_window) for n in document_lengths)


def document_lengths(segments: np.ndarray) -> list[int]:
    """Tokens per document of one packed sample's ``segments`` row (document ids)."""
    return np.unique(np.asarray(segments), return_counts=True)[1].tolist()


def attention_adjusted_flops_per_sample(run_cfg: RunConfig, lengths: Sequence[int]) -> float:
    """``model_flops_per_sample`` with each layer's dense score pairs replaced by the allowed ones."""
    model, seq, mbs = run_cfg.model, run_cfg.data.seq_length, run_cfg.training.micro_batch_size
    windows = dict(local_attention=model.local_attention, global_attn_every_n_layers=model.global_attn_every_n_layers)
    skipped = 0.0
    for call in sample_layout(model.arch).attention_calls(run_cfg):
        width, rows_per_sample = call.heads * call.head_dim, call.batch / mbs
        for half in layer_half_windows(call.layers, **windows):
            dense = call.queries * keys_per_query(call.keys, seq, half)
            allowed = allowed_pairs(lengths, half) * (call.queries / seq) * (call.keys / seq)
            skipped += rows_per_sample * 4.0 * width * max(0.0, dense - allowed)
    return model_flops_per_sample(run_cfg) - BACKWARD_FACTOR * skipped
