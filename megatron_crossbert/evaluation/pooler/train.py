"""Train a pooler on a frozen backbone's cached features and save it as a sentence-transformers directory.

(Attention pooling, the other pooling, trains on token states instead: ``attention.py``.)

The pooler is mean pooling (the backbone's own pooling) followed by a linear map. A linear map commutes with
the mean over tokens, so training it needs each text's pooled backbone features only, computed once and
cached (``CachingMtebEncoder.features``): the backbone never runs in the training loop and cannot change.
The map starts as the identity (the raw readout), and is trained with sentence-transformers'
``MultipleNegativesRankingLoss`` (cosine similarity times ``scale``, cross-entropy over the in-batch
positives; its own ``compute_loss_from_embeddings``).

The result is saved with sentence-transformers' own modules: ``Transformer`` (the backbone's weights as
loaded, so bit-identical), ``Pooling``, ``Dense`` (identity activation: the map) and, when the backbone's
recipe L2-normalises, ``Normalize``. ``SentenceTransformer(dir)`` loads it, and so does ``crossbert-mteb``
(``recipe.dense``).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from megatron_crossbert.evaluation.recipe import EmbeddingRecipe

logger = logging.getLogger(__name__)
INITS = ("identity", "whitening")
POOLINGS = ("mean", "attention")


@dataclass(frozen=True)
class PoolerConfig:
    """How the pooler is trained."""

    dim: int | None = None
    """Output dimension; None: the backbone's hidden size (the map then starts as the identity)."""
    epochs: int = 3
    """Passes over the training pairs."""
    batch_size: int = 64
    """Pairs per step; every other pair of the batch is a negative."""
    lr: float = 1e-3
    """AdamW learning rate."""
    scale: float = 20.0
    """MultipleNegativesRankingLoss scale (1 / temperature), sentence-transformers' default."""
    seed: int = 0
    """Seed of the batch order and of a non-square map's initialisation."""
    pooling: str = "mean"
    """``mean`` (the backbone's mean pooling, trained on pooled features) or ``attention`` (a learned query over
    the token states, ``attention.py``), before the map."""
    init: str = "identity"
    """Where the map starts: ``identity`` (the raw readout) or ``whitening`` (the PCA whitening fitted on the
    pair texts, ``whitening.py``: the whitened readout, for encoders whose features collapse onto a few axes)."""

    def __post_init__(self) -> None:
        for name in ("epochs", "batch_size"):
            if getattr(self, name) < (2 if name == "batch_size" else 1):
                raise ValueError(f"PoolerConfig.{name} is too small: {getattr(self, name)}")
        if self.pooling not in POOLINGS:
            raise ValueError(f"PoolerConfig.pooling must be one of {POOLINGS}, not {self.pooling!r}")
        if self.init not in INITS:
            raise ValueError(f"PoolerConfig.init must be one of {INITS}, not {self.init!r}")
        if self.lr <= 0 or self.scale <= 0 or (self.dim is not None and self.dim < 1):
            raise ValueError(f"PoolerConfig: lr, scale and dim must be positive ({self.lr}, {self.scale}, {self.dim})")


def initial_map(hidden: int, dim: int, seed: int) -> torch.nn.Linear:
    """``hidden -> dim``: the identity where it can be (its first ``min(hidden, dim)`` axes), zero bias."""
    torch.manual_seed(seed)
    layer = torch.nn.Linear(hidden, dim)
    with torch.no_grad():
        layer.weight.copy_(torch.eye(dim, hidden))
        layer.bias.zero_()
    return layer


def start_at_whitening(layer: torch.nn.Linear, features: np.ndarray) -> None:
    """Set ``layer`` to the whitening map fitted on ``features`` (its first ``out_features`` axes):
    ``(x - mean) @ M`` is ``x @ M - mean @ M``, a linear layer with weight ``M.T``."""
    from megatron_crossbert.evaluation.whitening import fit_whitening

    fitted = fit_whitening(features)
    matrix = fitted.matrix[:, :layer.out_features]
    with torch.no_grad():
        layer.weight.copy_(torch.from_numpy(matrix.T.astype(np.float32)))
        layer.bias.copy_(torch.from_numpy((-fitted.mean @ matrix).reshape(-1).astype(np.float32)))


