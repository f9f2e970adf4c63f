"""Deterministic, resumable batch sampling across data-parallel ranks.

Why our own sampler: the sample a rank sees must be a pure function of the number of samples the
whole job has consumed, so that a run resumed from a checkpoint (possibly with a different DP
size) continues with exactly the samples the uninterrupted run would have used.

Layout of one optimizer step (global batch of ``G`` samples starting at ``consumed``)::

    micro-batch m of DP rank r = samples  consumed + m*(mbs*dp) + r*mbs  ...  + mbs - 1

i.e. each "DP micro-batch round" of ``mbs*dp`` consecutive samples is split into ``dp`` contiguous
slices. Changing DP on resume changes which rank sees a sample, not which samples a step uses.
"""

from __future__ import annotations

from collections.abc import Iterator


class PretrainingSampler:
    """Yields lists of sample indices (one micro-batch for one DP rank), starting at ``consumed``.

    Use as a DataLoader ``batch_sampler``. Samples past ``total_samples`` are never produced; a
    trailing partial round is dropped (fixed shapes everywhere).
    """

    def __init__(self, total_samples: int, consumed_samples: int, micro_batch_size: int,
                 dp_rank: int, dp_size: int) -> None:
        if not 0 <= dp_rank < dp_size:
            raise ValueError(f"dp_rank={dp_rank} outside [0, {dp_size})")
        if total_samples <= 0 or micro_batch_size <= 0:
            raise ValueError("total_samples and micro_batch_size must be > 0")
        self.total_samples = total_samples
        self.consumed_samples = consumed_samples
        self.micro_batch_size = micro_batch_size
        self.dp_rank = dp_rank
        self.dp_size = dp_size

    @property
    def round_size(self) -> int:
        """Samples consumed by one micro-batch on every DP rank together."""
        return self.micro_batch_size * self.dp_size

    def __len__(self) -> int:
        remaining = max(0, self.total_samples - self.consumed_samples)
        return remaining // self.round_size

    def __iter__(self) -> Iterator[list[int]]:
        start = self.consumed_samples
        while start + self.round_size <= self.total_samples:
            first = start + self.dp_rank * self.micro_batch_size
            yield list(range(first, first + self.micro_batch_size))
            start += self.round_size
