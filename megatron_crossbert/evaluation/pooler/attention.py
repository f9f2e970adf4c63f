"""Attention pooling: a learned query attends over a frozen backbone's token states (``--pooling attention``).

A linear map commutes with the mean over tokens, so the linear pooler trains on pooled features alone
(``train.py``); attention weights depend on each token, so this pooler trains on the token states themselves.
They are computed once per text (``HFEncoder.token_states``: the real tokens only, no padding) and kept for
the whole run, so the backbone still never runs in the training loop. One query vector ``q`` scores every
token (``x_t . q``), the attention mask keeps padding out of the softmax, and the weighted sum of the token
states goes through the same linear projection as the linear pooler. ``q`` starts at zero: uniform weights,
i.e. mean pooling, so training starts from the raw readout as the linear pooler does.

``AttentionPooling`` is a sentence-transformers module (``forward`` on ``token_embeddings`` and
``attention_mask``, ``save``/``load``), saved in place of ``Pooling``. sentence-transformers >= 6 imports a
module class outside its own namespace only when asked: ``SentenceTransformer(dir, trust_remote_code=True)``
loads the directory, offline, importing this class from the installed package (no file of the directory is
executed). ``crossbert-mteb`` and ``crossbert-probe`` read it without that flag (``recipe.py``).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
from sentence_transformers.base.modules import Module


class AttentionPooling(Module):
    """``sentence_embedding = softmax_t(x_t . q) . x`` over the attended tokens."""

    config_keys = ["embedding_dimension"]

    def __init__(self, embedding_dimension: int) -> None:
        super().__init__()
        self.embedding_dimension = int(embedding_dimension)
        self.query = torch.nn.Parameter(torch.zeros(self.embedding_dimension))

    def pool(self, states: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``[b, s, h]`` token states and their ``[b, s]`` attention mask -> ``[b, h]``."""
        scores = (states @ self.query.to(states.dtype)).masked_fill(mask == 0, torch.finfo(states.dtype).min)
        return (torch.softmax(scores, dim=-1).unsqueeze(-1) * states).sum(-2)

    def forward(self, features: dict, **kwargs) -> dict:
        features["sentence_embedding"] = self.pool(features["token_embeddings"], features["attention_mask"])
        return features

    def get_embedding_dimension(self) -> int:
        return self.embedding_dimension

    get_sentence_embedding_dimension = get_embedding_dimension

    def save(self, output_path: str, *args, safe_serialization: bool = True, **kwargs) -> None:
        self.save_config(output_path)
        self.save_torch_weights(output_path, safe_serialization=safe_serialization)

    @classmethod
    def load(cls, model_name_or_path: str, subfolder: str = "", **kwargs) -> "AttentionPooling":
        hub = {k: kwargs[k] for k in ("token", "cache_folder", "revision", "local_files_only") if k in kwargs}
        module = cls(**cls.load_config(model_name_or_path, subfolder=subfolder, **hub))
        cls.load_torch_weights(model_name_or_path, subfolder=subfolder, model=module, **hub)
        return module


@lru_cache(maxsize=8)
def load_attention(path: str) -> AttentionPooling:
    """The module saved in ``path`` (eval mode, CPU, float32)."""
    return AttentionPooling.load(path).float().eval()


def attention_identity(path: str | Path) -> str:
    """Content hash of a saved module (its config and weights): part of the feature-cache identity of every
    text pooled through it, so another pooler on the same backbone never reuses these features."""
    from megatron_crossbert.content_identity import files_identity

    names = ("config.json", "model.safetensors", "pytorch_model.bin")
    return "attention:" + files_identity((n, Path(path) / n) for n in names).split(":")[-1][:16]


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
