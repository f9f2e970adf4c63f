"""Packing documents into fixed-length samples (pure numpy; shared by the datasets and the
static-mask writer so both produce the same samples).

Layout of every sample (exactly ``L`` tokens, no padding)::

    position 0          : [CLS]
    positions 1 .. L-1  : the next L-1 tokens of the *stream*

The stream is the split's documents in a shuffled order, each document followed by one [SEP]::

    doc_a tokens, [SEP], doc_b tokens, [SEP], doc_c tokens, [SEP], ...

So [SEP] marks every document end, a sample may start mid-document (a long document continues
into the next sample, after that sample's [CLS]), and a sample may hold the tail of one document
and the head of the next. Sentence boundaries inside a document (``--split-sentences`` data) are
not marked: sentences of a document are contiguous. Wrapper tokens already around documents
([CLS] doc [SEP] + eod, as Megatron-LM writes them, or our ``--append-eod``) are removed by the
dataset before packing (:mod:`megatron_crossbert.data.datasets.wrappers`, ``data.strip_wrapper_tokens``);
other tokens in the data are kept as they are.

Order: epoch ``e`` is a permutation of the split's documents drawn from one
``np.random.default_rng(seed)`` stream (epochs drawn in turn); the stream runs across epoch
boundaries; the ``floor(total_stream_tokens / (L-1))`` packed samples are then served in a second
permutation (``shuffle``) from the same generator, so neighbouring served samples come from
different documents. The trailing partial sample is dropped.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class PackingIndex:
    """Where each packed sample starts in the stream.

    ``doc_order``: int64 document ids in stream order (all epochs); ``starts``: int64 ``[n, 2]``
    (position in ``doc_order``, token offset inside that document); ``shuffle``: int64 ``[n]``
    served index -> packed sample number.
    """

    doc_order: np.ndarray
    starts: np.ndarray
    shuffle: np.ndarray

    @property
    def num_samples(self) -> int:
        return int(self.shuffle.shape[0])

    def save(self, path: str) -> None:
        np.savez(path, doc_order=self.doc_order, starts=self.starts, shuffle=self.shuffle)

    @classmethod
    def load(cls, path: str) -> PackingIndex:
        with np.load(path) as arrays:
            return cls(arrays["doc_order"], arrays["starts"], arrays["shuffle"])


def epochs_needed(stream_tokens_per_epoch: int, seq_length: int, num_samples: int | None) -> int:
    """Smallest number of epochs whose stream holds ``num_samples`` samples (1 when None)."""
    content = seq_length - 1
    if num_samples is None or num_samples <= 0:
        return 1
    if stream_tokens_per_epoch <= 0:
        raise ValueError("cannot pack samples from a split with no tokens")
    return max(1, -(-num_samples * content // stream_tokens_per_epoch))


def build_packing_index(doc_ids: np.ndarray, doc_lengths: np.ndarray, seq_length: int, seed: int,
                        num_samples: int | None = None, shuffle_docs: bool = True) -> PackingIndex:
    """Index for packing ``doc_ids`` (lengths without the [SEP]) into samples of ``seq_length``.

    Deterministic in its arguments; ``num_samples`` only decides how many epochs are laid out.
    """
    if seq_length < 2:
        raise ValueError(f"seq_length must be >= 2 ([CLS] plus content), got {seq_length}")
    doc_ids = np.asarray(doc_ids, dtype=np.int64)
    with_sep = np.asarray(doc_lengths, dtype=np.int64)[doc_ids] + 1
    num_epochs = epochs_needed(int(with_sep.sum()), seq_length, num_samples)
    rng = np.random.default_rng(seed)
    order = [rng.permutation(doc_ids) if shuffle_docs else doc_ids for _ in range(num_epochs)]
    doc_order = np.concatenate(order) if order else doc_ids
    lengths = np.asarray(doc_lengths, dtype=np.int64)[doc_order] + 1
    cum = np.concatenate([[0], np.cumsum(lengths)])
    total = int(cum[-1]) // (seq_length - 1)
    sample_starts = np.arange(total, dtype=np.int64) * (seq_length - 1)
    pos = np.searchsorted(cum, sample_starts, side="right") - 1
    starts = np.stack([pos, sample_starts - cum[pos]], axis=1).astype(np.int64)
    shuffle = rng.permutation(total).astype(np.int64) if shuffle_docs else np.arange(total, dtype=np.int64)
    return PackingIndex(doc_order=doc_order, starts=starts, shuffle=shuffle)


def sample_pieces(index: PackingIndex, packed: int, seq_length: int,
                  doc_lengths: np.ndarray) -> Iterator[tuple[int, int, int, bool]]:
    """Walk packed sample ``packed``: ``(doc, offset, take, closes)`` per fragment, in order.

    ``take`` content tokens of ``doc`` from ``offset`` (0 when the sample starts on a document's
    [SEP]), then one [SEP] when ``closes``. Together they fill positions ``1 .. seq_length - 1``.
    The one walk of the layout: ``assemble_sample`` and ``sample_segments`` both follow it.
    """
    filled = 1
    pos, offset = (int(v) for v in index.starts[packed])
    while filled < seq_length:
        doc = int(index.doc_order[pos])
        take = min(max(int(doc_lengths[doc]) - offset, 0), seq_length - filled)
        filled += take
        closes = filled < seq_length and offset + take >= int(doc_lengths[doc])
        filled += int(closes)
        yield doc, offset, take, closes
        pos, offset = pos + 1, 0


def assemble_sample(index: PackingIndex, packed: int, seq_length: int, read_doc_slice,
                    doc_lengths: np.ndarray, cls_id: int, sep_id: int) -> np.ndarray:
    """Materialise packed sample number ``packed`` as int64 ``[seq_length]``.

    ``read_doc_slice(doc_id, offset, count) -> np.ndarray`` reads ``count`` tokens of a document
    starting at ``offset`` (the caller owns file access; this function owns the layout).
    """
    out = np.empty(seq_length, dtype=np.int64)
    out[0] = cls_id
    filled = 1
    for doc, offset, take, closes in sample_pieces(index, packed, seq_length, doc_lengths):
        if take > 0:
            out[filled:filled + take] = read_doc_slice(doc, offset, take)
            filled += take
        if closes:  # document finished: its [SEP]
            out[filled] = sep_id
            filled += 1
    return out


def sample_segments(index: PackingIndex, packed: int, seq_length: int, doc_lengths: np.ndarray) -> np.ndarray:
    """int32 ``[seq_length]``: the fragment (document piece) of every position of packed sample ``packed``.

    Fragments are numbered 0, 1, 2, ... in order; each owns its tokens and its closing [SEP], and the
    [CLS] at position 0 joins fragment 0 (docs/architecture.md, "Document masks"). Computed from the
    packing index, never from token ids (a document may contain the [SEP] id). Non-decreasing along
    the sample, so every sorted subset of positions (a view's visible set, its targets) is too.
    """
    sizes = [take + int(closes) for _, _, take, closes in sample_pieces(index, packed, seq_length, doc_lengths)]
    sizes[0] += 1
    return np.repeat(np.arange(len(sizes), dtype=np.int32), sizes)


def cross_document_pairs(segments: np.ndarray) -> tuple[int, int]:
    """(query-key pairs in different fragments, all pairs) of one sample's unmasked ``L x L`` attention."""
    _, counts = np.unique(segments, return_counts=True)
    total = int(segments.size) ** 2
    return total - int((counts.astype(np.int64) ** 2).sum()), total
