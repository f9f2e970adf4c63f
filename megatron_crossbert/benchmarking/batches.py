"""Synthetic micro-batches in the exact layout the real datasets produce (docs/architecture.md).

Throughput does not depend on token content, only on shapes, so the benchmark draws random ids
and applies the project's own masking functions (``masking.complementary_views`` and
``masking.bert_mask``). Batches are built before timing starts, so the timed region is the
training step alone (no data loading, no mask generation).
"""

from __future__ import annotations

import numpy as np
import torch

from megatron_crossbert.benchmarking.cases import BenchCase
from megatron_crossbert.masking import bert_mask, complementary_views

NUM_SPECIAL = 5
"""Ids 0..4 are treated as special ([PAD], [UNK], [CLS], [SEP], [MASK]); random tokens avoid them."""
MASK_ID = 4


def _random_tokens(rng: np.random.Generator, length: int, vocab_size: int) -> np.ndarray:
    return rng.integers(NUM_SPECIAL, vocab_size, size=length, dtype=np.int64)


def crossbert_sample(case: BenchCase, index: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """One CrossBERT sample: tokens [L], visible [V, Lv], targets [V, L-Lv]."""
    cfg = case.run_cfg
    tokens = _random_tokens(rng, case.seq_length, cfg.model.vocab_size)
    views = complementary_views(cfg.masking.seed, index, case.seq_length, cfg.masking.mask_ratio,
                                complementary=cfg.masking.complementary)
    return {"tokens": tokens, "visible": views.visible, "targets": views.targets}


def bert_sample(case: BenchCase, index: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """One BERT sample: 80/10/10-masked tokens, labels, loss_mask and an all-ones padding mask."""
    cfg = case.run_cfg
    tokens = _random_tokens(rng, case.seq_length, cfg.model.vocab_size)
    masked, labels, loss_mask = bert_mask(
        cfg.masking.seed, index, tokens, mask_prob=cfg.masking.bert_mask_prob,
        replace_mask=cfg.masking.bert_replace_mask, replace_random=cfg.masking.bert_replace_random,
        mask_id=MASK_ID, vocab_size=cfg.model.vocab_size, special_ids=range(NUM_SPECIAL))
    return {"tokens": masked, "labels": labels, "loss_mask": loss_mask,
            "padding_mask": np.ones(case.seq_length, dtype=np.int64)}


def make_batches(case: BenchCase, count: int, device: torch.device, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    """``count`` distinct micro-batches for ``case``, already on ``device``."""
    rng = np.random.default_rng(seed)
    sample_fn = bert_sample if case.arch == "bert" else crossbert_sample
    batches = []
    for batch_index in range(count):
        first = batch_index * case.micro_batch_size
        samples = [sample_fn(case, first + i, rng) for i in range(case.micro_batch_size)]
        batch = {key: torch.from_numpy(np.stack([s[key] for s in samples])).to(device) for key in samples[0]}
        batch["index"] = torch.arange(first, first + case.micro_batch_size, device=device)
        batches.append(batch)
    return batches
