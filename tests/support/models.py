"""Tiny models for the model, attention and conversion tests: configs, builds, batches and views.

Every model is tiny (h=32..64, dropout 0) and built on a world of size 1; the multi-rank tests build the
same configs on each rank.
"""

from __future__ import annotations

import torch

from megatron_crossbert.platform import distributed as platform
from megatron_crossbert.config import RunConfig, load_run_config
from megatron_crossbert.architectures.build import build_model

SEQ = 16
"""Sequence length of ``tiny_config``."""
DOCUMENTS_SEQ = 24
"""Sequence length of ``documents_config``."""


def tiny_config(*overrides: str, arch: str = "crossbert") -> RunConfig:
    base = [f"model.arch={arch}", "model.vocab_size=200", "model.make_vocab_size_divisible_by=64",
            "model.hidden_size=32", "model.num_layers=2", "model.num_attention_heads=4",
            "model.max_position_embeddings=32", "model.decoder_num_layers=1", "model.hidden_dropout=0.0",
            "model.attention_dropout=0.0", f"data.seq_length={SEQ}", "model.transformer_impl=local"]
    return load_run_config(None, base + list(overrides))


def build(cfg: RunConfig, seed: int = 1, *, training: bool = False) -> torch.nn.Module:
    """A world-of-one model from ``seed`` (``training``: the pretraining forward's extras, e.g. dropout paths)."""
    platform.initialize(cfg.parallel, seed)
    return build_model(cfg, training=training)


def make_batch(cfg: RunConfig, batch: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """Random tokens and random complementary views (view B's visible set = view A's targets)."""
    gen = torch.Generator().manual_seed(seed)
    seq, visible = cfg.data.seq_length, cfg.masking.visible_length(cfg.data.seq_length)
    tokens = torch.randint(0, cfg.model.vocab_size, (batch, seq), generator=gen)
    perms = torch.stack([torch.randperm(seq, generator=gen) for _ in range(batch)])
    vis_a, tgt_a = perms[:, :visible].sort(-1).values, perms[:, visible:].sort(-1).values
    views = [(vis_a, tgt_a), (tgt_a[:, :visible], torch.cat([vis_a, tgt_a[:, visible:]], 1).sort(-1).values)]
    views = views[:cfg.masking.num_views]
    return {"tokens": tokens, "visible": torch.stack([v for v, _ in views], 1),
            "targets": torch.stack([t for _, t in views], 1)}


MLM_ARCHS = {"bert": ("model.arch=bert", "model.decoder_num_layers=0"),
             "mlm": ("model.arch=mlm", "model.encoder=modern", "model.decoder_num_layers=0")}
EXACT = dict(atol=1e-6, rtol=0.0)


def ragged_prediction_mask(batch: int, seq: int, seed: int = 5) -> torch.Tensor:
    """A float loss mask with a different number of predicted positions per row (the last row: one)."""
    mask = (torch.rand(batch, seq, generator=torch.Generator().manual_seed(seed)) < 0.3).float()
    mask[:, 0] = 1.0
    mask[-1] = 0.0
    mask[-1, 3] = 1.0
    return mask


def mlm_batch(cfg: RunConfig, batch: int = 3, seed: int = 3) -> dict[str, torch.Tensor]:
    """An MLM batch: labels, the predicted positions replaced by [MASK]=4, a ragged prediction mask."""
    labels = torch.randint(5, cfg.model.vocab_size, (batch, cfg.data.seq_length),
                           generator=torch.Generator().manual_seed(seed))
    mask = ragged_prediction_mask(batch, cfg.data.seq_length)
    tokens = torch.where(mask.bool(), torch.full_like(labels, 4), labels)
    return {"input_ids": tokens, "attention_mask": torch.ones_like(tokens), "lm_labels": labels,
            "prediction_mask": mask}


def random_view(batch: int, seq: int, keep: int, seed: int):
    """Sorted random position subsets of a sample with random fragment lengths (1-token ones included)."""
    gen = torch.Generator().manual_seed(seed)
    segments = torch.stack([torch.cat([torch.zeros(1, dtype=torch.int64),
                                       (torch.rand(seq - 1, generator=gen) < 0.15).cumsum(0)]) for _ in range(batch)])
    chosen = torch.stack([torch.randperm(seq, generator=gen)[:keep].sort().values for _ in range(batch)])
    rest = torch.stack([torch.tensor(sorted(set(range(seq)) - set(c.tolist()))) for c in chosen])
    return segments, chosen, rest


def documents_config(*overrides: str, arch: str = "crossbert") -> RunConfig:
    """``tiny_config`` at L=24 with 3 encoder layers (local and global ones) and 2 decoder layers: the document
    mask tests' model."""
    return tiny_config("model.num_layers=3", "model.decoder_num_layers=2", f"data.seq_length={DOCUMENTS_SEQ}",
                       *overrides, arch=arch)
