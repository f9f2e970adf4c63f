"""``modules.json`` entries load only from inside the model folder: a path that climbs out (``..``), an absolute
path, or a module folder that is a symlink to elsewhere is refused in one line naming ``modules.json``, the entry
and the path, by every reader (the recipe, the Transformer folder, crossbert-mteb, crossbert-pooler). Files
inside a module folder may still be symlinks: the Hugging Face cache's ``snapshots/<rev>`` layout loads."""

from __future__ import annotations

import json
import os

import pytest

from megatron_crossbert.evaluation.encoders import resolve_model
from megatron_crossbert.evaluation.recipe import read_sentence_transformers_recipe, transformer_subdir
from tests.support.synthetic_eval import write_mteb_lite_fixture

TYPES = {"Transformer": "sentence_transformers.models.Transformer",
         "Pooling": "sentence_transformers.models.Pooling",
         "Dense": "sentence_transformers.models.Dense",
         "Attention": "megatron_crossbert.evaluation.pooler.attention.AttentionPooling",
         "Normalize": "sentence_transformers.models.Normalize"}
CLIMBS = ["../outside", "ABSOLUTE", "inner/../../outside", "link", "./../model/../outside"]
"""Module paths that leave the model folder: ``ABSOLUTE`` becomes the outside folder's absolute path and
``link`` a symlink inside the model folder to it."""


def _entry(index: int, kind: str, path: str) -> dict:
    return {"idx": index, "name": str(index), "path": path, "type": TYPES[kind]}


def _model_with(tmp_path, kinds: list[str], bad: int, climb: str):
    """A model folder whose entry ``bad`` (of ``kinds``, in order) names ``climb``; the outside folder holds a
    valid config of every kind, so before the check the load went ahead."""
    outside, model = tmp_path / "outside", tmp_path / "model"
    outside.mkdir()
    (outside / "config.json").write_text(json.dumps({"pooling_mode": "cls", "model_type": "bert"}))
    model.mkdir()
    (model / "inner").mkdir()
    if climb == "link":
        (model / "link").symlink_to(outside, target_is_directory=True)
    path = str(outside) if climb == "ABSOLUTE" else climb
    entries = [_entry(i, kind, path if i == bad else ("" if kind == "Transformer" else f"{i}_{kind}"))
               for i, kind in enumerate(kinds)]
    for i, kind in enumerate(kinds):
        if i != bad and kind != "Transformer":
            (model / f"{i}_{kind}").mkdir()
            (model / f"{i}_{kind}" / "config.json").write_text(json.dumps({"pooling_mode": "mean"}))
    if kinds[bad] != "Transformer":
        (model / "config.json").write_text(json.dumps({"model_type": "bert"}))
    (model / "modules.json").write_text(json.dumps(entries))
    return model, path


LAYOUTS = [(["Transformer", "Pooling"], 1), (["Transformer", "Pooling", "Dense", "Normalize"], 2),
           (["Transformer", "Attention", "Dense"], 1), (["Transformer", "Pooling", "Dense"], 2),
           (["Transformer", "Pooling", "Normalize"], 2), (["Pooling", "Transformer"], 0)]


@pytest.mark.parametrize("climb", CLIMBS)
@pytest.mark.parametrize("kinds,bad", LAYOUTS)
def test_a_module_outside_the_folder_is_refused_naming_the_entry(tmp_path, kinds, bad, climb):
    model, path = _model_with(tmp_path, kinds, bad, climb)
    with pytest.raises(ValueError) as refused:
        read_sentence_transformers_recipe(model)
    message = str(refused.value)
    assert "\n" not in message and str(model / "modules.json") in message
    assert f"entry {bad} ({kinds[bad]})" in message.replace("AttentionPooling", "Attention")
    assert repr(path) in message and "outside the model folder" in message


@pytest.mark.parametrize("climb", CLIMBS)
def test_transformer_weights_outside_the_folder_are_refused(tmp_path, climb):
    """No ``config.json`` at the top: the Transformer entry names where the weights are, and that must be inside."""
    model, path = _model_with(tmp_path, ["Transformer", "Pooling"], 0, climb)
    for read in (transformer_subdir, resolve_model):
        with pytest.raises(ValueError, match=rf"modules.json: entry 0 \(Transformer\) path {path!r}"):
            read(model)


