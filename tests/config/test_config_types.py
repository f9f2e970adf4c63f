"""Every config field's declared type is enforced where a config is read (``config.checks.coerce``): YAML,
``--set``, and a checkpoint's ``run_config.json``. Unchecked, a wrong type would be used as is (``lr: true``
trains at lr 1.0, ``async_save: 'false'`` turns async saves on, a string of task names is split into
characters) or ends in a traceback at step 1; a YAML syntax error would be a 50-line traceback."""

from __future__ import annotations

import dataclasses
import json
import logging
import types
import typing
from typing import Any, Literal

import pytest
import yaml

from megatron_crossbert.config import RunConfig, load_run_config

SECTIONS = {f.name: f.default_factory for f in dataclasses.fields(RunConfig)}


def section_hints(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}
WRONG_VALUES = ("2.0", "2.5", "true", "'2'", "abc", "[2]", "{a: 1}", "null", "'false'", "yes", ".nan", ".inf")
"""YAML texts of values a user writes by mistake (``yes`` is YAML 1.1's true)."""


def _fits(hint: Any, value: Any) -> bool:
    """Whether ``value`` has the declared type ``hint`` (bool is not an int; an int is a number)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_fits(arg, value) for arg in args)
    if origin is Literal:
        return isinstance(value, str)
    if origin is list:
        return isinstance(value, list) and all(_fits(args[0], item) for item in value)
    if hint is type(None):
        return value is None
    if hint is float:  # a numeric string is a number too (YAML 1.1 reads 3e-4 as one)
        number = _number(value)
        return number is not None and abs(number) != float("inf") and number == number
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, hint)


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _wrong_values() -> dict[str, list[str]]:
    """section.key -> the YAML texts of WRONG_VALUES whose type is not the field's, for every field of every section."""
    wrong = {}
    for section, cls in SECTIONS.items():
        for name, hint in section_hints(cls).items():
            wrong[f"{section}.{name}"] = [text for text in WRONG_VALUES if not _fits(hint, yaml.safe_load(text))]
    return wrong


@pytest.mark.parametrize("key, texts", sorted(_wrong_values().items()))
def test_every_wrong_type_is_refused_naming_the_key(key, texts):
    assert texts, f"{key}: no wrong value in WRONG_VALUES (add one)"  # new fields are swept automatically
    for text in texts:
        with pytest.raises(ValueError) as info:
            load_run_config(None, [f"{key}={text}"])
        assert str(info.value).startswith((f"{key} must be ", f"{key}[0] must be ")), (text, str(info.value))


@pytest.mark.parametrize("override, expected", [
    ("training.lr=3e-4", ("training", "lr", 3e-4)),                 # YAML 1.1 reads 3e-4 as a string
    ("training.lr=1", ("training", "lr", 1.0)),                     # an int is a number
    ("training.train_iters=500", ("training", "train_iters", 500)),
    ("checkpoint.async_save=false", ("checkpoint", "async_save", False)),
    ("training.lr_decay_style=wsd", None),                          # the accepted spelling of WSD
    ("data.data_path=[0.5, a, 0.5, b]", ("data", "data_path", [0.5, "a", 0.5, "b"])),  # blend weights
    ("training.rampup_batch_size=[8, 8, 64]", ("training", "rampup_batch_size", [8, 8, 64])),
    ("training.peak_tflops=null", ("training", "peak_tflops", None)),
    ("model.ffn_hidden_size=null", ("model", "ffn_hidden_size", None)),
])
def test_right_types_still_load(override, expected):
    extra = ["training.lr_wsd_decay_fraction=0.2"] if "wsd" in override else []
    cfg = load_run_config(None, [override] + extra)
    if expected is not None:
        section, name, value = expected
        assert getattr(getattr(cfg, section), name) == value


