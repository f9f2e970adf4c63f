"""HF export of the modern encoder (format ``modernbert``) beyond the shared contract (convert/test_contract.py).

Modern CrossBERT exports its encoder as ``ModernBertModel``, the modern MLM baseline as
``ModernBertForMaskedLM``; here: the config.json fields only ModernBert has (layer types, RoPE theta,
norm eps, special ids), the model card, and which tensors an export holds. Tiny randomised checkpoints.
"""

from __future__ import annotations

import json

import pytest

from megatron_crossbert.convert import export_to_hf
from tests.support.conversion import (
    LENGTHS,
    TOL,
    hf_features,
    make_checkpoint,
    max_diff,
    native_features,
    padded_batch,
    read_json,
    read_safetensors,
    tiny_run_config,
)

MODERN = dict(encoder="modern", rotary_base=40000.0, layernorm_epsilon=1e-6)


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("convert_modern")


@pytest.fixture(scope="module")
def exported(work, word_tokenizer):
    """{arch: (checkpoint, native state, default export dir)} for modern CrossBERT and the MLM baseline."""
    tok = word_tokenizer
    out = {}
    for arch in ("crossbert", "mlm"):
        narrow = {"decoder_hidden_size": 16} if arch == "crossbert" else {}   # a decoder at h/2, dropped on export
        state = make_checkpoint(work / f"ckpt_{arch}", tiny_run_config(arch, tokenizer=str(tok), **MODERN, **narrow))
        out[arch] = (work / f"ckpt_{arch}", state, export_to_hf(work / f"ckpt_{arch}", work / f"hf_{arch}"))
    return out


def test_config_and_model_card_state_architecture_and_backends(exported):
    for arch, hf_class in (("crossbert", "ModernBertModel"), ("mlm", "ModernBertForMaskedLM")):
        out = exported[arch][2]
        cfg = read_json(out / "config.json")
        assert (cfg["architectures"], cfg["model_type"], cfg["vocab_size"]) == ([hf_class], "modernbert", 384)
        assert cfg["layer_types"] == ["full_attention"] * 2 and cfg["norm_eps"] == 1e-6
        assert cfg["rope_parameters"]["full_attention"]["rope_theta"] == 40000.0
        assert (cfg["pad_token_id"], cfg["cls_token_id"], cfg["sep_token_id"], cfg["mask_token_id"]) == (0, 2, 3, 4)
        card = (out / "README.md").read_text()
        assert f"`{hf_class}`" in card and "`sdpa`, `eager`, `flash_attention_2`" in card
        assert "RoPE (theta 40000)" in card and "GeGLU" in card
    checkpoint, state, out = exported["crossbert"]
    tensors = read_safetensors(out)
    assert not any(k.startswith(("decoder", "head.", "model.")) for k in tensors)
    assert state["decoder.layers.0.cross_attention.linear_kv.weight"].shape == (32, 32)   # h=32 -> 2d
    ids, mask = padded_batch(125, LENGTHS)
    assert max_diff(hf_features(out, "sdpa", ids, mask)[1], native_features(checkpoint, ids, mask), mask) <= TOL
    assert "layers.0.attn_norm.weight" not in tensors and "layers.1.attn_norm.weight" in tensors


WINDOWED = dict(MODERN, num_layers=3, local_attention=4, global_attn_every_n_layers=2, local_rotary_base=10000.0,
                rotary_base=160000.0)
"""Layers 0 and 2 global (base 160000), layer 1 local with a 4-token window (base 10000)."""


@pytest.mark.slow
def test_local_global_export_equals_stock_modernbert_and_round_trips(work, word_tokenizer, tmp_path):
    """Inputs of 20 tokens (> 2 windows of 4), right- and left-padded, sdpa and eager, <= 1e-5 fp32;
    the windows matter (an all-global HF model differs); the import gives the same windows back."""
    from tests.support.conversion import (
        TOL, LENGTHS, hf_features, left_padded, left_padded_diff, max_diff, native_features, padded_batch,
    )

    from megatron_crossbert.convert import import_from_hf

    ckpt = work / "ckpt_windowed"
    make_checkpoint(ckpt, tiny_run_config("crossbert", tokenizer=str(word_tokenizer), **WINDOWED))
    out = export_to_hf(ckpt, work / "hf_windowed")
    cfg = read_json(out / "config.json")
    assert cfg["layer_types"] == ["full_attention", "sliding_attention", "full_attention"]
    assert (cfg["local_attention"], cfg["global_attn_every_n_layers"]) == (4, 2)
    assert cfg["rope_parameters"]["sliding_attention"]["rope_theta"] == 10000.0
    assert "4-token window" in (out / "README.md").read_text()
    ids, mask = padded_batch(300, LENGTHS)
    native = native_features(ckpt, ids, mask)
    left_ids, left_mask = left_padded(ids, LENGTHS)
    for impl in ("sdpa", "eager"):
        name, got = hf_features(out, impl, ids, mask)
        assert name == "ModernBertModel" and max_diff(got, native, mask) <= TOL, impl
        assert left_padded_diff(hf_features(out, impl, left_ids, left_mask)[1], native, LENGTHS) <= TOL, impl
    flat = dict(cfg, layer_types=["full_attention"] * 3, global_attn_every_n_layers=1)
    (tmp_path / "global").mkdir()
    for item in out.iterdir():
        (tmp_path / "global" / item.name).symlink_to(item)
    (tmp_path / "global" / "config.json").unlink()
    (tmp_path / "global" / "config.json").write_text(json.dumps(flat))
    assert max_diff(hf_features(tmp_path / "global", "sdpa", ids, mask)[1], native, mask) > 1e-3
    from tests.support.training import read_run_config

    saved = read_run_config(import_from_hf(out, tmp_path / "back")).model
    windows = ("local_attention", "global_attn_every_n_layers", "rotary_base", "local_rotary_base")
    assert tuple(getattr(saved, k) for k in windows) == (4, 2, 160000.0, 10000.0)


def test_irregular_layer_types_are_refused_on_import():
    from megatron_crossbert.convert.formats.modernbert import window_fields, windows_from_hf
    from tests.support.conversion import tiny_run_config as cfg_of

    model = cfg_of("crossbert", **WINDOWED).model
    fields = {"num_hidden_layers": 3, **window_fields(model)}
    assert windows_from_hf(fields) == {"local_attention": 4, "global_attn_every_n_layers": 2,
                                       "rotary_base": 160000.0, "local_rotary_base": 10000.0}
    with pytest.raises(ValueError, match="global-every-n"):
        windows_from_hf({**fields, "layer_types": ["sliding_attention", "full_attention", "sliding_attention"]})
