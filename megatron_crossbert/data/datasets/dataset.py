"""CrossBERT and BERT pretraining datasets on ``megatron.core.datasets``.

``CrossBertDataset`` is a ``MegatronDataset``: ``BlendedMegatronDatasetBuilder`` builds it per
split (document ranges from strings like ``969,30,1``) and blends several prefixes by weight.
Samples are packed to exactly ``L`` tokens with the layout documented in
:mod:`megatron_crossbert.data.datasets.packing` ([CLS] at position 0, documents joined by [SEP], long
documents continuing into the next sample).

Every sample is a pure function of ``(seed, index)`` (packing order from ``random_seed``, masks
from the architecture's ``make_sample(masking, index, ...)``), so a resumed run sees identical samples.
``index`` is the global sample index, the position in the training stream: in a blend
``build.GlobalIndexDataset`` asks each constituent for its packed sequence masked at the blend's index
(``sample``), so masking schedules follow training progress and constituents never share mask draws.
Returned dicts follow docs/architecture.md:

* CrossBERT: ``{"tokens": int64 [L], "visible": int64 [V, Lv], "targets": int64 [V, L-Lv], "segments",
  "index"}``
* BERT: ``{"tokens" (after 80/10/10), "labels" (original ids), "loss_mask" float32, "padding_mask"
  int64 all ones, "segments", "index"}``

``segments`` (int32 ``[L]``): the document (fragment) id of every position, from the packing index
(``packing.sample_segments``); all zeros with ``data.document_mask: false``, which is part of the
cache key.

Sample-index cache: the packing index is saved as ``<hash>-<Class>-<split>-packing.npz`` under
``config.path_to_cache`` (default ``<data dir>/cache/crossbert_indices``), where ``<hash>`` is
megatron's ``unique_description_hash`` (class, path, num_samples, split, seed, L, wrapper stripping, and
``mask_index: global``, which marks the masks drawn at the global sample index). If the directory
is not writable the index is simply rebuilt in memory (it is cheap: vectorised numpy).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from megatron.core.datasets.blended_megatron_dataset_config import BlendedMegatronDatasetConfig
from megatron.core.datasets.indexed_dataset import IndexedDataset
from megatron.core.datasets.megatron_dataset import MegatronDataset
from megatron.core.datasets.utils import Split

from megatron_crossbert.arch_rules import crossbert_sample
from megatron_crossbert.config import MaskingConfig
from megatron_crossbert.data.datasets.packing import PackingIndex, assemble_sample, build_packing_index, sample_segments
from megatron_crossbert.data.datasets.wrappers import StrippedReader, detect_wrappers
from megatron_crossbert.data.indexed.reader import (
    check_vocab, document_lengths, document_reader, open_indexed, resolve_prefix,
)
from megatron_crossbert.fsutil import commit_group, temp_sibling
from megatron_crossbert.masking import TokenIds

logger = logging.getLogger(__name__)


@dataclass(kw_only=True)
class CrossBertDatasetConfig(BlendedMegatronDatasetConfig):
    """megatron's dataset config plus what packing and masking need (ids, vocab, masking)."""

    make_sample: Callable[..., dict] = crossbert_sample
    """The architecture's ``ArchSpec.make_sample``: ``(masking, index, tokens, TokenIds) -> sample``."""
    cls_id: int = 2
    sep_id: int = 3
    mask_id: int = 4
    special_ids: tuple[int, ...] = (0, 1, 2, 3, 4, 5)
    vocab_size: int = 32768
    eod_id: int = 5
    masking: MaskingConfig = field(default_factory=MaskingConfig)
    json_key: str = "text"
    strip_wrapper_tokens: str = "auto"
    """See :mod:`megatron_crossbert.data.datasets.wrappers` (``DataConfig.strip_wrapper_tokens``)."""
    document_mask: bool = True
    """Samples carry each position's document id (``DataConfig.document_mask``); else all zeros."""

    @property
    def token_ids(self) -> TokenIds:
        return TokenIds(mask_id=self.mask_id, vocab_size=self.vocab_size, special_ids=tuple(self.special_ids))


