"""Attention pooling read from a saved directory: ``AttentionPooling``, the sentence-transformers module a pooler
trained on a frozen backbone (``evaluation/pooler/attention.py``) is saved as, in place of ``Pooling``.

It lives among the shared modules because reading a trained directory (``encoders.HFEncoder``,
``embedder.Embedder``) needs it as much as training one does, and the shared modules never import a task
subpackage. sentence-transformers >= 6 imports a module class outside its own namespace only when asked:
``SentenceTransformer(dir, trust_remote_code=True)`` loads the directory, offline, importing this class from the
installed package (no file of the directory is executed). Directories saved when the class lived in
``evaluation/pooler/attention.py`` name that path, which still hands the class on (``recipe.ATTENTION_TYPES``).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

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
    text pooled through it, so another trained attention on the same backbone never reuses these features."""
    from megatron_crossbert.content_identity import files_identity

    names = ("config.json", "model.safetensors", "pytorch_model.bin")
    return "attention:" + files_identity((n, Path(path) / n) for n in names).split(":")[-1][:16]
