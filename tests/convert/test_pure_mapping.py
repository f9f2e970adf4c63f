"""Unit tests of the pure conversion pieces: QKV layout, every classic format's key tables and config
rules, strictness, the format registry, TP gather.

No megatron model is built here (fast); end-to-end numerical parity lives in convert/test_classic.py.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from megatron_crossbert.config import ModelConfig
from megatron_crossbert.convert import ConversionError
from megatron_crossbert.convert.artifacts import TokenizerInfo
from megatron_crossbert.convert.formats import default_format, format_for_hf_config, format_names, get_format
from megatron_crossbert.convert.formats.interface import ExportContext, model_traits
from megatron_crossbert.convert.hf_config import vocab_layout
from megatron_crossbert.convert.megatron_tensors import gather_tensor_parallel, merge_qkv, split_qkv

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


CLASSIC = ["xlmr-xl", "megatron-bert"]


def ctx(pad: int = 0, rows: int = 128) -> ExportContext:
    tok = TokenizerInfo(directory=Path("tok"), size=100, pad_token_id=pad, has_mask_token=True,
                        cls_token_id=2, sep_token_id=3, mask_token_id=4)
    return ExportContext(vocab_rows=rows, tokenizer=tok)


@pytest.mark.parametrize("name", CLASSIC)
def test_state_dict_round_trip_and_mlm_keys(name):
    fmt, state = get_format(name), fake_megatron_state()
    hf = fmt.to_hf(state, CFG, ctx(), with_mlm_head=True)
    prefix = fmt.base_prefix
    assert f"{prefix}encoder.layer.1.attention.self.value.weight" in hf and fmt.has_mlm_head(hf)
    assert not hf[prefix + fmt.token_type_key].any()
    back = fmt.from_hf(hf, fmt.hf_config(CFG, ctx(), True), CFG)
    assert back.keys() == state.keys() and all(torch.equal(back[k], state[k]) for k in state)
    encoder_only = fmt.to_hf(state, CFG, ctx(), with_mlm_head=False)  # head knowingly dropped, zero pooler
    assert "pooler.dense.weight" in encoder_only and not fmt.has_mlm_head(encoder_only)


@pytest.mark.parametrize("pad", [0, 1, 5])
def test_xlmr_position_table_is_shifted_by_pad_plus_one(pad):
    fmt, state = get_format("xlmr-xl"), fake_megatron_state()
    hf = fmt.to_hf(state, CFG, ctx(pad), with_mlm_head=False)
    table, native = hf["embeddings.position_embeddings.weight"], state["embedding.position_embeddings.weight"]
    assert table.shape == (CFG.max_position_embeddings + pad + 1, CFG.hidden_size)
    assert not table[: pad + 1].any() and torch.equal(table[pad + 1:], native)
    config = fmt.hf_config(CFG, ctx(pad), False)
    assert config["max_position_embeddings"] == CFG.max_position_embeddings + pad + 1
    assert fmt.model_config_from_hf(config, CFG, 100).max_position_embeddings == CFG.max_position_embeddings
    back = fmt.from_hf(hf, config, CFG)
    assert torch.equal(back["embedding.position_embeddings.weight"], native)


@pytest.mark.parametrize("name", CLASSIC)
def test_transformer_engine_norm_names_are_accepted(name):
    fmt, state = get_format(name), fake_megatron_state()
    te = {k.replace("input_layernorm.", "self_attention.linear_qkv.layer_norm_")
          .replace("pre_mlp_layernorm.", "mlp.linear_fc1.layer_norm_"): v for k, v in state.items()}
    te["encoder.layers.0.self_attention.linear_qkv._extra_state"] = None
    hf_te, hf = fmt.to_hf(te, CFG, ctx(), False), fmt.to_hf(state, CFG, ctx(), False)
    assert all(torch.equal(hf_te[k], hf[k]) for k in hf)


@pytest.mark.parametrize("name", CLASSIC)
@pytest.mark.parametrize("mutate, message", [
    (lambda s: s.update({"embedding.tokentype_embeddings.weight": torch.zeros(2, 8)}), "no HF .* target"),
    (lambda s: s.pop("encoder.layers.1.mlp.linear_fc2.bias"), "missing tensor"),
    (lambda s: s.update({"embedding.position_embeddings.weight": torch.zeros(20, 8)}), "config expects"),
    (lambda s: s.update({"output_layer.weight": torch.zeros(128, 8)}), "not tied"),
])
def test_to_hf_is_strict(name, mutate, message):
    state = fake_megatron_state()
    mutate(state)
    with pytest.raises(ConversionError, match=message):
        get_format(name).to_hf(state, CFG, ctx(), with_mlm_head=True)


@pytest.mark.parametrize("name", CLASSIC)
def test_from_hf_refuses_inexact_inputs(name):
    fmt = get_format(name)
    hf = fmt.to_hf(fake_megatron_state(), CFG, ctx(), with_mlm_head=True)
    config = fmt.hf_config(CFG, ctx(), True)
    crossbert = dataclasses.replace(CFG, arch="crossbert")
    with pytest.raises(ConversionError, match="MLM head can only be imported"):
        fmt.from_hf(hf, config, crossbert)
    hf[fmt.base_prefix + fmt.token_type_key][0, 0] = 1.0
    with pytest.raises(ConversionError, match="non-zero rows"):
        fmt.from_hf(hf, config, CFG)
    hf[fmt.base_prefix + fmt.token_type_key].zero_()
    hf["extra.weight"] = torch.zeros(2)
    with pytest.raises(ConversionError, match="no megatron target"):
        fmt.from_hf(hf, config, CFG)


def test_registry_defaults_and_lookups():
    assert format_names()[:2] == ["xlmr-xl", "megatron-bert"]
    assert default_format(CFG).name == "xlmr-xl"  # fast (SDPA/flash) and exact comes first
    assert "sdpa" in get_format("xlmr-xl").attention_backends
    assert get_format("megatron-bert").attention_backends == ("eager",)
    assert format_for_hf_config({"model_type": "megatron-bert"}).name == "megatron-bert"
    with pytest.raises(ConversionError, match="unknown HF export format 'bert'"):
        get_format("bert")
    with pytest.raises(ConversionError, match="model_type='bert' is not importable"):
        format_for_hf_config({"model_type": "bert"})
    assert model_traits(CFG).encoder_mlm_head and not model_traits(CFG).has_reconstruction_decoder
    crossbert = model_traits(dataclasses.replace(CFG, arch="crossbert"))
    assert crossbert.has_reconstruction_decoder and not crossbert.encoder_mlm_head


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


def test_gather_tensor_parallel_gathers_geglu_fc1_half_by_half():
    """Megatron shards each GeGLU half: rank r holds [gate_r | up_r], not rows r*n/tp.. of [gate | up]."""
    fc1 = "encoder.layers.1.mlp.linear_fc1.weight"
    gate, up = torch.randn(8, 4), torch.randn(8, 4)
    shards = [{fc1: torch.cat([gate.chunk(2)[r], up.chunk(2)[r]])} for r in range(2)]
    assert torch.equal(gather_tensor_parallel(shards, gated_mlp=True)[fc1], torch.cat([gate, up]))
    assert not torch.equal(gather_tensor_parallel(shards)[fc1], torch.cat([gate, up]))  # plain GELU layout


def test_vocab_layout_reproduces_padded_rows():
    assert vocab_layout(384, 300, 128) == (300, 128)
    assert vocab_layout(512, 300, 128) == (300, 256)   # saved at TP=2: rows padded to 256
    assert vocab_layout(30522, 30522, 128)[0] == 30522
    with pytest.raises(ConversionError, match="exceeds"):
        vocab_layout(256, 300, 128)


@pytest.mark.parametrize("name", CLASSIC)
def test_config_exactness_checks(name):
    @dataclasses.dataclass
    class FutureModelConfig(ModelConfig):
        normalization: str = "RMSNorm"

    fmt = get_format(name)
    with pytest.raises(ConversionError, match="normalization"):
        fmt.check_exportable(FutureModelConfig())
    with pytest.raises(ConversionError, match="no HF export format represents"):
        default_format(FutureModelConfig())
    fmt.check_exportable(CFG)
    tanh = dataclasses.replace(CFG, bias_gelu_fusion=True)
    assert fmt.mlm_head_exact(CFG)
    # megatron's LM head GELU is always erf: MegatronBert's head applies hidden_act, XLM-R's always erf
    assert fmt.mlm_head_exact(tanh) == (name == "xlmr-xl")
    base = fmt.hf_config(CFG, ctx(), False)
    fmt.check_importable(base)
    for key, value in [("hidden_act", "relu"), ("position_embedding_type", "relative_key"),
                       ("model_type", "bert"), ("is_decoder", True)]:
        with pytest.raises(ConversionError, match=key):
            fmt.check_importable({**base, key: value})


@pytest.mark.parametrize("name", CLASSIC)
def test_classic_key_tables_cover_every_native_tensor(name):
    from megatron_crossbert.convert.formats import classic

    fmt = get_format(name)
    assert set(fmt.global_keys) == set(classic.NATIVE_GLOBAL)
    assert set(fmt.layer_keys) == set(classic.NATIVE_LAYER) and set(fmt.qkv_keys) == set(classic.NATIVE_QKV)
    assert set(fmt.mlm_head_keys) == set(classic.NATIVE_MLM_HEAD)
    hf_names = [*fmt.global_keys.values(), *fmt.layer_keys.values(), *sum(fmt.qkv_keys.values(), ())]
    assert len(hf_names) == len(set(hf_names))  # no two native tensors land on one HF key
