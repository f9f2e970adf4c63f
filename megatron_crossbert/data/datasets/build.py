"""``build_datasets``: the one entry point the training loop calls to get train/valid/test datasets.

Builds through megatron's ``BlendedMegatronDatasetBuilder`` so weighted blends, split strings and
the rank-0-first construction under ``torch.distributed`` (gloo or NCCL) come from megatron-core.
Without an initialised process group everything is built in the calling process.

``DataConfig.data_path`` is a megatron blend: ``[prefix]`` or ``[w1, prefix1, w2, prefix2, ...]``;
a prefix is the path of the ``.bin``/``.idx`` pair without extension (``out/corpus_text_document``)
or the preprocess ``--output-prefix`` (``out/corpus``), which resolves to ``<prefix>_text_document``.
The data seed (packing order) and the mask seed are both ``MaskingConfig.seed``.
"""

from __future__ import annotations

import logging

import numpy as np
import torch
from megatron.core.datasets.blended_dataset import BlendedDataset
from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder

from megatron_crossbert.arch import get_arch
from megatron_crossbert.arch_rules import sample_layout
from megatron_crossbert.config import RunConfig
from megatron_crossbert.data.datasets.dataset import BertDataset, CrossBertDataset, CrossBertDatasetConfig
from megatron_crossbert.data.datasets.static_masks import StaticCrossBertDataset
from megatron_crossbert.data.tokenizers.tokenizer import SPECIAL_TOKENS, Tokenizer, run_tokenizer

logger = logging.getLogger(__name__)

_DEFAULT_IDS = {role: i for i, role in enumerate(SPECIAL_TOKENS)}


class GlobalIndexDataset(torch.utils.data.Dataset):
    """A blend whose samples are masked at the global sample index and say so in ``"index"``.

    megatron's ``BlendedDataset`` hands each constituent its local index; masks (and a masking-rate
    schedule) must follow the position in the training stream instead, so the constituent's packed
    sequence is masked here at the blend's index. Blended runs of earlier versions drew masks at the local
    index, so the cache key records ``mask_index: global``.
    """

    def __init__(self, dataset: BlendedDataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, idx: int) -> dict:
        which = int(self.dataset.dataset_index[idx])
        local = int(self.dataset.dataset_sample_index[idx])
        sample = self.dataset.datasets[which].sample(local, int(idx))
        return {"dataset_id": which, **sample, "constituent_index": np.int64(local)}


def _resolve_tokenizer(run_cfg: RunConfig, tokenizer: Tokenizer | None) -> tuple[dict[str, int], int]:
    """Special ids and vocabulary size; falls back to the project's standard ids when no tokenizer."""
    if tokenizer is None and run_cfg.data.tokenizer:
        tokenizer = run_tokenizer(run_cfg.data.tokenizer)
    if tokenizer is None:
        logger.warning("no tokenizer given: assuming the standard special ids %s and vocab_size=%d",
                       _DEFAULT_IDS, run_cfg.model.vocab_size)
        return dict(_DEFAULT_IDS), run_cfg.model.vocab_size
    if tokenizer.vocab_size > run_cfg.model.vocab_size:
        raise ValueError(f"tokenizer has {tokenizer.vocab_size} tokens but model.vocab_size is "
                         f"{run_cfg.model.vocab_size}: set model.vocab_size >= the tokenizer's size")
    return dict(tokenizer.special_ids), tokenizer.vocab_size


def make_dataset_config(run_cfg: RunConfig, tokenizer: Tokenizer | None = None) -> CrossBertDatasetConfig:
    """Translate the run config into megatron's dataset config (plus our packing/masking fields); the run's
    sample layout (``arch_rules.sample_layout``) builds every sample."""
    data, masking = run_cfg.data, run_cfg.masking
    ids, vocab_size = _resolve_tokenizer(run_cfg, tokenizer)
    blend = ([data.static_masks], None) if data.static_masks else data.blend()
    return CrossBertDatasetConfig(
        random_seed=masking.seed, sequence_length=data.seq_length, blend=blend, split=data.split,
        path_to_cache=data.cache_dir, tokenizer=None, make_sample=sample_layout(run_cfg.model.arch).make_sample,
        cls_id=ids["cls"], sep_id=ids["sep"], mask_id=ids["mask"], eod_id=ids["eod"],
        special_ids=tuple(sorted(set(ids.values()))), vocab_size=vocab_size, masking=masking,
        strip_wrapper_tokens=data.strip_wrapper_tokens, document_mask=data.document_mask)


def _dataset_class(run_cfg: RunConfig) -> type:
    """The static-mask dataset when ``data.static_masks`` is set; else the class named after the samples it
    serves (views: ``CrossBertDataset``; whole sequences: ``BertDataset``), as ``ArchSpec.uses_views`` says."""
    uses_views = get_arch(run_cfg.model.arch).uses_views
    if run_cfg.data.static_masks:
        if not uses_views or run_cfg.masking.pin_cls:
            raise ValueError(f"static_masks hold CrossBERT views without pinned positions; unset "
                             f"data.static_masks for arch={run_cfg.model.arch!r} or masking.pin_cls=True")
        if run_cfg.data.data_path:
            logger.warning("data.static_masks is set: samples come from %s, data.data_path is ignored",
                           run_cfg.data.static_masks)
        return StaticCrossBertDataset
    return CrossBertDataset if uses_views else BertDataset


def build_datasets(run_cfg: RunConfig, train_valid_test_num_samples: tuple[int, int, int],
                   tokenizer: Tokenizer | None = None):
    """Return ``(train, valid, test)``: torch-style datasets (or None for an empty split).

    Each yields the sample dicts of docs/architecture.md for ``run_cfg.model.arch`` (its
    ``make_sample``). Call on every rank; under torch.distributed rank 0 builds (and caches) first,
    then the others.
    """
    config = make_dataset_config(run_cfg, tokenizer)
    # fail now, not at the first sample (e.g. pinned positions that do not fit)
    config.make_sample(config.masking, 0, np.zeros(config.sequence_length, dtype=np.int64), config.token_ids)
    sizes = [int(n) if n is not None else None for n in train_valid_test_num_samples]
    builder = BlendedMegatronDatasetBuilder(_dataset_class(run_cfg), sizes, lambda: True, config)
    train, valid, test = builder.build()
    _require_built(run_cfg, sizes, (train, valid, test))
    _mask_at_fixed_rate(valid)
    return tuple(GlobalIndexDataset(d) if isinstance(d, BlendedDataset) else d for d in (train, valid, test))


def _require_built(run_cfg: RunConfig, sizes: list[int | None], datasets: tuple) -> None:
    """megatron builds no dataset (None) for a split whose share is 0, whatever was requested from it;
    ``config`` refuses those shares, this names the key should one still get here."""
    for name, wanted, dataset in zip(("train", "validation", "test"), sizes, datasets):
        if wanted and dataset is None:
            raise ValueError(f"data.split={run_cfg.data.split!r}: the {name} split has no documents but "
                             f"{wanted} samples are needed")


def _mask_at_fixed_rate(dataset) -> None:
    """Validation masks at ``bert_mask_prob`` whatever the masking-rate schedule (comparable losses)."""
    for part in getattr(dataset, "datasets", [dataset]):
        if hasattr(part, "masking"):
            part.masking = part.masking.at_fixed_rate()
