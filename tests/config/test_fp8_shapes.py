"""The FP8 shape rule (Transformer Engine: GEMM rows divisible by 8, widths by 16) is checked with the config,
before any TE import, so a CPU machine refuses a bad shape in one line naming the fields."""

from __future__ import annotations

import pytest

from megatron_crossbert.config import DataConfig, MaskingConfig, ModelConfig, RunConfig, TrainingConfig


def _run(precision: str, mbs: int, ratio: float = 0.85, complementary: bool = False, arch: str = "crossbert",
         **model) -> RunConfig:
    return RunConfig(model=ModelConfig(arch=arch, encoder="classic", **model), data=DataConfig(seq_length=512),
                     masking=MaskingConfig(mask_ratio=ratio, complementary=complementary),
                     training=TrainingConfig(micro_batch_size=mbs, global_batch_size=mbs * 8, precision=precision))


def test_an_odd_micro_batch_at_r085_is_refused_in_one_line_naming_the_fields():
    with pytest.raises(ValueError) as err:
        _run("fp8", mbs=1)  # 77 visible tokens x 1: rows not divisible by 8
    message = str(err.value)
    assert "\n" not in message and message.startswith("training.precision='fp8': ")
    assert "encoder rows (visible tokens x training.micro_batch_size x views) = 77 is not divisible by 8" in message
    assert "decoder rows (masked targets x training.micro_batch_size x views) = 435" in message


def test_the_same_shape_is_fine_in_bf16_and_with_a_micro_batch_of_8():
    _run("bf16", mbs=1)
    assert _run("fp8", mbs=8).training.precision == "fp8"


def test_widths_and_the_mlm_encoder_rows_are_checked_too():
    with pytest.raises(ValueError, match=r"^training.precision='fp8': model.ffn_hidden_size=3000 is not divisible "
                                         r"by 16 \("):
        _run("fp8", mbs=8, ffn_hidden_size=3000)
    with pytest.raises(ValueError, match=r"^training.precision='fp8': encoder rows \(data.seq_length x "
                                         r"training.micro_batch_size\) = 100 is not divisible by 8 \("):
        RunConfig(model=ModelConfig(arch="bert", encoder="classic"), data=DataConfig(seq_length=100),
                  training=TrainingConfig(micro_batch_size=1, global_batch_size=2, precision="fp8"))


def test_encode_pads_to_a_multiple_of_16_under_fp8_and_trims_back():
    from types import SimpleNamespace

    import torch

    from megatron_crossbert.models.encode_padding import encode_length_multiple, pad_length

    fp8 = SimpleNamespace(tensor_model_parallel_size=2, sequence_parallel=True, fp8="hybrid")
    assert encode_length_multiple(fp8) == 16
    assert encode_length_multiple(SimpleNamespace(tensor_model_parallel_size=3, sequence_parallel=True, fp8=None)) == 3
    ids, mask = pad_length(torch.ones(2, 21, dtype=torch.long), None, 16)
    assert ids.shape == mask.shape == (2, 32) and mask[:, :21].all() and not mask[:, 21:].any()
