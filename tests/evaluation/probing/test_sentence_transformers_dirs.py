"""A sentence-transformers directory is probed through its whole module stack, as ``SentenceTransformer(dir)``
encodes: a pooler directory's Dense and Normalize modules after the backbone's pooling, never the backbone's
pooled features alone."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from megatron_crossbert.evaluation.embedder import Embedder, EmbedderOptions
from megatron_crossbert.evaluation.encoders import HFEncoder, resolve_model
from megatron_crossbert.evaluation.probing.features import extract_task_features
from megatron_crossbert.evaluation.probing.runner import ProbeRunConfig, run_probing
from megatron_crossbert.evaluation.recipe import EmbeddingRecipe
from megatron_crossbert.evaluation.tasks.data import load_jsonl_task
from tests.support.synthetic_eval import write_jsonl_task


@pytest.fixture(scope="module")
def pooler_dir(tiny_hf_encoder, tmp_path_factory):
    """The tiny encoder saved with a random 8-wide Dense and Normalize (``crossbert-pooler``'s layout)."""
    from megatron_crossbert.evaluation.pooler.train import save_pooler

    hidden = HFEncoder(resolve_model(str(tiny_hf_encoder)), device="cpu").model.config.hidden_size
    torch.manual_seed(0)
    out = tmp_path_factory.mktemp("pooler") / "model"
    save_pooler(str(tiny_hf_encoder), EmbeddingRecipe(normalize=True, max_len=32), torch.nn.Linear(hidden, 8), out)
    return out


def _features(model_dir, task):
    return extract_task_features(Embedder.resolve(EmbedderOptions(str(model_dir), device="cpu", max_len=32)), task)


def test_probe_features_of_a_pooler_directory_are_its_sentence_transformers_embeddings(
        pooler_dir, tiny_hf_encoder, tmp_path):
    from sentence_transformers import SentenceTransformer

    task = load_jsonl_task(write_jsonl_task(tmp_path / "toy", n_train=24, n_test=8))
    feats = _features(pooler_dir, task)
    st = SentenceTransformer(str(pooler_dir), device="cpu")
    for split, texts in ((feats.train, task.train.texts), (feats.test, task.test.texts)):
        assert split.shape == (1, len(texts), 8)
        assert np.allclose(split[-1], st.encode(texts, convert_to_numpy=True), atol=1e-6)
    backbone = _features(tiny_hf_encoder, task).train[-1]
    assert backbone.shape[-1] != 8 and not np.allclose(np.linalg.norm(backbone, axis=-1), 1.0)


def test_a_pooler_directory_probes_its_last_layer_only(pooler_dir, tmp_path):
    """Its Dense reads the last layer's pooled vector, so ``--layers all`` is refused in one line; the report
    names the Dense module it read through."""
    task = load_jsonl_task(write_jsonl_task(tmp_path / "toy", n_train=24, n_test=8))
    config = ProbeRunConfig(max_len=16, cache_dir=None, device="cpu", both_readouts=False)
    report = run_probing(str(pooler_dir), [task], config)
    assert len(report["recipe"]["dense"]) == 1 and report["recipe"]["normalize"] and report["config"]["pooling"] == "mean"
    with pytest.raises(ValueError, match="--layers all: .*trained pooler.*--layers last"):
        run_probing(str(pooler_dir), [task], ProbeRunConfig(max_len=16, cache_dir=None, device="cpu", layers="all"))
