"""The modules after ``Pooling`` of a sentence-transformers directory (``Dense``, ``Normalize``), applied to
pooled features.

A pooler trained on a frozen backbone (``evaluation/pooler``) is saved as sentence-transformers' own ``Dense``
module after ``Pooling``, so ``SentenceTransformer(dir)`` loads it. The evaluation encoders cache pooled
backbone features (``feature_cache.py``); applying the Dense modules to those cached features gives the same
vectors as ``SentenceTransformer(dir).encode`` (checked to 1e-6 in the tests), and the backbone, which the
pooler leaves unchanged, is never run twice for the same text. ``crossbert-mteb`` and ``crossbert-probe`` both
read a directory through them (``apply_dense`` then, after any whitening, ``l2_normalize``).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Sequence

import numpy as np
import torch


@lru_cache(maxsize=8)
def load_dense(path: str):
    """sentence-transformers' ``Dense`` module saved in ``path`` (eval mode, CPU, float32)."""
    from sentence_transformers.sentence_transformer.modules import Dense

    return Dense.load(path).float().eval()


@torch.inference_mode()
def apply_dense(paths: Sequence[str], features: np.ndarray) -> np.ndarray:
    """``features`` ``[..., h]`` through each Dense module of ``paths`` in order (unchanged when none)."""
    if not paths:
        return features
    x = torch.from_numpy(np.ascontiguousarray(features, dtype=np.float32))
    shape = x.shape[:-1]
    x = x.reshape(-1, x.shape[-1])
    for path in paths:
        x = load_dense(str(path))({"sentence_embedding": x})["sentence_embedding"]
    return x.reshape(*shape, x.shape[-1]).numpy()


def l2_normalize(x: np.ndarray) -> np.ndarray:
    """Unit rows (sentence-transformers' ``Normalize``); a zero row stays zero."""
    return x / np.clip(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12, None)
