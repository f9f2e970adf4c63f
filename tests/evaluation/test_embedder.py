"""One embedding model for every evaluation: the pooling rule (flag, then the model's modules, then the default),
the form a model reference is taken as and the file that decided it, and ``embedder.json``."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from megatron_crossbert.evaluation.embedder import EMBEDDER_JSON, Embedder, EmbedderOptions, write_embedder_json
from megatron_crossbert.evaluation.encoders import MODEL_FORMS, resolve_model
from megatron_crossbert.evaluation.recipe import EmbeddingRecipe, choose_pooling, read_sentence_transformers_recipe

ATTENTION_FOLDER = "/m/1_AttentionPooling"
TRANSFORMER = "sentence_transformers.base.modules.transformer.Transformer"


@pytest.mark.parametrize("flag, model, expected", [
    ("cls", EmbeddingRecipe("mean", source="/m/modules.json"), ("cls", "flag", None)),
    ("mean", EmbeddingRecipe("attention", source="/m/modules.json", attention=ATTENTION_FOLDER),
     ("mean", "flag", None)),
    ("attention", EmbeddingRecipe("attention", source="/m/modules.json", attention=ATTENTION_FOLDER),
     ("attention", "flag", ATTENTION_FOLDER)),
    ("cls", None, ("cls", "flag", None)),
    (None, EmbeddingRecipe("cls", source="/m/modules.json"), ("cls", "/m/modules.json", None)),
    (None, EmbeddingRecipe("attention", source="/m/modules.json", attention=ATTENTION_FOLDER),
     ("attention", "/m/modules.json", ATTENTION_FOLDER)),
    (None, None, ("mean", "default", None)),
])
def test_pooling_comes_from_the_flag_then_the_model_then_the_default(flag, model, expected):
    choice = choose_pooling(flag, model)
    assert (choice.pooling, choice.source, choice.attention) == expected
    assert choice.why.startswith({"flag": "--pooling was given", "default": "no --pooling flag and no"}.get(
        choice.source, "no --pooling flag; the model's"))


def test_a_directory_saved_before_attention_pooling_moved_still_reads_as_attention(tmp_path):
    """``modules.json`` names the class where it was defined when the directory was saved."""
    (tmp_path / "1_AttentionPooling").mkdir()
    (tmp_path / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": TRANSFORMER},
        {"idx": 1, "name": "1", "path": "1_AttentionPooling",
         "type": "megatron_crossbert.evaluation.pooler.attention.AttentionPooling"}]))
    recipe = read_sentence_transformers_recipe(tmp_path)
    assert (recipe.pooling, recipe.attention) == ("attention", str(tmp_path / "1_AttentionPooling"))


def _sentence_transformers_copy(encoder_dir, root, subfolder: str = ""):
    """``encoder_dir`` as a sentence-transformers folder (Transformer at the top, or in ``subfolder``) with a cls
    Pooling module."""
    shutil.copytree(encoder_dir, root / subfolder if subfolder else root)
    (root / "1_Pooling").mkdir()
    (root / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode": "cls"}))
    (root / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": subfolder, "type": TRANSFORMER},
        {"idx": 1, "name": "1", "path": "1_Pooling",
         "type": "sentence_transformers.sentence_transformer.modules.Pooling"}]))
    return root


def test_each_model_form_says_which_form_won_and_the_file_that_decided_it(tmp_path, tiny_hf_encoder):
    top = _sentence_transformers_copy(tiny_hf_encoder, tmp_path / "st_top")
    nested = _sentence_transformers_copy(tiny_hf_encoder, tmp_path / "st_nested", "0_Transformer")
    found = {name: resolve_model(ref) for name, ref in (
        ("hf", tiny_hf_encoder), ("top", top), ("nested", nested), ("hub", "someone/some-model"))}
    assert {name: (r.form, r.why) for name, r in found.items()} == {
        "hf": ("hf-dir", str(tiny_hf_encoder / "config.json")),
        "top": ("sentence-transformers", str(top / "modules.json")),
        "nested": ("sentence-transformers", str(nested / "modules.json")),
        "hub": ("hub", "someone/some-model is no local directory, so a hub name")}
    assert {r.form for r in found.values()} | {"native-checkpoint"} == set(MODEL_FORMS)
    assert found["nested"].hf_path == str(nested / "0_Transformer") and found["nested"].model_dir == str(nested)


def test_embedder_json_says_what_was_resolved(tmp_path, tiny_hf_encoder):
    model = _sentence_transformers_copy(tiny_hf_encoder, tmp_path / "st")
    embedder = Embedder.resolve(EmbedderOptions(str(model), cache_dir=str(tmp_path / "cache"), device="cpu",
                                                max_len=16))
    record = json.loads(write_embedder_json(embedder, tmp_path / "out").read_text())
    assert record["given"] == str(model) and record["model"]["form"] == "sentence-transformers"
    assert record["model"]["why"] == str(model / "modules.json")
    assert record["pooling"] == {"pooling": "cls", "source": str(model / "modules.json"),
                                 "why": f"no --pooling flag; the model's sentence-transformers modules name it "
                                        f"({model / 'modules.json'})"}
    assert record["identity"] == embedder.identity and record["identity"].startswith(record["model"]["identity"])
    assert record["feature_cache"] == str(tmp_path / "cache" / "features") and record["recipe"]["max_len"] == 16
    flagged = Embedder.resolve(EmbedderOptions(str(model), device="cpu", pooling="mean"))
    assert json.loads(write_embedder_json(flagged, tmp_path / "flag").read_text())["pooling"]["source"] == "flag"


def test_a_variant_reads_the_same_features_and_refuses_other_pooling(tmp_path, tiny_hf_encoder):
    embedder = Embedder.resolve(EmbedderOptions(str(tiny_hf_encoder), device="cpu", max_len=16))
    texts = ["a b c", "d e", "a b c"]
    first = embedder.sentences(texts, task="t", split="s")
    twin = embedder.variant(EmbeddingRecipe(max_len=16, normalize=True), name="twin")
    assert twin.encoder is embedder.encoder and twin.name == "twin" and embedder.timing.texts == 2
    assert twin.sentences(texts, task="t", split="s") is first and embedder.timing.texts == 2
    assert np.allclose(first[0], first[2])
    with pytest.raises(ValueError, match="a variant reads the same pooled features"):
        embedder.variant(EmbeddingRecipe("cls", max_len=16))


def test_a_run_that_reads_no_pooled_features_resolves_the_model_alone(tmp_path, tiny_hf_encoder):
    embedder = Embedder.resolve(EmbedderOptions(str(tiny_hf_encoder), pooled=False))
    record = json.loads(write_embedder_json(embedder, tmp_path).read_text())
    assert (record["pooling"], record["recipe"], record["feature_cache"]) == (None, None, None)
    assert record["identity"] == embedder.model.identity and (tmp_path / EMBEDDER_JSON).is_file()
    with pytest.raises(ValueError, match="without an embedding recipe"):
        embedder.readout
