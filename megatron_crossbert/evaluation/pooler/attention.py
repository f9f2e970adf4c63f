"""Attention pooling: a learned query attends over a frozen backbone's token states (``--pooling attention``).

A linear map commutes with the mean over tokens, so the linear pooler trains on pooled features alone
(``train.py``); attention weights depend on each token, so this pooler trains on the token states themselves.
They are computed once per text (``HFEncoder.token_states``: the real tokens only, no padding) and kept for
the whole run, so the backbone still never runs in the training loop. One query vector ``q`` scores every
token (``x_t . q``), the attention mask keeps padding out of the softmax, and the weighted sum of the token
states goes through the same linear projection as the linear pooler. ``q`` starts at zero: uniform weights,
i.e. mean pooling, so training starts from the raw readout as the linear pooler does.

``AttentionPooling`` (``evaluation/attention_pooling.py``, where reading a saved directory finds it) is a
sentence-transformers module (``forward`` on ``token_embeddings`` and ``attention_mask``, ``save``/``load``), saved
in place of ``Pooling``. ``crossbert-mteb`` and ``crossbert-probe`` read it without ``trust_remote_code`` (``recipe.py``).
"""

from __future__ import annotations

import numpy as np
import torch

from megatron_crossbert.evaluation.attention_pooling import AttentionPooling

__all__ = ["AttentionPooling", "mean_of_states", "padded", "train_attention_pooler"]
"""``AttentionPooling`` is handed on: directories saved when it was defined here name this module in their
``modules.json`` (``SentenceTransformer(dir, trust_remote_code=True)`` imports it from there)."""


def padded(states: list[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
    """Variable-length ``[len_i, h]`` token states as one zero-padded ``[b, s, h]`` batch and its mask."""
    longest = max(len(s) for s in states)
    batch = torch.zeros(len(states), longest, states[0].shape[-1])
    mask = torch.zeros(len(states), longest, dtype=torch.long)
    for i, s in enumerate(states):
        batch[i, :len(s)] = torch.from_numpy(np.asarray(s, dtype=np.float32))
        mask[i, :len(s)] = 1
    return batch, mask


def mean_of_states(states: list[np.ndarray]) -> np.ndarray:
    """Each text's mean token state ``[n, h]`` (the readout the zero query starts at)."""
    return np.stack([np.asarray(s, dtype=np.float32).mean(0) for s in states])


def train_attention_pooler(anchors: list[np.ndarray], positives: list[np.ndarray], config):
    """The query and the map trained together with MultipleNegativesRankingLoss on the pairs' token states;
    returns ``(AttentionPooling, Linear, log)``. ``config`` is a ``train.PoolerConfig``."""
    from megatron_crossbert.evaluation.pooler.train import start_layer, train_in_batch

    layer = start_layer(mean_of_states(anchors), mean_of_states(positives), config)
    pooler = AttentionPooling(anchors[0].shape[-1])

    def embed(batch: torch.Tensor) -> list[torch.Tensor]:
        return [layer(pooler.pool(*padded([side[i] for i in batch.tolist()]))) for side in (anchors, positives)]

    log = train_in_batch([*pooler.parameters(), *layer.parameters()], embed, len(anchors), config)
    return pooler.eval(), layer.eval(), log
