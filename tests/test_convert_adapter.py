"""Unit tests of the pure conversion pieces: QKV layout, key tables, strictness, TP gather, configs.

No megatron model is built here (fast); end-to-end numerical parity lives in test_convert.py.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from megatron_crossbert.config import ModelConfig
from megatron_crossbert.convert import ConversionError
from megatron_crossbert.convert.adapter import hf_to_megatron, megatron_to_hf
from megatron_crossbert.convert.hf_config import (
    check_exportable,
    check_importable,
    mlm_head_exportable,
    vocab_layout,
)
from megatron_crossbert.convert.layout import gather_tensor_parallel, merge_qkv, split_qkv

CFG = ModelConfig(arch="bert", vocab_size=100, make_vocab_size_divisible_by=64, hidden_size=8, num_layers=2,
                  num_attention_heads=2, ffn_hidden_size=16, max_position_embeddings=12)


def fake_megatron_state(cfg: ModelConfig = CFG, rows: int = 128) -> dict[str, torch.Tensor]:
    """A megatron-shaped state dict with distinct random values (BERT baseline keys)."""
    h, f = cfg.hidden_size, cfg.ffn
    shapes = {"embedding.word_embeddings.weight": (rows, h),
              "embedding.position_embeddings.weight": (cfg.max_position_embeddings, h),
              "encoder.final_layernorm.weight": (h,), "encoder.final_layernorm.bias": (h,),
              "lm_head.dense.weight": (h, h), "lm_head.dense.bias": (h,), "lm_head.layer_norm.weight": (h,),
              "lm_head.layer_norm.bias": (h,), "output_layer.bias": (rows,)}
    layer = {"input_layernorm.weight": (h,), "input_layernorm.bias": (h,),
             "self_attention.linear_qkv.weight": (3 * h, h), "self_attention.linear_qkv.bias": (3 * h,),
             "self_attention.linear_proj.weight": (h, h), "self_attention.linear_proj.bias": (h,),
             "pre_mlp_layernorm.weight": (h,), "pre_mlp_layernorm.bias": (h,),
             "mlp.linear_fc1.weight": (f, h), "mlp.linear_fc1.bias": (f,),
             "mlp.linear_fc2.weight": (h, f), "mlp.linear_fc2.bias": (h,)}
    for i in range(cfg.num_layers):
        shapes.update({f"encoder.layers.{i}.{k}": v for k, v in layer.items()})
    gen = torch.Generator().manual_seed(0)
    return {k: torch.randn(s, generator=gen) for k, s in shapes.items()}


def test_qkv_split_follows_head_interleaved_layout():
    heads, head_dim, width = 3, 2, 5
    # row r of the fused tensor is labelled with (head, part, d) = divmod chain of r
    fused = torch.arange(heads * 3 * head_dim, dtype=torch.float32)[:, None].repeat(1, width)
    q, k, v = split_qkv(fused, heads)
    for part, tensor in enumerate((q, k, v)):
        expected = [n * 3 * head_dim + part * head_dim + d for n in range(heads) for d in range(head_dim)]
        assert tensor[:, 0].tolist() == expected
    assert not torch.equal(q, fused.chunk(3)[0])  # the naive split is wrong
    assert torch.equal(merge_qkv(q, k, v, heads), fused)
    bias = torch.randn(3 * heads * head_dim)
    assert torch.equal(merge_qkv(*split_qkv(bias, heads), heads), bias)


def test_state_dict_round_trip_and_mlm_keys():
    state = fake_megatron_state()
    hf = megatron_to_hf(state, CFG, with_mlm_head=True)
    assert "cls.predictions.bias" in hf and "bert.encoder.layer.1.attention.self.value.weight" in hf
    assert not hf["bert.embeddings.token_type_embeddings.weight"].any()
    back = hf_to_megatron(hf, CFG)
    assert back.keys() == state.keys() and all(torch.equal(back[k], state[k]) for k in state)
    encoder_only = megatron_to_hf(state, CFG)  # head knowingly dropped, zero pooler added
    assert "pooler.dense.weight" in encoder_only and not any(k.startswith("cls.") for k in encoder_only)


def test_transformer_engine_norm_names_are_accepted():
    state = fake_megatron_state()
    te = {k.replace("input_layernorm.", "self_attention.linear_qkv.layer_norm_")
          .replace("pre_mlp_layernorm.", "mlp.linear_fc1.layer_norm_"): v for k, v in state.items()}
    te["encoder.layers.0.self_attention.linear_qkv._extra_state"] = None
    hf_te, hf = megatron_to_hf(te, CFG), megatron_to_hf(state, CFG)
    assert all(torch.equal(hf_te[k], hf[k]) for k in hf)


@pytest.mark.parametrize("mutate, message", [
    (lambda s: s.update({"embedding.tokentype_embeddings.weight": torch.zeros(2, 8)}), "no HF MegatronBert target"),
    (lambda s: s.pop("encoder.layers.1.mlp.linear_fc2.bias"), "missing tensor"),
    (lambda s: s.update({"embedding.position_embeddings.weight": torch.zeros(20, 8)}), "config expects"),
    (lambda s: s.update({"output_layer.weight": torch.zeros(128, 8)}), "not tied"),
])
def test_megatron_to_hf_is_strict(mutate, message):
    state = fake_megatron_state()
    mutate(state)
    with pytest.raises(ConversionError, match=message):
        megatron_to_hf(state, CFG, with_mlm_head=True)


def test_hf_to_megatron_refuses_inexact_inputs():
    hf = megatron_to_hf(fake_megatron_state(), CFG, with_mlm_head=True)
    crossbert = dataclasses.replace(CFG, arch="crossbert")
    with pytest.raises(ConversionError, match="only be imported into the BERT"):
        hf_to_megatron(hf, crossbert)
    hf["bert.embeddings.token_type_embeddings.weight"][0, 0] = 1.0
    with pytest.raises(ConversionError, match="non-zero rows"):
        hf_to_megatron(hf, CFG)


def test_gather_tensor_parallel_concatenates_along_partition_dim():
    full = fake_megatron_state()
    qkv = "encoder.layers.0.self_attention.linear_qkv.weight"
    proj = "encoder.layers.0.self_attention.linear_proj.weight"
    shards = [{k: v.chunk(2, dim=0)[r] if k in (qkv, "embedding.word_embeddings.weight") else v
               for k, v in full.items()} for r in range(2)]
    for r in range(2):
        shards[r][proj] = full[proj].chunk(2, dim=1)[r]
        shards[r]["decoder.layers.0.mlp.linear_fc1.weight"] = torch.randn(4, 4)  # discarded branch
    merged = gather_tensor_parallel(shards)
    assert torch.equal(merged[qkv], full[qkv]) and torch.equal(merged[proj], full[proj])
    assert not any(k.startswith("decoder.") for k in merged)
    shards[1]["encoder.final_layernorm.weight"] = torch.zeros(8)
    with pytest.raises(ConversionError, match="differs between tensor-parallel ranks"):
        gather_tensor_parallel(shards)


def test_vocab_layout_reproduces_padded_rows():
    assert vocab_layout(384, 300, 128) == (300, 128)
    assert vocab_layout(512, 300, 128) == (300, 256)   # saved at TP=2: rows padded to 256
    assert vocab_layout(30522, 30522, 128)[0] == 30522
    with pytest.raises(ConversionError, match="exceeds"):
        vocab_layout(256, 300, 128)


def test_config_exactness_checks():
    @dataclasses.dataclass
    class FutureModelConfig(ModelConfig):
        normalization: str = "RMSNorm"

    with pytest.raises(ConversionError, match="normalization"):
        check_exportable(FutureModelConfig())
    check_exportable(CFG)
    assert mlm_head_exportable(CFG)  # megatron's LM head GELU is always erf: exact only with erf HF act
    assert not mlm_head_exportable(dataclasses.replace(CFG, bias_gelu_fusion=True))
    base = {"model_type": "megatron-bert", "hidden_act": "gelu"}
    check_importable(base)
    for key, value in [("hidden_act", "relu"), ("position_embedding_type", "relative_key"),
                       ("model_type", "bert"), ("is_decoder", True)]:
        with pytest.raises(ConversionError, match=key):
            check_importable({**base, key: value})
