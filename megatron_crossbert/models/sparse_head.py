"""Sparse prediction: the MLM head and the vocab projection run on the predicted positions only.

ModernBERT (``masked_prediction``), HF ``ModernBertForMaskedLM`` (``sparse_prediction``) and mmBERT
gather the masked positions before the head. A dense head spends ``2*h*(h+V)`` FLOPs on every
position only for the loss mask to zero 85% of them (about 20% of BERT-base's forward at L=512).
``sparse_lm_loss`` serves both MLM baselines (megatron's ``BertModel`` subclass and the modern
``MlmModel``) with the modules those classes already have (``lm_head``, the tied ``output_layer``,
``compute_language_model_loss``): no new parameter, no new dist-checkpoint key.

Layouts (megatron is sequence first):

- the encoder output is ``[s, b, h]`` (``[s/tp, b, h]`` under sequence parallelism);
- predicted positions are flattened s-major, ``flat = pos * b + row``: the row order of
  ``hidden.reshape(s*b, h)``, so one ``index_select`` picks them whatever the count per row;
- the N picked rows form a ``[N, 1, h]`` "sequence" for the head, the output layer and megatron's
  vocab-parallel cross-entropy, which are all shape-agnostic in s and b;
- the N losses are scattered back into zeros ``[b, s]``, so the forward step's contract (per-token
  loss ``[b, L]`` times the loss mask) holds, and the gradient is exactly the dense one restricted to
  the predicted positions (the dense path multiplies the others by 0).

Sequence parallelism: each TP rank holds a different slice of the sequence with a different number
of predicted positions, while the output layer all-gathers its input along the first dim, which
needs equal shares. So the sequence is gathered first (its backward only splits: after the selection
every rank computes the same thing, so the gradient is already complete), the N rows are padded to
a multiple of TP and scattered (each rank runs the SP-tagged head on its share, and
``finalize_model_grads`` all-reduces those gradients as in the dense path), and the padded rows'
losses are dropped. Pipeline parallelism needs nothing: the selection happens on the last stage.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from megatron.core import tensor_parallel
from torch import Tensor


def prediction_index(prediction_mask: Tensor) -> Tensor:
    """Flat s-major indices ``pos * b + row`` of the nonzero entries of ``prediction_mask [b, s]``.

    ``nonzero`` synchronises with the host on a GPU (the count is data-dependent), as ModernBERT's
    boolean indexing does.
    """
    return prediction_mask.transpose(0, 1).reshape(-1).nonzero(as_tuple=False).squeeze(1)


def _select_rows(hidden: Tensor, index: Tensor) -> Tensor:
    """``[s, b, h]`` -> the rows at ``index`` as ``[N, h]`` (autograd scatters the gradient back)."""
    seq, batch, width = hidden.shape
    return hidden.reshape(seq * batch, width).index_select(0, index)


def _head_input(model, hidden: Tensor, index: Tensor) -> tuple[Tensor, int]:
    """The head's input ``[N', 1, h]`` and N (N' = N, or N padded to a multiple of TP and split under SP)."""
    if not model.config.sequence_parallel:
        rows = _select_rows(hidden, index)
        return rows.unsqueeze(1), rows.shape[0]
    full = tensor_parallel.gather_from_sequence_parallel_region(
        hidden, tensor_parallel_output_grad=False, group=model.tp_group)
    rows = _select_rows(full, index)
    count = rows.shape[0]
    rows = F.pad(rows, (0, 0, 0, (-count) % model.config.tensor_model_parallel_size))
    return tensor_parallel.scatter_to_sequence_parallel_region(rows.unsqueeze(1), group=model.tp_group), count


def _predicted_labels(labels: Tensor, index: Tensor, padded: int) -> Tensor:
    """Labels ``[b, s]`` at ``index`` as megatron's ``[b=1, s=N']`` (padding rows get label 0, dropped later)."""
    picked = labels.transpose(0, 1).reshape(-1).index_select(0, index)
    return F.pad(picked, (0, padded - picked.shape[0])).unsqueeze(0)


def _scatter_loss(loss: Tensor, index: Tensor, batch: int, seq: int) -> Tensor:
    """Per-position losses ``[N]`` back into float32 zeros ``[b, s]`` (the dense path's contract)."""
    flat = loss.new_zeros(seq * batch, dtype=torch.float32).index_copy(0, index, loss.float())
    return flat.view(seq, batch).transpose(0, 1)


def sparse_lm_loss(model, hidden: Tensor, labels: Tensor, prediction_mask: Tensor) -> Tensor:
    """Per-token MLM loss ``float32 [b, s]`` computed on the predicted positions only (zeros elsewhere).

    ``model`` is a megatron LanguageModule with ``lm_head``, a tied ``output_layer`` and
    ``compute_language_model_loss``; ``hidden`` is its encoder output on the last pipeline stage.
    """
    batch, seq = labels.shape
    index = prediction_index(prediction_mask)
    rows, count = _head_input(model, hidden, index)
    logits, _ = model.output_layer(model.lm_head(rows), weight=model.shared_embedding_or_output_weight())
    loss = model.compute_language_model_loss(_predicted_labels(labels, index, logits.shape[0]), logits)
    return _scatter_loss(loss[0, :count], index, batch, seq)