def test_a_path_that_is_not_a_string_is_refused(tmp_path):
    (tmp_path / "modules.json").write_text(json.dumps([{"path": ["1_Pooling"], "type": TYPES["Pooling"]}]))
    with pytest.raises(ValueError, match=r"modules.json: entry 0 path \['1_Pooling'\] is not a string"):
        read_sentence_transformers_recipe(tmp_path)


def _blob(cache, content: str, name: str) -> str:
    (cache / "blobs" / name).write_text(content)
    return name


def _hf_cache_snapshot(tmp_path, transformer: str):
    """``models--x/snapshots/<rev>`` whose every file is a relative symlink into ``blobs/`` (the hub's layout),
    the Transformer at the top (``""``) or in its own folder (``0_Transformer``)."""
    cache = tmp_path / "hub" / "models--org--tiny"
    (cache / "blobs").mkdir(parents=True)
    snapshot = cache / "snapshots" / "0123abcd"
    files = {"modules.json": json.dumps([_entry(0, "Transformer", transformer), _entry(1, "Pooling", "1_Pooling"),
                                         _entry(2, "Dense", "2_Dense"), _entry(3, "Normalize", "3_Normalize")]),
             "1_Pooling/config.json": json.dumps({"pooling_mode_cls_token": True}),
             "2_Dense/config.json": json.dumps({"in_features": 4, "out_features": 4}),
             f"{transformer or '.'}/config.json": json.dumps({"model_type": "bert"}),
             f"{transformer or '.'}/tokenizer_config.json": json.dumps({"model_max_length": 40})}
    for index, (name, content) in enumerate(sorted(files.items())):
        link = snapshot / name
        link.parent.mkdir(parents=True, exist_ok=True)
        blob = _blob(cache, content, f"{index:040x}")
        link.symlink_to(os.path.relpath(cache / "blobs" / blob, link.parent))
    return snapshot


@pytest.mark.parametrize("transformer", ["", "0_Transformer"])
def test_the_hf_cache_layout_with_symlinked_files_loads(tmp_path, transformer):
    snapshot = _hf_cache_snapshot(tmp_path, transformer)
    alias = tmp_path / "models" / "tiny"  # a user's own symlink to the snapshot folder
    alias.parent.mkdir()
    alias.symlink_to(snapshot, target_is_directory=True)
    for model in (snapshot, alias):
        recipe = read_sentence_transformers_recipe(model)
        assert (recipe.pooling, recipe.normalize, recipe.max_len) == ("cls", True, 40)
        assert recipe.dense == (str(model / "2_Dense"),)
        assert transformer_subdir(model) == (model / transformer if transformer else None)
        assert resolve_model(model).hf_path == str(model / transformer if transformer else model)


def _refusal(capsys, main, argv, path) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: ") and "Traceback" not in err
    assert "modules.json: entry 1 (Pooling)" in err and repr(path) in err


@pytest.mark.parametrize("climb", ["../outside", "ABSOLUTE", "link"])
def test_crossbert_mteb_and_pooler_refuse_in_one_line(tmp_path, capsys, climb):
    from megatron_crossbert.cli.mteb import main as mteb_main
    from megatron_crossbert.cli.pooler import main as pooler_main

    model, path = _model_with(tmp_path, ["Transformer", "Pooling", "Normalize"], 1, climb)
    bench = write_mteb_lite_fixture(tmp_path / "bench")
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"anchor": f"anchor {i}", "positive": f"positive {i}"}) + "\n"
                             for i in range(4)))
    common = ["--model", str(model), "--benchmark-dir", str(bench), "--cache-dir", "none"]
    _refusal(capsys, mteb_main, [*common, "--out", str(tmp_path / "mteb")], path)
    _refusal(capsys, pooler_main, [*common, "--pairs", str(pairs), "--out", str(tmp_path / "pooler")], path)
