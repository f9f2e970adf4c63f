"""The model's own limit caps how many tokens an evaluation feeds it (the CLIs are in
``test_eval_inputs.py``). Unguarded, ``crossbert-probe`` fed 128 tokens to a 64-position model and crashed
(``The size of tensor a (128) must match ... (64)``), ``crossbert-mteb`` fed 256."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from megatron_crossbert.evaluation.recipe import TokenLimit, fit_max_len, model_token_limit, resolve_recipe


def _model(directory: Path, config: dict, tokenizer_max: float | None = None) -> Path:
    directory.mkdir(parents=True)
    (directory / "config.json").write_text(json.dumps(config))
    if tokenizer_max is not None:
        (directory / "tokenizer_config.json").write_text(json.dumps({"model_max_length": tokenizer_max}))
    return directory


@pytest.mark.parametrize("config, tokenizer_max, tokens", [
    ({"model_type": "bert", "max_position_embeddings": 64, "pad_token_id": 0}, 1e30, 64),
    ({"model_type": "roberta", "max_position_embeddings": 514, "pad_token_id": 1}, None, 512),
    ({"model_type": "xlm-roberta-xl", "max_position_embeddings": 33, "pad_token_id": 0}, None, 32),  # our export
    ({"model_type": "bert", "max_position_embeddings": 512}, 128, 128),  # the tokenizer is stricter
    ({"model_type": "modernbert", "max_position_embeddings": 8192}, None, 8192),
])
def test_the_limit_comes_from_the_model_files(tmp_path, config, tokenizer_max, tokens):
    limit = model_token_limit(_model(tmp_path / "m", config, tokenizer_max))
    assert limit is not None and limit.tokens == tokens


def test_no_files_no_limit(tmp_path):
    assert model_token_limit(tmp_path / "hub-name") is None


def test_a_default_is_capped_and_a_flag_above_the_limit_refused(caplog):
    limit = TokenLimit(64, "m/config.json (max_position_embeddings 64)")
    with caplog.at_level(logging.INFO):
        assert fit_max_len(None, 128, limit) == 64
    assert "max length 64 tokens per text: the model's limit (m/config.json" in caplog.text
    assert fit_max_len(None, 32, limit) == 32 and fit_max_len(48, 128, limit) == 48 and fit_max_len(None, 128, None) == 128
    with pytest.raises(ValueError, match=r"^--max-len 100: the model takes at most 64 tokens per text "
                                         r"\(m/config.json \(max_position_embeddings 64\)\)$"):
        fit_max_len(100, 128, limit)
    with pytest.raises(ValueError, match="^--max-len must be >= 1, got 0"):
        fit_max_len(0, 128, limit)


def test_a_sentence_transformers_length_is_capped_too(tmp_path):
    model = _model(tmp_path / "st", {"model_type": "bert", "max_position_embeddings": 64})
    (model / "modules.json").write_text(json.dumps([{"idx": 0, "name": "0", "path": "",
                                                     "type": "sentence_transformers.models.Transformer"}]))
    (model / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 256}))
    assert resolve_recipe(model, limit=model_token_limit(model)).max_len == 64