def start_layer(anchors: np.ndarray, positives: np.ndarray, config: PoolerConfig) -> torch.nn.Linear:
    """The map before training, from the pairs' pooled features ``[n, h]``: ``config.init``'s start."""
    layer = initial_map(anchors.shape[1], config.dim or anchors.shape[1], config.seed)
    if config.init == "whitening":
        start_at_whitening(layer, np.concatenate([anchors, positives]))
    return layer


def train_in_batch(parameters: list[torch.nn.Parameter], embed, n_pairs: int, config: PoolerConfig) -> dict:
    """Train ``parameters`` with sentence-transformers' ``MultipleNegativesRankingLoss`` over seeded in-batch
    pairs; ``embed(indices)`` gives the ``[anchors, positives]`` embeddings of those pairs. Returns the training
    log (loss per epoch, steps, wall and CPU seconds). Every pooler trains through this one loop."""
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    loss_fn = MultipleNegativesRankingLoss(None, scale=config.scale)
    optimizer = torch.optim.AdamW(parameters, lr=config.lr)
    order = torch.Generator().manual_seed(config.seed)
    wall, cpu, losses, steps = time.perf_counter(), time.process_time(), [], 0
    for epoch in range(config.epochs):
        total, batches = 0.0, 0
        for batch in torch.randperm(n_pairs, generator=order).split(config.batch_size):
            if len(batch) < 2:  # in-batch negatives need a second pair
                continue
            loss = loss_fn.compute_loss_from_embeddings(embed(batch), None)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total, batches, steps = total + float(loss.detach()), batches + 1, steps + 1
        losses.append(total / max(batches, 1))
        logger.info("pooler epoch %d: MNRL loss %.4f", epoch + 1, losses[-1])
    return {"loss_per_epoch": losses, "steps": steps, "wall_s": round(time.perf_counter() - wall, 2),
            "cpu_s": round(time.process_time() - cpu, 2)}


def train_linear_pooler(anchors: np.ndarray, positives: np.ndarray, config: PoolerConfig) -> tuple[torch.nn.Linear, dict]:
    """The trained map over pooled features ``[n, h]`` of the pairs, and its training log (loss per epoch,
    steps, CPU-seconds)."""
    a, p = (torch.from_numpy(np.asarray(x, dtype=np.float32)) for x in (anchors, positives))
    layer = start_layer(anchors, positives, config)
    log = train_in_batch(list(layer.parameters()), lambda batch: [layer(a[batch]), layer(p[batch])], len(a), config)
    return layer.eval(), log


def dense_module(layer: torch.nn.Linear):
    """The trained map as sentence-transformers' ``Dense`` module (identity activation)."""
    from sentence_transformers.sentence_transformer.modules import Dense

    return Dense(layer.in_features, layer.out_features, activation_function=torch.nn.Identity(),
                 init_weight=layer.weight.detach().clone(), init_bias=layer.bias.detach().clone())


def save_pooler(hf_path: str, recipe: EmbeddingRecipe, layer: torch.nn.Linear, out_dir: str | Path,
                attention=None) -> Path:
    """A sentence-transformers directory: the backbone in ``hf_path`` unchanged, ``recipe``'s pooling (or the
    trained ``attention`` pooling module), the map as a ``Dense`` module, and ``Normalize`` when the recipe
    normalises; returns the Dense module's folder."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer

    transformer = Transformer(hf_path, max_seq_length=recipe.tokens)
    pooling = attention if attention is not None else Pooling(layer.in_features, recipe.pooling)
    modules = [transformer, pooling, dense_module(layer)]
    modules += [Normalize()] if recipe.normalize else []
    SentenceTransformer(modules=modules, device="cpu").save(str(out_dir))
    from megatron_crossbert.evaluation.recipe import read_sentence_transformers_recipe

    return Path(read_sentence_transformers_recipe(out_dir).dense[0])
