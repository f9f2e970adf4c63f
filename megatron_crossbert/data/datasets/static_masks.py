"""Static (precomputed) CrossBERT mask pairs: written by ``crossbert-preprocess --emit-mask-pairs``,
read when ``DataConfig.static_masks`` is set.

Files for a prefix ``P`` (``{output_prefix}_{key}_maskpairs``), all Megatron indexed datasets with
one single-sequence document per row:

* ``P_samples``: the packed tokens, ``L`` per row;
* ``P_visible`` / ``P_targets``: the views' positions, ``V*Lv`` / ``V*(L-Lv)`` per row (row-major
  ``[V, Lv]``);
* ``P_segments``: the document (fragment) id of every position, ``L`` per row (``packing.sample_segments``;
  what document masks need);
* ``P_meta.json``: ``seq_length, mask_ratio, complementary, seed, num_views, visible_length,
  num_samples, segments``.

Files written before document masks existed have no ``P_segments``; they still serve runs with
``data.document_mask: false`` and are refused (naming the file and the fix) otherwise.

Row ``r`` is exactly what the on-the-fly :class:`CrossBertDataset` serves as sample ``r`` for the
same data, seed, ``L`` and split ``1,0,0`` (one epoch, same packing and shuffle), with masks
``complementary_views(seed, r, ...)``. The static dataset splits *rows* with the split string and
serves them in order, cycling when more samples are requested than rows exist (masks then repeat:
that is what static means). Packed rows straddle documents, so neighbouring splits may share one
document across their boundary.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import numpy as np
from megatron.core.datasets.indexed_dataset import DType, IndexedDataset
from megatron.core.datasets.megatron_dataset import MegatronDataset
from megatron.core.datasets.utils import Split

from megatron_crossbert.config import MaskingConfig
from megatron_crossbert.data.datasets.packing import assemble_sample, build_packing_index, sample_segments
from megatron_crossbert.data.indexed.reader import document_lengths, document_reader, open_indexed
from megatron_crossbert.data.indexed.writer import AtomicIndexedWriter
from megatron_crossbert.masking import complementary_views

PARTS = ("samples", "visible", "targets", "segments")
"""Indexed datasets of a static-mask prefix, in row order; ``segments`` may be absent in older files."""


def write_static_masks(doc_dataset: IndexedDataset, out_prefix: str, *, seq_length: int, masking: MaskingConfig,
                       vocab_size: int, cls_id: int, sep_id: int) -> tuple[list[AtomicIndexedWriter], dict]:
    """Pack all documents (one epoch) and write samples + views under temporary names; ``masking``
    (mask ratio, complementary views, seed) is the run's masking section.

    Returns the finalized writers (the caller commits them together with the document files) and
    the metadata dict (the caller writes it as ``{out_prefix}_meta.json`` on commit).
    """
    mask_ratio, complementary, seed = masking.mask_ratio, masking.complementary, masking.seed
    lengths = document_lengths(doc_dataset)
    packing = build_packing_index(np.arange(lengths.size), lengths, seq_length, seed, None)
    read = document_reader(doc_dataset)
    pos_dtype = DType.optimal_dtype(seq_length)
    writers = [AtomicIndexedWriter(f"{out_prefix}_samples", vocab_size),
               AtomicIndexedWriter(f"{out_prefix}_visible", None, dtype=pos_dtype),
               AtomicIndexedWriter(f"{out_prefix}_targets", None, dtype=pos_dtype),
               AtomicIndexedWriter(f"{out_prefix}_segments", None, dtype=pos_dtype)]
    try:
        for row in range(packing.num_samples):
            packed = int(packing.shuffle[row])
            tokens = assemble_sample(packing, packed, seq_length, read, lengths, cls_id, sep_id)
            views = complementary_views(seed, row, seq_length, mask_ratio, complementary)
            segments = sample_segments(packing, packed, seq_length, lengths)
            for writer, values in zip(writers, (tokens, views.visible.ravel(), views.targets.ravel(), segments)):
                writer.add_document(values, [values.size])
        for writer in writers:
            writer.finalize()
    except BaseException:
        for writer in writers:
            writer.abort()
        raise
    meta = {"seq_length": seq_length, "mask_ratio": mask_ratio, "complementary": complementary, "seed": seed,
            "num_views": masking.num_views, "visible_length": masking.visible_length(seq_length),
            "num_samples": packing.num_samples, "segments": True}
    return writers, meta


@dataclass
class StaticPairs:
    """The indexed datasets of a static-mask prefix plus its metadata."""

    samples: IndexedDataset
    visible: IndexedDataset
    targets: IndexedDataset
    segments: IndexedDataset | None
    """None in files written before document masks (no ``segments`` in their meta)."""
    meta: dict

    def __len__(self) -> int:
        return len(self.samples)


def open_static_pairs(prefix: str) -> StaticPairs:
    meta_path = f"{prefix}_meta.json"
    if not os.path.isfile(meta_path):
        raise FileNotFoundError(f"static masks {prefix!r}: {meta_path} not found (write them with "
                                "crossbert-preprocess --emit-mask-pairs)")
    with open(meta_path) as handle:
        meta = json.load(handle)
    names = PARTS if meta.get("segments") else PARTS[:3]
    parts = [open_indexed(f"{prefix}_{part}") for part in names]
    if len({len(p) for p in parts}) != 1:
        raise ValueError(f"static masks {prefix!r}: {'/'.join(names)} have different row counts")
    return StaticPairs(*parts, *[None] * (len(PARTS) - len(parts)), meta=meta)


def check_static_segments(pairs: StaticPairs, document_mask: bool, prefix: str) -> None:
    """Document masks need the files' segments; older files lack them."""
    if document_mask and pairs.segments is None:
        raise ValueError(f"static masks {prefix!r} hold no document ids ({prefix}_segments; written before "
                         "document masks): rewrite them with crossbert-preprocess --emit-mask-pairs, or set "
                         "data.document_mask=false")


