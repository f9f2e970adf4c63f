"""The floors a held-out MLM loss is read against: the corpus's unigram entropy under the study's tokenizer.

A model that ignores context can do no better on a masked token than the token's corpus frequency, so its
cross-entropy is the unigram entropy H = -sum p log p (nats, over the indexed dataset's tokens, special tokens
left out: no target is one). A held-out loss at or above H has learned nothing from context; the distance
below H is what context bought. The other floor, the untrained model's loss (about ln V), is measured, not
computed: the sweep and the study evaluate the model after one step.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np


@lru_cache(maxsize=4)
def unigram_entropy(prefix: str, tokenizer: str) -> dict:
    """``{"nats", "tokens", "types", "ln_vocab"}`` of the dataset ``prefix`` (.bin/.idx) under ``tokenizer``."""
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    from megatron_crossbert.data.tokenizers.tokenizer import load_tokenizer

    tok = load_tokenizer(tokenizer)
    dataset = IndexedDataset(prefix)
    tokens = np.memmap(prefix + ".bin", dtype=dataset.index.dtype, mode="r")
    counts = np.bincount(tokens, minlength=tok.vocab_size).astype(np.float64)
    counts[sorted(set(tok.special_ids.values()))] = 0.0
    return {"nats": entropy_nats(counts), "tokens": int(counts.sum()), "types": int((counts > 0).sum()),
            "ln_vocab": math.log(tok.vocab_size)}


def entropy_nats(counts: np.ndarray) -> float:
    """Entropy in nats of the distribution proportional to ``counts`` (zero counts contribute nothing)."""
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())
