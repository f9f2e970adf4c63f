"""Synthetic micro-batches in the exact layout the real datasets produce (docs/architecture.md).

Throughput does not depend on token content, only on shapes, so the benchmark draws random ids
and applies the architecture's own sample builder (``SampleLayout.make_sample``, from ``arch_rules``).
With document masks on, samples carry ``segments`` drawn like the shared corpus packs: document
boundaries at a rate of one per ``MEAN_DOCUMENT_TOKENS`` (geometric lengths), so the timed step runs
the masked attention path pretraining runs.
Batches are built before timing starts, so the timed region is the training step alone (no data
loading, no mask generation).
"""

from __future__ import annotations

import numpy as np
import torch

from megatron_crossbert.arch_rules import sample_layout
from megatron_crossbert.benchmarking.cases import BenchCase
from megatron_crossbert.masking import TokenIds

NUM_SPECIAL = 5
"""Ids 0..4 are treated as special ([PAD], [UNK], [CLS], [SEP], [MASK]); random tokens avoid them."""
MASK_ID = 4
MEAN_DOCUMENT_TOKENS = 67
"""Mean document length (tokens, with its [SEP]) of the shared corpus under its 32k WordPiece tokenizer."""


def synthetic_segments(rng: np.random.Generator, seq_length: int, mean: float = MEAN_DOCUMENT_TOKENS) -> np.ndarray:
    """int32 ``[seq_length]`` fragment ids with geometric fragment lengths of mean ``mean``."""
    starts = rng.random(seq_length - 1) < 1.0 / mean
    return np.concatenate([[0], np.cumsum(starts)]).astype(np.int32)


def make_batches(case: BenchCase, count: int, device: torch.device, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    """``count`` distinct micro-batches for ``case`` (its ``SampleLayout.make_sample``), already on ``device``."""
    rng = np.random.default_rng(seed)
    cfg = case.run_cfg
    make_sample = sample_layout(case.arch).make_sample
    ids = TokenIds(mask_id=MASK_ID, vocab_size=cfg.model.vocab_size, special_ids=tuple(range(NUM_SPECIAL)))
    batches = []
    for batch_index in range(count):
        first = batch_index * case.micro_batch_size
        samples = [make_sample(cfg.masking, first + i,
                               rng.integers(NUM_SPECIAL, cfg.model.vocab_size, size=case.seq_length, dtype=np.int64),
                               ids) for i in range(case.micro_batch_size)]
        for sample in samples:
            sample["segments"] = (synthetic_segments(rng, case.seq_length) if cfg.data.document_mask
                                  else np.zeros(case.seq_length, dtype=np.int32))
        batch = {key: torch.from_numpy(np.stack([s[key] for s in samples])).to(device) for key in samples[0]}
        batch["index"] = torch.arange(first, first + case.micro_batch_size, device=device)
        batches.append(batch)
    return batches
