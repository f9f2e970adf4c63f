"""build_datasets under an initialised gloo group (megatron builds on rank 0 first, then the others)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.multirank import run_ranks


def _write_prefix(prefix: str) -> None:
    from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

    rng = np.random.default_rng(0)
    builder = IndexedDatasetBuilder(prefix + ".bin", dtype=np.uint16)
    for _ in range(50):
        n = int(rng.integers(5, 80))
        builder.add_document(rng.integers(6, 250, size=n), [n])
    builder.finalize(prefix + ".idx")


def _cfg(prefix: str, cache: str):
    from megatron_crossbert.config import DataConfig, ModelConfig, RunConfig

    return RunConfig(model=ModelConfig(vocab_size=256, max_position_embeddings=64),
                     data=DataConfig(data_path=[prefix], seq_length=32, split="9,1,0", cache_dir=cache))


def _worker(rank: int, world_size: int, prefix: str, cache: str) -> list[list[int]]:
    import torch.distributed as dist

    from megatron_crossbert.data.datasets.build import build_datasets

    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    train, valid, test = build_datasets(_cfg(prefix, cache), (64, 8, 0))
    assert test is None and len(valid) == 8
    return [train[i]["tokens"].tolist() + train[i]["visible"].ravel().tolist() for i in (0, 17, 63)]


@pytest.mark.multirank
def test_build_under_gloo_matches_single_process(tmp_path):
    from megatron_crossbert.data.datasets.build import build_datasets

    prefix = str(tmp_path / "d_text_document")
    _write_prefix(prefix)
    ranks = run_ranks(_worker, 2, prefix, str(tmp_path / "cache"), timeout=300)
    train, _, _ = build_datasets(_cfg(prefix, str(tmp_path / "cache2")), (64, 8, 0))
    local = [train[i]["tokens"].tolist() + train[i]["visible"].ravel().tolist() for i in (0, 17, 63)]
    assert ranks[0] == ranks[1] == local
    assert len(list((tmp_path / "cache").glob("*-packing.npz"))) == 2  # train + valid, written once by rank 0
