"""How much attention crosses documents in packed samples without document masks (what ``data.document_mask`` removes).

The corpus is tokenized (the given tokenizer, or a 32k WordPiece trained on a sample of it) and packed
with the project's own packing index ([CLS] + documents joined by [SEP], samples of L tokens). Per L:

- the share of the L x L attention pairs whose query and key lie in different documents;
- the same for CrossBERT's encoder (visible x visible) and decoder cross-attention (targets x visible)
  at mask ratio 0.5 (views from ``masking.complementary_views``);
- documents per sample, 1-token fragments, and decoder targets whose fragment has no visible token in
  their view (the empty cross-attention rows the masks give every key and a zeroed output).

The document lengths also give the attention benchmark realistic document masks (``sample_segments``).
"""

from __future__ import annotations

import numpy as np
import torch

from megatron_crossbert.data.datasets.packing import (
    PackingIndex, build_packing_index, cross_document_pairs, sample_segments,
)
from megatron_crossbert.masking import complementary_views
from megatron_crossbert.models.attention_masks import key_ranges, token_coords

WORDPIECE_SAMPLE_DOCS = 20000
"""Documents the stand-in 32k WordPiece is trained on when no tokenizer is given."""


def corpus_document_lengths(patterns: list[str], tokenizer: str | None, seed: int) -> np.ndarray:
    """Token count of every document of the JSONL corpus (content only: no [CLS]/[SEP])."""
    from megatron_crossbert.data.jsonl import iter_texts

    texts = list(iter_texts(patterns))
    if not texts:
        raise ValueError(f"no documents in {patterns}")
    if tokenizer:
        from megatron_crossbert.data.tokenizers.tokenizer import load_tokenizer

        encode = load_tokenizer(tokenizer).encode_batch
    else:
        from megatron_crossbert.data.tokenizers.training import train_wordpiece

        picks = np.random.default_rng(seed).choice(len(texts), size=min(WORDPIECE_SAMPLE_DOCS, len(texts)),
                                                   replace=False)
        backend = train_wordpiece([texts[i] for i in picks], 32768)
        encode = lambda batch: [e.ids for e in backend.encode_batch(batch, add_special_tokens=False)]  # noqa: E731
    return np.array([len(ids) for ids in encode(texts)], dtype=np.int64)


def packed_corpus(lengths: np.ndarray, seq_length: int, seed: int) -> PackingIndex:
    return build_packing_index(np.arange(lengths.size), lengths, seq_length, seed)


def median_sample_segments(lengths: np.ndarray, seq_length: int, seed: int, candidates: int = 400) -> np.ndarray:
    """Segments of the packed sample with the median document count among the first ``candidates``."""
    index = packed_corpus(lengths, seq_length, seed)
    samples = [sample_segments(index, p, seq_length, lengths) for p in range(min(candidates, index.num_samples))]
    order = sorted(range(len(samples)), key=lambda i: int(samples[i][-1]))
    return samples[order[len(order) // 2]]


def _pairs(query: np.ndarray, key: np.ndarray) -> tuple[int, int]:
    """(pairs in different documents, all pairs) between two segment-id vectors."""
    ids, counts = np.unique(query, return_counts=True)
    key_counts = dict(zip(*np.unique(key, return_counts=True)))
    same = sum(int(c) * int(key_counts.get(s, 0)) for s, c in zip(ids, counts))
    return query.size * key.size - same, query.size * key.size


def _empty_rows(segments: np.ndarray, visible: np.ndarray, targets: np.ndarray, half: int) -> int:
    seg = torch.from_numpy(segments.astype(np.int64))[None]
    t, v = torch.from_numpy(targets)[None], torch.from_numpy(visible)[None]
    return int(key_ranges(token_coords(seg.gather(1, t), t), token_coords(seg.gather(1, v), v), half).empty.sum())


def measure_leakage(lengths: np.ndarray, seq_length: int, samples: int, seed: int) -> dict:
    """The statistics of the module docstring over ``samples`` random packed samples of ``seq_length``."""
    index = packed_corpus(lengths, seq_length, seed)
    picks = np.random.default_rng(seed).choice(index.num_samples, size=min(samples, index.num_samples), replace=False)
    sums = {k: np.zeros(2, dtype=np.int64) for k in ("full", "encoder", "cross")}
    fragments, one_token, empty, targets = [], 0, {0: 0, 64: 0}, 0
    for n, packed in enumerate(picks):
        seg = sample_segments(index, int(packed), seq_length, lengths)
        sums["full"] += cross_document_pairs(seg)
        counts = np.bincount(seg)
        fragments.append(counts.size)
        one_token += int((counts == 1).sum())
        views = complementary_views(seed, n, seq_length, 0.5)
        for vis, tgt in zip(views.visible, views.targets):
            sums["encoder"] += _pairs(seg[vis], seg[vis])
            sums["cross"] += _pairs(seg[tgt], seg[vis])
            targets += tgt.size
            for half in empty:
                empty[half] += _empty_rows(seg, vis, tgt, half)
    share = lambda key: float(sums[key][0] / sums[key][1])  # noqa: E731
    return {"seq_length": seq_length, "samples": int(picks.size), "cross_document_pairs": share("full"),
            "encoder_cross_document_pairs": share("encoder"), "decoder_cross_document_pairs": share("cross"),
            "documents_per_sample": float(np.mean(fragments)),
            "samples_with_one_document": float(np.mean(np.array(fragments) == 1)),
            "one_token_fragments_per_sample": one_token / picks.size,
            "empty_cross_rows": empty[0] / targets, "empty_cross_rows_window128": empty[64] / targets}


LEAKAGE_HEADERS = ["L", "pairs crossing documents (L x L)", "encoder (visible x visible)",
                   "decoder cross (targets x visible)", "documents / sample", "samples with 1 document",
                   "empty cross rows", "samples"]


def leakage_rows(results: list[dict]) -> list[list[str]]:
    pct = lambda value, digits=1: f"{100 * value:.{digits}f}%"  # noqa: E731
    return [[r["seq_length"], pct(r["cross_document_pairs"]), pct(r["encoder_cross_document_pairs"]),
             pct(r["decoder_cross_document_pairs"]), f"{r['documents_per_sample']:.1f}",
             pct(r["samples_with_one_document"]), pct(r["empty_cross_rows"], 3), r["samples"]] for r in results]