@pytest.mark.parametrize("override, message", [
    ("training.lr=true", "training.lr must be a number, got true (a boolean)"),
    ("training.probe_tasks=mteb:/data/mteb_lite", "training.probe_tasks must be a list of strings, got the string "
                                                  "'mteb:/data/mteb_lite'; write [mteb:/data/mteb_lite]"),
    ("checkpoint.async_save='false'", "checkpoint.async_save must be true or false, got 'false' (a string)"),
    ("training.train_iters=2.0", "training.train_iters must be an integer, got 2.0 (a float)"),
    ("data.split=100", "data.split must be a string, got 100 (an integer)"),
    ("data.tokenizer=a: b", "data.tokenizer must be a string, got {'a': 'b'} (a mapping)"),
    ("model.arch=[2]", "model.arch must be one of crossbert, bert, mlm, got [2] (a list)"),
    ("data.data_path=[true, a]", "data.data_path[0] must be a string or a number, got true (a boolean)"),
    ("training.seed=null", "training.seed must be an integer, got null"),
])
def test_the_issue_examples_name_key_and_value(override, message):
    with pytest.raises(ValueError, match=f"^{_escape(message)}"):
        load_run_config(None, [override])


def _escape(text: str) -> str:
    import re

    return re.escape(text)


@pytest.mark.parametrize("text, message", [
    ("model:\n  arch: crossbert\n  hidden_size: 64\n num_layers: 2\n", r"bad\.yaml:4:2: not valid YAML: expected <block end>"),
    ("training:\n\tlr: 0.001\n", r"bad\.yaml:2:1: not valid YAML: found character '\\t'"),
    ("model:\n  hidden_size: 64\nmodel:\n  hidden_size: 128\n", r"bad\.yaml:3:1: not valid YAML: duplicate key 'model' "
                                                                r"\(first at line 1\)"),
    ("model:\n  hidden_size: 64\n  hidden_size: 128\n", r"bad\.yaml:3:3: not valid YAML: duplicate key 'hidden_size'"),
    ("model: crossbert\n", r"\[model\] must be a mapping of keys .*got 'crossbert' \(a string\)"),
    ("training: []\n", r"\[training\] must be a mapping of keys .*got \[\] \(a list\)"),
    ("training: [lr]\n", r"\[training\] must be a mapping of keys"),
    ("- model\n", r"bad\.yaml: top level must be a mapping of sections, got \['model'\]"),
])
def test_yaml_files_that_are_not_configs(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        load_run_config(path)


def test_a_set_value_that_is_not_yaml_names_the_flag():
    with pytest.raises(ValueError, match=r"^--set 'training.probe_tasks=\[a, b': the value is not valid YAML "
                                         r"\(column 6\): expected ',' or '\]'"):
        load_run_config(None, ["training.probe_tasks=[a, b"])


def test_a_bom_and_an_empty_section_are_fine(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("\ufefftraining:\n  lr: 0.002\nmodel:\n", encoding="utf-8")
    assert load_run_config(path).training.lr == 0.002


def _saved(tmp_path, **changes) -> str:
    """A run_config.json as an older version wrote it, with ``changes`` (section__key=value) applied."""
    raw = RunConfig().to_dict()
    for key, value in changes.items():
        section, name = key.split("__")
        raw[section][name] = value
    path = tmp_path / "run_config.json"
    path.write_text(json.dumps(raw))
    return str(path)


def test_saved_configs_of_older_versions_still_load(tmp_path, caplog):
    """A checkpoint saved before types were checked must still resume: values with one meaning (the one that
    run used) are read so, with a warning naming the file and key; the rest are refused naming both."""
    with caplog.at_level(logging.WARNING):
        cfg = RunConfig.load_json(_saved(tmp_path, training__lr=True, training__train_iters=2000.0,
                                         checkpoint__async_save="false"))
    assert (cfg.training.lr, cfg.training.train_iters, cfg.checkpoint.async_save) == (1.0, 2000, True)
    assert type(cfg.training.train_iters) is int
    text = caplog.text
    assert "run_config.json: training.lr is true (a boolean)" in text and "read as 1.0, the value that run used" in text
    assert "checkpoint.async_save is 'false' (a string)" in text and "read as True" in text
    with pytest.raises(ValueError, match=r"run_config\.json: training\.probe_tasks must be a list of strings, "
                                         r"got the string"):
        RunConfig.load_json(_saved(tmp_path, training__probe_tasks="mteb:/x"))


def test_print_config_refuses_in_one_line(capsys):
    """The CLI path (in-process): one ``error:`` line naming the key, exit status 2."""
    from megatron_crossbert.cli.pretrain import main

    assert main(["--set", "training.lr=true", "--print-config"]) == 2
    err = capsys.readouterr().err
    assert err == "error: invalid config: training.lr must be a number, got true (a boolean)\n"
    assert main(["--set", "checkpoint.async_save=false", "--print-config"]) == 0
