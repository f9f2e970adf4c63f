"""HF export/import end to end for the modern encoder (format ``modernbert``), on tiny randomised checkpoints.

Through ``export_to_hf`` / ``import_from_hf`` (the same path as ``crossbert-convert-hf``): modern CrossBERT
exports its encoder as ``ModernBertModel``, the modern MLM baseline as ``ModernBertForMaskedLM``. Stock
``AutoModel`` (no remote code) equals ``encode`` within 1e-5 under sdpa and eager on right- and
left-padded batches, ``SentenceTransformer`` equals masked mean pooling, the MLM logits match, the card
names the class and its backends, and native -> HF -> native is bit-identical.
"""

from __future__ import annotations

import pytest
import torch
from test_convert_support import (
    LENGTHS,
    TOL,
    encoder_keys,
    hf_features,
    left_padded,
    left_padded_diff,
    load_native,
    make_checkpoint,
    make_tokenizer,
    max_diff,
    native_features,
    padded_batch,
    read_json,
    read_safetensors,
    sentence_transformers_check,
    tiny_run_config,
)

from megatron_crossbert import platform
from megatron_crossbert.config import ParallelConfig
from megatron_crossbert.convert import export_to_hf, import_from_hf

MODERN = dict(encoder="modern", rotary_base=40000.0, layernorm_epsilon=1e-6)


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("convert_modern")


@pytest.fixture(scope="module")
def exported(work):
    """{arch: (checkpoint, native state, default export dir)} for modern CrossBERT and the MLM baseline."""
    tok = make_tokenizer(work / "tokenizer")
    out = {}
    for arch in ("crossbert", "mlm"):
        state = make_checkpoint(work / f"ckpt_{arch}", tiny_run_config(arch, tokenizer=str(tok), **MODERN))
        out[arch] = (work / f"ckpt_{arch}", state, export_to_hf(work / f"ckpt_{arch}", work / f"hf_{arch}"))
    return out


@pytest.mark.parametrize("arch", ["crossbert", "mlm"])
@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_automodel_matches_native_encoder_right_and_left_padded(exported, arch, impl):
    checkpoint, _, out = exported[arch]
    ids, mask = padded_batch(125, LENGTHS, seed=3)
    native = native_features(checkpoint, ids, mask)
    cls, got = hf_features(out, impl, ids, mask)
    assert cls == "ModernBertModel"
    right = max_diff(got, native, mask)
    left_ids, left_mask = left_padded(ids, LENGTHS)
    _, got_left = hf_features(out, impl, left_ids, left_mask)
    left = left_padded_diff(got_left, native, LENGTHS)
    print(f"modernbert {arch}/{impl} max abs diff: right-padded {right:.3g}, left-padded {left:.3g}")
    assert right <= TOL and left <= TOL


@pytest.mark.parametrize("arch", ["crossbert", "mlm"])
def test_sentence_transformers_equals_mean_pooled_native(exported, arch):
    checkpoint, _, out = exported[arch]
    diff = sentence_transformers_check(out, checkpoint, "ModernBertModel")
    print(f"modernbert {arch} SentenceTransformer vs mean-pooled native max abs diff: {diff:.3g}")
    assert diff <= TOL


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
    tensors = read_safetensors(exported["crossbert"][2])
    assert not any(k.startswith(("decoder", "head.", "model.")) for k in tensors)
    assert "layers.0.attn_norm.weight" not in tensors and "layers.1.attn_norm.weight" in tensors


def test_mlm_baseline_logits_match_modernbert_for_masked_lm(exported):
    from transformers import AutoModelForMaskedLM

    checkpoint, _, out = exported["mlm"]
    ids, mask = padded_batch(125, LENGTHS, seed=2)
    platform.initialize(ParallelConfig(), 0)
    with torch.no_grad():
        native = load_native(checkpoint)(ids, mask)
        mlm = AutoModelForMaskedLM.from_pretrained(out, use_safetensors=True, attn_implementation="sdpa").eval()
        assert type(mlm).__name__ == "ModernBertForMaskedLM"
        logits = mlm(input_ids=ids, attention_mask=mask).logits
    diff = max_diff(logits, native, mask)
    print(f"modernbert MLM logits max abs diff: {diff:.3g}")
    assert diff <= TOL


@pytest.mark.parametrize("arch", ["crossbert", "mlm"])
def test_round_trip_is_bit_identical(exported, work, arch):
    checkpoint, state, out = exported[arch]
    ckpt_dir = import_from_hf(out, work / f"back_{arch}")
    assert read_json(ckpt_dir / "run_config.json")["model"]["encoder"] == "modern"
    platform.initialize(ParallelConfig(), 0)
    back = load_native(ckpt_dir).state_dict()
    keys = encoder_keys(state) if arch == "crossbert" else [k for k in state if not k.endswith("_extra_state")]
    assert keys and all(torch.equal(back[k], state[k]) for k in keys)
    again = read_safetensors(export_to_hf(ckpt_dir, work / f"hf_again_{arch}"))
    first = read_safetensors(out)
    assert first.keys() == again.keys() and all(torch.equal(first[k], again[k]) for k in first)
