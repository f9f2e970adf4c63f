"""Where token-state variance lies (``evaluation.token_geometry``): shares that match constructed cases, and an
encoder's token ids aligned with its token states."""

from __future__ import annotations

import numpy as np
import pytest

from megatron_crossbert.evaluation.token_geometry import explained_share, sample_texts, token_geometry


def _texts(rng, n: int = 60) -> list[np.ndarray]:
    return [rng.integers(0, 20, size=int(rng.integers(4, 16))) for _ in range(n)]


def test_states_made_of_the_word_are_explained_by_the_id_and_not_by_the_position():
    rng = np.random.default_rng(0)
    ids = _texts(rng)
    table = rng.normal(size=(20, 16))
    geometry = token_geometry([table[i] for i in ids], ids)
    assert geometry.identity_share == pytest.approx(1.0)
    assert geometry.position_share < 0.3 and geometry.token_effective_rank > 10
    assert (geometry.n_texts, geometry.n_tokens, geometry.dim) == (60, sum(map(len, ids)), 16)


def test_states_that_encode_the_position_give_pooled_features_that_encode_the_length():
    """A large position direction plus small word noise: one direction carries most variance, the position
    explains it, and the mean-pooled features' first principal score is the text's length."""
    rng = np.random.default_rng(1)
    ids = _texts(rng)
    table, direction = 0.05 * rng.normal(size=(20, 16)), rng.normal(size=16)
    states = [np.arange(len(i))[:, None] * direction[None, :] + table[i] for i in ids]
    geometry = token_geometry(states, ids)
    assert geometry.position_share > 0.95 and geometry.pc1_share > 0.95 and geometry.token_effective_rank < 3
    assert geometry.pooled_length_r > 0.99


def test_the_share_is_the_anova_r2_and_refuses_misaligned_ids():
    x = np.array([[0.0], [2.0], [10.0], [12.0]])
    assert explained_share(x, np.array([0, 0, 1, 1])) == pytest.approx(1 - 4 / 104)  # within 4, total 104
    assert explained_share(np.ones((3, 2)), np.array([0, 1, 2])) == 0.0
    with pytest.raises(ValueError, match="one id per token state"):
        token_geometry([np.zeros((3, 2))], [np.zeros(2, dtype=int)])


def test_an_encoders_token_ids_are_the_tokens_its_states_belong_to(tiny_hf_encoder):
    from megatron_crossbert.evaluation.encoders import HFEncoder

    encoder = HFEncoder(str(tiny_hf_encoder), device="cpu", max_len=8, batch_size=2)
    texts = ["a short one", "a text long enough to be cut at eight tokens by the limit", "two words"]
    states, ids = encoder.token_states(texts), encoder.token_ids(texts)
    assert [len(s) for s in states] == [len(i) for i in ids]
    assert len(ids[1]) == 8  # truncated as the states are
    assert list(ids[0]) == encoder.tokenizer("a short one")["input_ids"]  # no padding id kept


def test_the_text_sample_is_seeded_distinct_and_the_same_whatever_the_task_order():
    from types import SimpleNamespace

    tasks = [SimpleNamespace(test=SimpleNamespace(texts=[f"t{i}" for i in range(0, 40)])),
             SimpleNamespace(test=SimpleNamespace(texts=[f"t{i}" for i in range(30, 80)]))]
    picked = sample_texts(tasks, size=20, seed=1)
    assert len(set(picked)) == 20 and picked == sorted(picked) and picked == sample_texts(tasks[::-1], 20, seed=1)
    assert picked != sample_texts(tasks, size=20, seed=2) and len(sample_texts(tasks, size=500)) == 80