class CrossBertDataset(MegatronDataset):
    """Packed samples of one prefix's split, with complementary CrossBERT views."""

    def __init__(self, dataset: IndexedDataset, dataset_path: str | None, indices: np.ndarray,
                 num_samples: int | None, index_split: Split, config: CrossBertDatasetConfig) -> None:
        super().__init__(dataset, dataset_path, indices, num_samples, index_split, config)
        self.masking = config.masking
        """This split's masking (``build`` gives validation the fixed rate)."""
        if indices.size == 0 and num_samples:
            raise ValueError(f"{dataset_path}: the {index_split.name} split ({config.split}) has 0 of "
                             f"{self.numel_low_level_dataset(dataset)} documents but {num_samples} samples "
                             "were requested; use a split that gives it documents, or request 0 samples")
        self._strip_wrappers(dataset)
        self.packing = self._load_or_build_packing()
        if self.packing.num_samples == 0 and num_samples:
            raise ValueError(f"{dataset_path}: the {index_split.name} split holds fewer than "
                             f"{config.sequence_length - 1} tokens, too few for one sample")

    def _strip_wrappers(self, dataset: IndexedDataset) -> None:
        """Detect per-document [CLS]/[SEP]/eod wrappers, log the decision, put it in the cache key,
        and read documents without them (documents left empty are not packed)."""
        cfg = self.config
        lengths, read = document_lengths(dataset), document_reader(dataset)
        strip = detect_wrappers(read, lengths, cls_id=cfg.cls_id, sep_id=cfg.sep_id, eod_id=cfg.eod_id,
                                mode=cfg.strip_wrapper_tokens)
        logger.info("%s: wrapper tokens (strip_wrapper_tokens=%s): %s; stripping %d leading, %d trailing per document",
                    self.dataset_path, strip.mode, strip.evidence, strip.lead, strip.trail)
        self.wrapper_strip = strip
        self.unique_identifiers["wrapper_strip"] = strip.describe()
        self.unique_identifiers["mask_index"] = "global"  # blends mask at the blend's index (older caches: the constituent's)
        self.unique_description = json.dumps(self.unique_identifiers, indent=4,
                                             default=lambda obj: obj.unique_identifiers)
        self.unique_description_hash = hashlib.md5(self.unique_description.encode("utf-8"),
                                                   usedforsecurity=False).hexdigest()
        self.doc_lengths = strip.lengths(lengths)
        self._read = StrippedReader(read, strip.lead)
        if strip.active:
            self.indices = self.indices[self.doc_lengths[self.indices] > 0]

    @staticmethod
    def numel_low_level_dataset(low_level_dataset: IndexedDataset) -> int:
        return int(low_level_dataset.document_indices.shape[0] - 1)

    @staticmethod
    def build_low_level_dataset(dataset_path: str, config: CrossBertDatasetConfig) -> IndexedDataset:
        prefix = resolve_prefix(dataset_path, config.json_key)
        dataset = open_indexed(prefix, mmap=config.mmap_bin_files)
        check_vocab(dataset, config.vocab_size, prefix)
        return dataset

    @staticmethod
    def _key_config_attributes() -> list[str]:
        return ["random_seed", "sequence_length", "split", "split_matrix", "strip_wrapper_tokens", "document_mask"]

    def _cache_path(self) -> str:
        root = self.config.path_to_cache or os.path.join(
            os.path.dirname(os.path.abspath(self.dataset_path or ".")), "cache", "crossbert_indices")
        name = f"{self.unique_description_hash}-{type(self).__name__}-{self.index_split.name}-packing"
        return os.path.join(root, name)

    def _load_or_build_packing(self) -> PackingIndex:
        path = self._cache_path()
        if os.path.exists(path + ".npz"):
            return PackingIndex.load(path + ".npz")
        packing = build_packing_index(self.indices, self.doc_lengths, self.config.sequence_length,
                                      self.config.random_seed, self.num_samples)
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            tmp = temp_sibling(path)
            packing.save(tmp)  # np.savez appends .npz
            Path(tmp + ".json").write_text(self.unique_description)
            commit_group([(tmp + ".json", path + ".json"), (tmp + ".npz", path + ".npz")])
        except OSError as exc:
            logger.warning("packing index cache not writable (%s); using the in-memory index", exc)
        return packing

    def __len__(self) -> int:
        return self.num_samples if self.num_samples is not None else self.packing.num_samples

    def packed_tokens(self, idx: int) -> np.ndarray:
        """Tokens of served sample ``idx`` (int64 ``[L]``), checked against the vocabulary."""
        packed = int(self.packing.shuffle[idx % self.packing.num_samples])
        cfg = self.config
        tokens = assemble_sample(self.packing, packed, cfg.sequence_length, self._read, self.doc_lengths,
                                 cfg.cls_id, cfg.sep_id)
        if tokens.max() >= cfg.vocab_size:
            raise ValueError(f"{self.dataset_path}: sample {idx} holds token id {int(tokens.max())} >= vocab "
                             f"size {cfg.vocab_size} (data and tokenizer do not match)")
        return tokens

    def packed_segments(self, idx: int) -> np.ndarray:
        """Document (fragment) id of every position of served sample ``idx`` (int32 ``[L]``)."""
        cfg = self.config
        if not cfg.document_mask:
            return np.zeros(cfg.sequence_length, dtype=np.int32)
        packed = int(self.packing.shuffle[idx % self.packing.num_samples])
        return sample_segments(self.packing, packed, cfg.sequence_length, self.doc_lengths)

    def __getitem__(self, idx: int) -> dict[str, np.ndarray]:
        """The architecture's sample (``config.make_sample``) of packed sequence ``idx``, plus its
        documents (``segments``) and ``index``."""
        return self.sample(int(idx), int(idx))

    def sample(self, idx: int, index: int) -> dict[str, np.ndarray]:
        """Packed sequence ``idx`` of this dataset as global sample ``index`` (masks drawn at ``index``)."""
        cfg = self.config
        sample = cfg.make_sample(self.masking, index, self.packed_tokens(idx), cfg.token_ids)
        return {**sample, "segments": self.packed_segments(idx), "index": np.int64(index)}


class BertDataset(CrossBertDataset):
    """The same packed samples for the MLM baselines; ``make_sample`` (80/10/10) decides the dict.

    A class of its own so its megatron description and sample-index cache name say what it serves.
    """


def describe(dataset: MegatronDataset) -> str:
    """One line for logs: class, path, split and size."""
    return json.dumps({"class": type(dataset).__name__, "path": dataset.dataset_path,
                       "split": dataset.index_split.name, "samples": len(dataset)})
