"""The embedding recipe of sentence-transformers directories in both config formats: the old one
(``pooling_mode_*`` booleans, ``max_seq_length`` in ``sentence_bert_config.json``) and the one the installed
sentence-transformers writes (``"pooling_mode": "mean"``, the limit kept as the tokenizer's
``model_max_length``). Before the fix the new format was refused and its limit silently became 256."""

from __future__ import annotations

import json

import pytest

from megatron_crossbert.evaluation.recipe import read_sentence_transformers_recipe, resolve_recipe

NEW_MODULES = [
    {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.base.modules.transformer.Transformer"},
    {"idx": 1, "name": "1", "path": "1_Pooling",
     "type": "sentence_transformers.sentence_transformer.modules.pooling.Pooling"},
    {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.base.modules.normalize.Normalize"},
]


def _new_format_dir(root, pooling: str, model_max_length) -> object:
    root.mkdir()
    (root / "modules.json").write_text(json.dumps(NEW_MODULES))
    (root / "1_Pooling").mkdir()
    (root / "1_Pooling" / "config.json").write_text(json.dumps({"embedding_dimension": 32, "pooling_mode": pooling,
                                                                "include_prompt": True}))
    (root / "sentence_bert_config.json").write_text(json.dumps({"transformer_task": "feature-extraction",
                                                                "module_output_name": "token_embeddings"}))
    (root / "tokenizer_config.json").write_text(json.dumps({"model_max_length": model_max_length}))
    return root


def test_new_format_pooling_and_limit(tmp_path):
    recipe = read_sentence_transformers_recipe(_new_format_dir(tmp_path / "cls", "cls", 48))
    assert (recipe.pooling, recipe.normalize, recipe.max_len, recipe.tokens) == ("cls", True, 48, 48)
    unlimited = read_sentence_transformers_recipe(_new_format_dir(tmp_path / "mean", "mean", 1e30))
    assert (unlimited.pooling, unlimited.max_len, unlimited.tokens) == ("mean", None, 256)
    assert resolve_recipe(tmp_path / "cls", max_len=16).max_len == 16  # a flag still wins
    with pytest.raises(ValueError, match=r"max/1_Pooling/config.json: pooling_mode 'max' is not supported"):
        read_sentence_transformers_recipe(_new_format_dir(tmp_path / "max", "max", 48))


def test_a_model_saved_by_the_installed_sentence_transformers(tiny_hf_encoder, tmp_path):
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(tiny_hf_encoder), device="cpu")
    model.max_seq_length = 40
    model.save(str(tmp_path / "st"))
    recipe = read_sentence_transformers_recipe(tmp_path / "st")
    assert (recipe.pooling, recipe.normalize, recipe.max_len) == ("mean", False, 40)


def test_limit_without_max_seq_length_is_the_models_own(tmp_path):
    """Old-format pooling but no ``max_seq_length``: the tokenizer's limit, not a silent 256."""
    (tmp_path / "modules.json").write_text(json.dumps(NEW_MODULES[:2]))
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_mean_tokens": True}))
    (tmp_path / "sentence_bert_config.json").write_text(json.dumps({"do_lower_case": False}))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 128}))
    assert resolve_recipe(tmp_path).tokens == 128
    (tmp_path / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 96}))
    assert resolve_recipe(tmp_path).tokens == 96  # the sentence-transformers setting still comes first
