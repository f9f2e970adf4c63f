"""A synthetic corpus whose documents can be predicted only by looking into the next document.

Documents come in pairs in the stream: ``A_k`` is one symbol drawn uniformly from ``[first, first +
symbols)``; ``B_k`` is ``b_length`` copies of that symbol shifted by ``symbols`` (another vocabulary range).
Nothing inside ``A_k`` predicts it (loss floor ``ln(symbols)``), but any visible token of ``B_k`` does. The
stream period (``1 + 1 + b_length + 1`` with the [SEP]s) equals ``seq_length - 1``, so every packed sample is
exactly ``[CLS] a [SEP] b ... b [SEP]``: one pair, fragment 0 = ``[CLS] a [SEP]``, fragment 1 = ``B``. A model
whose attention crosses documents learns to read ``a`` off ``B`` (content, not position: no plateau while a
positional pattern is found); with the document mask ``a`` stays at chance.

Samples go through the project's own packing (``build_packing_index`` with ``shuffle_docs=False`` so pairs
stay adjacent; the dataset class would shuffle them), ``assemble_sample``, the segment ids of ``segments``
and the complementary views of ``masking.complementary_views`` (``tests/models/test_isolation.py``).
"""

from __future__ import annotations

import numpy as np
import torch

from megatron_crossbert.data.datasets.packing import assemble_sample, build_packing_index, sample_segments
from megatron_crossbert.masking import complementary_views

CLS, SEP, FIRST = 2, 3, 10


class PairedStream:
    """``pairs`` (A, B) document pairs, one pair per packed sample of ``b_length + 4`` tokens."""

    def __init__(self, pairs: int, b_length: int, symbols: int, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        a_symbols = FIRST + rng.integers(0, symbols, size=pairs)
        self.docs = [doc for a in a_symbols for doc in (np.array([a]), np.full(b_length, a + symbols))]
        self.lengths = np.array([doc.size for doc in self.docs], dtype=np.int64)
        self.symbols, self.seq_length, self.seed = symbols, b_length + 4, seed
        self.index = build_packing_index(np.arange(len(self.docs)), self.lengths, self.seq_length, seed,
                                         shuffle_docs=False)

    def __len__(self) -> int:
        return self.index.num_samples

    def sample(self, packed: int) -> dict[str, np.ndarray]:
        read = lambda doc, offset, count: self.docs[doc][offset:offset + count]
        tokens = assemble_sample(self.index, packed, self.seq_length, read, self.lengths, CLS, SEP)
        segments = sample_segments(self.index, packed, self.seq_length, self.lengths)
        views = complementary_views(self.seed, packed, self.seq_length, 0.5)
        return {"tokens": tokens, "segments": segments.astype(np.int64), "visible": views.visible,
                "targets": views.targets}

    def batch(self, first: int, size: int) -> dict[str, torch.Tensor]:
        samples = [self.sample((first + i) % len(self)) for i in range(size)]
        return {key: torch.from_numpy(np.stack([s[key] for s in samples])) for key in samples[0]}

    def a_targets(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """bool ``[b*V, T]``: targets that are the ``A`` symbol (the tokens only ``B`` predicts)."""
        views = batch["targets"].shape[1]
        rows = batch["tokens"].repeat_interleave(views, 0)
        labels = torch.gather(rows, 1, batch["targets"].reshape(rows.shape[0], -1))
        return (labels >= FIRST) & (labels < FIRST + self.symbols)