def check_static_meta(meta: dict, *, seq_length: int, mask_ratio: float, complementary: bool, seed: int,
                      prefix: str) -> None:
    """The run's masking must be the one the static file was written for."""
    wanted = {"seq_length": seq_length, "mask_ratio": mask_ratio, "complementary": complementary, "seed": seed}
    diff = {k: (meta.get(k), v) for k, v in wanted.items() if meta.get(k) != v}
    if diff:
        raise ValueError(f"static masks {prefix!r} were written for a different setup; (file, run): {diff}")


class StaticCrossBertDataset(MegatronDataset):
    """Serves precomputed rows: sample ``idx`` of a split is row ``indices[idx % rows]``."""

    def __init__(self, dataset: StaticPairs, dataset_path: str | None, indices: np.ndarray,
                 num_samples: int | None, index_split: Split, config) -> None:
        super().__init__(dataset, dataset_path, indices, num_samples, index_split, config)
        if indices.size == 0 and num_samples:
            raise ValueError(f"static masks {dataset_path}: the {index_split.name} split has 0 rows but "
                             f"{num_samples} samples were requested")
        meta = dataset.meta
        self.shape_visible = (meta["num_views"], meta["visible_length"])
        self.shape_targets = (meta["num_views"], meta["seq_length"] - meta["visible_length"])

    @staticmethod
    def numel_low_level_dataset(low_level_dataset: StaticPairs) -> int:
        return len(low_level_dataset)

    @staticmethod
    def build_low_level_dataset(dataset_path: str, config) -> StaticPairs:
        pairs = open_static_pairs(dataset_path)
        check_static_meta(pairs.meta, seq_length=config.sequence_length, mask_ratio=config.masking.mask_ratio,
                          complementary=config.masking.complementary, seed=config.random_seed, prefix=dataset_path)
        check_static_segments(pairs, config.document_mask, dataset_path)
        return pairs

    @staticmethod
    def _key_config_attributes() -> list[str]:
        return ["random_seed", "sequence_length", "split", "split_matrix", "document_mask"]

    def __len__(self) -> int:
        return self.num_samples if self.num_samples is not None else int(self.indices.size)

    def __getitem__(self, idx: int) -> dict[str, np.ndarray]:
        idx = int(idx)
        row = int(self.indices[idx % self.indices.size])
        tokens = self.dataset.samples[row].astype(np.int64)
        if tokens.max() >= self.config.vocab_size:
            raise ValueError(f"{self.dataset_path}: row {row} holds token id {int(tokens.max())} >= vocab size "
                             f"{self.config.vocab_size} (data and tokenizer do not match)")
        return {"tokens": tokens,
                "visible": self.dataset.visible[row].astype(np.int64).reshape(self.shape_visible),
                "targets": self.dataset.targets[row].astype(np.int64).reshape(self.shape_targets),
                "segments": self._segments(row, tokens.size), "index": np.int64(idx)}

    def _segments(self, row: int, length: int) -> np.ndarray:
        if not self.config.document_mask:
            return np.zeros(length, dtype=np.int32)
        return self.dataset.segments[row].astype(np.int32)
