"""Values that cannot work are refused when the config is read, in one line naming the key.

Unchecked, a negative clip trained unclipped, ``init_method_std: 0`` started every weight at 0, a 0 FFN width
silently became 4*hidden, ``split: '0,100,0'`` was a 55-line traceback after start-up, blend weights of 0,
NaN or infinity reached megatron's asserts, torch refused betas and seeds after start-up naming no key."""

from __future__ import annotations

import pytest

from megatron_crossbert.config import RunConfig, load_run_config


@pytest.mark.parametrize("override, message", [
    ("training.clip_grad=-1", "training.clip_grad=-1.0 must be >= 0 (0 turns clipping off)"),
    ("training.weight_decay=-0.1", "training.weight_decay=-0.1 must be >= 0"),
    ("training.adam_beta1=1.0", "training.adam_beta1=1.0 must be in [0, 1)"),
    ("training.adam_beta2=1.5", "training.adam_beta2=1.5 must be in [0, 1)"),
    ("training.adam_eps=0", "training.adam_eps=0.0 must be > 0"),
    ("training.seed=-1", "training.seed=-1 must be in [0, 2**32)"),
    ("masking.seed=4294967296", "masking.seed=4294967296 must be in [0, 2**32)"),
    ("training.eval_interval=-5", "training.eval_interval=-5 must be >= 0 (0 turns it off)"),
    ("training.probe_interval=-1", "training.probe_interval=-1 must be >= 0"),
    ("training.probe_interval=5", "training.probe_interval=5 needs training.probe_tasks"),
    ("training.peak_tflops=0", "training.peak_tflops=0.0 must be > 0 or null"),
    ("model.init_method_std=0", "model.init_method_std=0.0 must be > 0 (0 starts every weight at 0)"),
    ("model.init_method_std=-0.02", "model.init_method_std=-0.02 must be > 0"),
    ("model.ffn_hidden_size=0", "model.ffn_hidden_size=0 must be > 0 or null (the default)"),
    ("model.ffn_hidden_size=-8", "model.ffn_hidden_size=-8 must be > 0 or null"),
    ("model.decoder_num_attention_heads=0", "model.decoder_num_attention_heads=0 must be > 0 or null"),
    ("model.decoder_ffn_hidden_size=0", "model.decoder_ffn_hidden_size=0 must be > 0 or null"),
    ("data.split='0,100,0'", "data.split='0,100,0': the train share is 0, so there is nothing to train on"),
    ("data.split='0,0,0'", "data.split='0,0,0': the train share is 0"),
    ("data.data_path=[0, a, 1, b]", "data.data_path=[0.0, 'a', 1.0, 'b']: weight 0.0 for a: a blend weight must be a finite number > 0; "
                                    "leave the prefix out to skip it"),
    ("data.data_path=['nan', a, 1, b]", "data.data_path=['nan', 'a', 1.0, 'b']: weight nan for a"),
    ("data.data_path=['inf', a, 1, b]", "data.data_path=['inf', 'a', 1.0, 'b']: weight inf for a"),
    ("data.data_path=[-1, a, 2, b]", "data.data_path=[-1.0, 'a', 2.0, 'b']: weight -1.0 for a"),
    ("data.data_path=[1, a, 1]", "data.data_path=[1.0, 'a', 1.0]: expected PREFIX [PREFIX ...] or WEIGHT "
                                 "PREFIX pairs"),
    ("data.data_path=[a, 1, b, 1]", "data.data_path=['a', 1.0, 'b', 1.0]: expected"),
])
def test_values_that_cannot_work_name_their_key(override, message):
    with pytest.raises(ValueError) as info:
        load_run_config(None, [override])
    assert str(info.value).startswith(message), str(info.value)


def test_validation_needs_validation_documents():
    with pytest.raises(ValueError, match=r"^training.eval_interval=1 needs validation documents, but "
                                         r"data.split='100,0,0' gives validation a 0 share"):
        load_run_config(None, ["data.split='100,0,0'", "training.eval_interval=1"])
    assert load_run_config(None, ["data.split='100,0,0'"]).data.split_shares() == (100.0, 0.0, 0.0)
    assert load_run_config(None, ["data.split='98,2'"]).data.split_shares() == (98.0, 2.0, 0.0)


def test_saving_without_a_place_is_refused_at_the_start_not_in_the_yaml():
    """Example YAMLs set save_interval and take --save on the command line, so the rule runs at start-up
    (``training.setup.check_support``), where a run without --save would save nothing at all."""
    cfg = load_run_config(None, ["checkpoint.save_interval=1"])
    with pytest.raises(ValueError, match=r"^checkpoint.save_interval=1 needs checkpoint.save_dir \(--save\), got "
                                         r"checkpoint.save_dir=null; "
                                         "nothing would be saved"):
        cfg.checkpoint.check_saving()
    with pytest.raises(ValueError, match="checkpoint.async_save=true needs checkpoint.save_dir"):
        load_run_config(None, ["checkpoint.async_save=true"]).checkpoint.check_saving()
    load_run_config(None, ["checkpoint.save_interval=1", "checkpoint.save_dir=/x"]).checkpoint.check_saving()


@pytest.mark.parametrize("data_path, blend", [
    (["p"], (["p"], None)),
    (["a", "b"], (["a", "b"], None)),                                  # megatron weighs them by size
    ([0.7, "a", "0.3", "b"], (["a", "b"], [0.7, 0.3])),
    ([1, "a", 2, "b"], (["a", "b"], [1.0, 2.0])),
])
def test_blend_forms(data_path, blend):
    from megatron_crossbert.config import parse_blend

    assert parse_blend(data_path) == blend


def test_an_empty_blend_names_the_key():
    from megatron_crossbert.config import parse_blend

    with pytest.raises(ValueError, match=r"^data.data_path=\[\] is empty"):
        parse_blend([])
    assert RunConfig().data.data_path == []  # a config without data still validates (--print-config, templates)
