"""A resume refusal names every model difference by the key a user sets (``model.ffn_hidden_size``, never the
property ``ffn`` that resolves it), and compares the values as they take effect: an unset width equals its
default written out."""

from __future__ import annotations

import dataclasses

import pytest

from megatron_crossbert.checkpoint.verify import MODEL_FIELDS, config_mismatches
from megatron_crossbert.config import ModelConfig, load_run_config

CHANGED = {"arch": "bert", "encoder": "modern", "vocab_size": "1000", "hidden_size": "384", "num_layers": "6",
           "num_attention_heads": "6", "ffn_hidden_size": "1024", "max_position_embeddings": "1024",
           "decoder_num_layers": "3", "decoder_hidden_size": "384", "decoder_num_attention_heads": "4",
           "decoder_ffn_hidden_size": "1024", "decoder_position_embedding": "false",
           "decoder_cross_attention_only": "true", "decoder_context_position_embedding": "true"}
"""A valid other value of each compared field (the base is the default crossbert config)."""


def _config(**model):
    extra = {"decoder_position_embedding": "false"} if model.get("encoder") == "modern" else {}
    return load_run_config(None, [f"model.{key}={value}" for key, value in {**extra, **model}.items()])


def test_every_compared_field_is_a_config_key():
    assert set(MODEL_FIELDS) <= {field.name for field in dataclasses.fields(ModelConfig)}
    assert set(CHANGED) == set(MODEL_FIELDS)


@pytest.mark.parametrize("key", sorted(CHANGED))
def test_each_difference_is_named_by_its_key(key):
    diffs = config_mismatches(_config(), _config(**{key: CHANGED[key]}))
    assert any(d.startswith(f"model.{key}: checkpoint ") for d in diffs), diffs
    names = {d.split(":", 1)[0] for d in diffs}
    assert names <= {f"model.{k}" for k in MODEL_FIELDS} | {"model.rotary_base"}, names


@pytest.mark.parametrize("saved,run,expected", [
    ({"ffn_hidden_size": "3072"}, {"ffn_hidden_size": "2048"}, ["model.ffn_hidden_size: checkpoint 3072 vs run 2048"]),
    ({}, {"ffn_hidden_size": "2048"}, ["model.ffn_hidden_size: checkpoint 3072 vs run 2048"]),
    ({"decoder_ffn_hidden_size": "512"}, {}, ["model.decoder_ffn_hidden_size: checkpoint 512 vs run 3072"]),
    ({"decoder_hidden_size": "384", "decoder_num_attention_heads": "4"}, {"ffn_hidden_size": "1000"},
     ["model.ffn_hidden_size: checkpoint 3072 vs run 1000", "model.decoder_hidden_size: checkpoint 384 vs run 768",
      "model.decoder_num_attention_heads: checkpoint 4 vs run 12",
      "model.decoder_ffn_hidden_size: checkpoint 1536 vs run 3072"]),
])
def test_the_refusal_names_keys_and_compares_values_in_effect(saved, run, expected):
    assert config_mismatches(_config(**saved), _config(**run)) == expected
    assert config_mismatches(_config(**run), _config(**run)) == []


@pytest.mark.parametrize("explicit", [{"ffn_hidden_size": "3072"}, {"decoder_hidden_size": "768"},
                                      {"decoder_num_attention_heads": "12", "decoder_ffn_hidden_size": "3072"}])
def test_an_unset_width_equals_its_default_written_out(explicit):
    assert config_mismatches(_config(), _config(**explicit)) == []
    assert config_mismatches(_config(**explicit), _config(), weights_only=True) == []


def test_resolved_refuses_a_name_that_is_not_a_field():
    with pytest.raises(KeyError, match="ModelConfig has no field 'ffn'"):
        ModelConfig().resolved("ffn")
