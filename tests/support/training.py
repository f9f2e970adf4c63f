"""Shared helpers for the training/checkpoint/example tests (no tests here).

``write_corpus`` writes a tiny Megatron indexed dataset with megatron's own IndexedDatasetBuilder
(random token ids above the special ids, varied document lengths) so training tests need neither
a tokenizer nor the preprocess CLI. ``tiny_config`` is a model small enough for ~20-30 ms steps
on one CPU core, with dropout on so RNG restore is exercised.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from megatron_crossbert.config import RunConfig, load_run_config

VOCAB = 128
FIRST_ORDINARY_ID = 8  # above every special id of the project's tokenizers


def write_corpus(directory: Path, num_docs: int = 120, seed: int = 0) -> str:
    """Write ``directory/corpus_text_document.{bin,idx}``; returns the prefix for data.data_path."""
    import torch
    from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

    directory.mkdir(parents=True, exist_ok=True)
    prefix = str(directory / "corpus_text_document")
    builder = IndexedDatasetBuilder(prefix + ".bin", dtype=np.int32)
    rng = np.random.default_rng(seed)
    for _ in range(num_docs):
        length = int(rng.integers(20, 90))
        builder.add_document(torch.from_numpy(rng.integers(FIRST_ORDINARY_ID, VOCAB, length).astype(np.int32)),
                             [length])
    builder.finalize(prefix + ".idx")
    return prefix


def copy_corpus(prefix: str, directory: Path) -> str:
    """Copy ``prefix.{bin,idx}`` into a new ``directory`` (same name); returns the new prefix."""
    import shutil

    directory.mkdir()
    for suffix in (".bin", ".idx"):
        shutil.copy(prefix + suffix, directory / ("corpus_text_document" + suffix))
    return str(directory / "corpus_text_document")


def tiny_overrides(arch: str, data_prefix: str, save_dir: Path | None = None, **extra) -> list[str]:
    values = {
        "model.arch": arch, "model.vocab_size": VOCAB, "model.make_vocab_size_divisible_by": 32,
        "model.hidden_size": 32, "model.num_layers": 2, "model.num_attention_heads": 2,
        "model.max_position_embeddings": 32, "model.decoder_num_layers": 1,
        "model.hidden_dropout": 0.1, "model.attention_dropout": 0.1,
        "data.data_path": [data_prefix], "data.seq_length": 32, "data.split": "90,10,0",
        "training.micro_batch_size": 2, "training.global_batch_size": 4, "training.train_iters": 20,
        "training.lr_warmup_iters": 2, "training.log_interval": 5, "training.eval_iters": 2,
        "checkpoint.keep_last": 2,
    }
    if save_dir is not None:
        values["checkpoint.save_dir"] = str(save_dir)
    values.update({key.replace("__", "."): value for key, value in extra.items()})
    return [f"{key}={value!r}" if isinstance(value, str) else f"{key}={value}" for key, value in values.items()]


def tiny_config(arch: str, data_prefix: str, save_dir: Path | None = None, **extra) -> RunConfig:
    """``extra`` uses ``section__key=value`` (e.g. ``training__train_iters=6``)."""
    return load_run_config(None, tiny_overrides(arch, data_prefix, save_dir, **extra))


def read_run_config(path: str | Path) -> RunConfig:
    """The RunConfig saved with a checkpoint reference (a root or an ``iter_*`` directory), for assertions
    on what a run or a conversion wrote (the library resolves and parses once, in ``checkpoint.verify``)."""
    from megatron_crossbert.checkpoint.directories import load_saved_config, resolve_checkpoint_dir

    return load_saved_config(resolve_checkpoint_dir(path))
