"""RunConfig validation: each bad value fails early with a ValueError that names the problem."""

from __future__ import annotations

import pytest

from megatron_crossbert.config import (
    MaskingConfig,
    ModelConfig,
    ParallelConfig,
    RunConfig,
    TrainingConfig,
    load_run_config,
    parse_override,
)


@pytest.mark.parametrize("ratio", [0.49, 0.0, 1.0, 1.2])
def test_mask_ratio_outside_range(ratio):
    with pytest.raises(ValueError, match="mask_ratio"):
        MaskingConfig(mask_ratio=ratio)


@pytest.mark.parametrize("kwargs, message", [
    (dict(hidden_size=100, num_attention_heads=12), "must divide model.hidden_size=100"),
    (dict(decoder_hidden_size=-8), "decoder_hidden_size=-8 must be > 0"),
    (dict(decoder_num_attention_heads=5), "must divide the decoder width 768"),
    (dict(decoder_num_layers=0), "decoder_num_layers"),
    (dict(hidden_dropout=1.0), "hidden_dropout"),
    (dict(vocab_size=0), "vocab_size"),
    (dict(arch="gpt"), "arch"),
    (dict(transformer_impl="apex"), "transformer_impl"),
    (dict(attention_backend="xformers"), "attention_backend"),
    (dict(encoder="modern", local_attention=127), "positive even number"),
    (dict(encoder="modern", local_attention=128, global_attn_every_n_layers=0), "global_attn_every_n_layers"),
    (dict(local_attention=128), "needs model.encoder='modern'"),
    (dict(encoder="modern", local_rotary_base=0), "local_rotary_base"),
    (dict(attention_backend="flex", attention_dropout=0.1), "no attention dropout"),
])
def test_bad_model_values(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ModelConfig(**kwargs)


def test_narrow_decoder_keeps_the_head_dim_and_the_tp_rule():
    half = ModelConfig(decoder_hidden_size=384)            # BERT-base encoder: 12 heads of 64
    assert (half.dec_hidden, half.dec_heads, half.dec_ffn) == (384, 6, 1536)
    assert ModelConfig().dec_heads == 12
    assert ModelConfig(decoder_num_attention_heads=3, decoder_hidden_size=384).dec_heads == 3
    with pytest.raises(ValueError, match="must divide the decoder's 2 attention heads"):
        RunConfig(model=ModelConfig(decoder_hidden_size=128), parallel=ParallelConfig(tensor_model_parallel_size=4))



def test_cross_section_checks():
    with pytest.raises(ValueError, match="position table"):
        load_run_config(None, ["data.seq_length=1024"])
    with pytest.raises(ValueError, match="complementary views need disjoint visible sets"):
        load_run_config(None, ["data.seq_length=127"])
    load_run_config(None, ["data.seq_length=127", "model.arch=bert", "model.decoder_num_layers=0"])  # no views
    with pytest.raises(ValueError, match="model.encoder='classic' cannot build model.arch='mlm', which is built "
                                         "with encoder modern"):
        load_run_config(None, ["model.arch=mlm"])
    with pytest.raises(ValueError, match="model.arch='gpt' must be one of crossbert, bert, mlm"):
        load_run_config(None, ["model.arch=gpt"])
    with pytest.raises(ValueError, match="model.encoder='ancient' must be one of classic, modern"):
        load_run_config(None, ["model.encoder=ancient"])
    with pytest.raises(ValueError, match="bias_gelu_fusion"):
        load_run_config(None, ["model.encoder=modern", "model.bias_gelu_fusion=true"])
    with pytest.raises(ValueError, match="parallel.tensor_model_parallel_size=5 must divide "
                                         "model.num_attention_heads=12"):
        load_run_config(None, ["parallel.tensor_model_parallel_size=5"])
    with pytest.raises(ValueError, match="must divide model.num_layers=12"):
        load_run_config(None, ["parallel.pipeline_model_parallel_size=5"])
    with pytest.raises(ValueError, match="sequence_parallel=true needs data.seq_length=510"):
        load_run_config(None, ["parallel.tensor_model_parallel_size=4", "parallel.sequence_parallel=true",
                               "data.seq_length=510"])


def test_other_sections():
    with pytest.raises(ValueError, match="sequence_parallel=true needs parallel.tensor_model_parallel_size > 1"):
        ParallelConfig(sequence_parallel=True)
    with pytest.raises(ValueError, match="multiple of"):
        TrainingConfig(micro_batch_size=3, global_batch_size=8)
    with pytest.raises(ValueError, match="precision"):
        TrainingConfig(precision="fp16")
    with pytest.raises(ValueError, match="pin_cls"):
        MaskingConfig(pin_cls=True, complementary=True)


def test_unknown_keys_and_bad_overrides():
    with pytest.raises(ValueError, match="unknown keys in \\[model\\]"):
        load_run_config(None, ["model.hiden_size=64"])
    with pytest.raises(ValueError, match="unknown config sections"):
        RunConfig.from_dict({"modle": {}})
    with pytest.raises(ValueError, match="section.key=value"):
        parse_override("lr=3")


def test_yaml_overrides_json_round_trip(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("model:\n  hidden_size: 64\n  num_attention_heads: 4\n  num_layers: 2\n"
                    "data:\n  seq_length: 128\nmasking:\n  mask_ratio: 0.75\n")
    cfg = load_run_config(path, ["training.lr=0.0003", "masking.complementary=false", "data.data_path=[a, b]"])
    assert (cfg.model.hidden_size, cfg.data.seq_length, cfg.training.lr) == (64, 128, 3e-4)
    assert cfg.masking.num_views == 1 and cfg.masking.visible_length(128) == 32
    assert cfg.data.data_path == ["a", "b"]
    cfg.save_json(tmp_path / "run_config.json")
    assert RunConfig.load_json(tmp_path / "run_config.json") == cfg


def test_padded_vocab_is_tp_splittable():
    model = ModelConfig(vocab_size=1000, make_vocab_size_divisible_by=128)
    assert model.padded_vocab_size(1) == 1024 and model.padded_vocab_size(2) == 1024
    with pytest.raises(ValueError, match="make_vocab_size_divisible_by=128 must be divisible by parallel.tensor_model_parallel_size=3"):
        model.padded_vocab_size(3)


def test_exponent_override_parses_as_float():
    assert load_run_config(None, ["training.lr=3e-4"]).training.lr == 3e-4
    with pytest.raises(ValueError, match="training.lr must be a number"):
        load_run_config(None, ["training.lr=fast"])


def test_attention_defaults_and_the_window_rule():
    from megatron_crossbert.attention_windows import layer_half_windows

    model = RunConfig().model
    assert (model.attention_backend, model.local_attention, model.windowed) == ("auto", 0, False)
    assert RunConfig().data.document_mask is True
    assert ModelConfig(encoder="modern", local_attention=128).windowed
    assert not ModelConfig(encoder="modern", local_attention=128, global_attn_every_n_layers=1).windowed
    assert layer_half_windows(7, 128, 3) == (0, 64, 64, 0, 64, 64, 0)
    assert layer_half_windows(3, 0, 3) == (0, 0, 0)


def test_layer_types_equal_hf_modernbert_config():
    """The rule's layer types are exactly what HF ``ModernBertConfig`` derives from the same options."""
    from transformers import ModernBertConfig

    from megatron_crossbert.attention_windows import every_n_of_layer_types, hf_layer_types

    for layers, window, every in ((22, 128, 3), (4, 8, 2), (5, 64, 1), (3, 4, 5)):
        hf = ModernBertConfig(num_hidden_layers=layers, local_attention=window, global_attn_every_n_layers=every)
        assert hf_layer_types(layers, window, every) == hf.layer_types and hf.sliding_window == window // 2
        assert every_n_of_layer_types(hf.layer_types, window) == (min(every, layers) if every > 1 else 1)
