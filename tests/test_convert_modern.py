"""HF export of the modern encoder (format ``modernbert``) beyond the shared contract (test_convert_contract.py).

Modern CrossBERT exports its encoder as ``ModernBertModel``, the modern MLM baseline as
``ModernBertForMaskedLM``; here: the config.json fields only ModernBert has (layer types, RoPE theta,
norm eps, special ids), the model card, and which tensors an export holds. Tiny randomised checkpoints.
"""

from __future__ import annotations

import pytest
from test_convert_support import (
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

from megatron_crossbert.convert import export_to_hf

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
