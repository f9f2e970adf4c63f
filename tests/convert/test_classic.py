"""HF export/import of the classic formats beyond the shared contract (convert/test_contract.py).

What only the classic targets have: the default export's files, config and model card (XLM-R's
position table shifted by ``pad + 1`` rows, token types, the pooler), the tanh-GELU variant and which
MLM head stays exact under it, ``pipeline("fill-mask")``, and importing an HF model we did not write.
Tiny randomised checkpoints, CPU, fp32.
"""

from __future__ import annotations

import pytest
import torch

from megatron_crossbert.arch import get_encoder
from megatron_crossbert.convert import export_to_hf, import_from_hf
from megatron_crossbert.convert.formats import get_format
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

FORMATS = list(get_encoder("classic").hf_formats)


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("convert")


@pytest.fixture(scope="module")
def crossbert(work, word_tokenizer):
    """(checkpoint root, native state, {format: export dir}) of a randomised CrossBERT whose decoder is
    half the encoder's width (the export drops it whatever its width)."""
    run_cfg = tiny_run_config("crossbert", tokenizer=str(word_tokenizer), decoder_hidden_size=16)
    state = make_checkpoint(work / "ckpt_crossbert", run_cfg)
    outs = {"default": export_to_hf(work / "ckpt_crossbert", work / "hf_crossbert")}
    outs.update({name: export_to_hf(work / "ckpt_crossbert", work / f"hf_crossbert_{name}", format_name=name)
                 for name in FORMATS})
    return work / "ckpt_crossbert", state, outs


def test_default_export_files_config_card_and_safe_formats(crossbert):
    checkpoint, state, outs = crossbert
    out = outs["default"]
    assert state["lm_head.dense.weight"].shape == (32, 16)          # the narrow decoder's head: d=16 -> h=32
    ids, mask = padded_batch(125, LENGTHS)
    assert max_diff(hf_features(out, "sdpa", ids, mask)[1], native_features(checkpoint, ids, mask), mask) <= TOL
    names = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "modules.json",
            "1_Pooling/config.json", "sentence_bert_config.json", "README.md"} <= names
    assert not [n for n in names if n.endswith((".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle"))]
    cfg = read_json(out / "config.json")
    assert cfg["architectures"] == ["XLMRobertaXLModel"] and cfg["model_type"] == "xlm-roberta-xl"
    assert (cfg["hidden_act"], cfg["layer_norm_eps"], cfg["vocab_size"]) == ("gelu", 1e-5, 384)
    # RoBERTa positions start at pad + 1 = 1: one zero row before native position 0
    assert (cfg["type_vocab_size"], cfg["max_position_embeddings"], cfg["pad_token_id"]) == (2, 65, 0)
    tensors = read_safetensors(out)
    assert not any(k.startswith(("decoder", "mask_embedding", "lm_head", "roberta.")) for k in tensors)
    assert not tensors["embeddings.token_type_embeddings.weight"].any()
    assert not tensors["embeddings.position_embeddings.weight"][0].any()
    card = (out / "README.md").read_text()
    assert "`XLMRobertaXLModel`" in card and "`sdpa`, `eager`, `flash_attention_2`" in card
    assert "decoder_num_layers: 1" in card and "Left and right padding are both exact" in card
    legacy = (outs["megatron-bert"] / "README.md").read_text()
    assert "`MegatronBertModel`" in legacy and "Attention backends (`attn_implementation`): `eager`." in legacy
    assert read_json(outs["megatron-bert"] / "config.json")["max_position_embeddings"] == 64
    assert read_json(out / "tokenizer_config.json")["model_max_length"] == 64  # capped at the position table
    assert read_json(out / "sentence_bert_config.json")["max_seq_length"] == 64


@pytest.mark.slow
def test_tanh_gelu_run_exports_gelu_pytorch_tanh(work, word_tokenizer):
    run_cfg = tiny_run_config("crossbert", tokenizer=str(word_tokenizer), bias_gelu_fusion=True,
                              layernorm_epsilon=1e-6)
    make_checkpoint(work / "ckpt_tanh", run_cfg)
    out = export_to_hf(work / "ckpt_tanh", work / "hf_tanh")
    cfg = read_json(out / "config.json")
    assert (cfg["hidden_act"], cfg["layer_norm_eps"]) == ("gelu_pytorch_tanh", 1e-6)
    ids, mask = padded_batch(125, LENGTHS, seed=1)
    native = native_features(work / "ckpt_tanh", ids, mask)
    _, got = hf_features(out, "sdpa", ids, mask)
    diff = max_diff(got, native, mask)
    print(f"tanh-GELU export max abs diff: {diff:.3g}")
    assert diff <= TOL


@pytest.fixture(scope="module")
def bert(work, word_tokenizer):
    run_cfg = tiny_run_config("bert", tokenizer=str(word_tokenizer))
    return work / "ckpt_bert", make_checkpoint(work / "ckpt_bert", run_cfg)


def test_bert_fill_mask_pipeline_and_tanh_head_choice(work, bert, word_tokenizer):
    from transformers import pipeline

    fill = pipeline("fill-mask", model=str(export_to_hf(bert[0], work / "hf_fill")),
                    model_kwargs={"use_safetensors": True})
    preds = fill("w1 w2 [MASK] w4")
    assert len(preds) == 5 and all("token_str" in p for p in preds)
    # tanh encoder GELU: XLM-R's head (erf, like megatron's) stays exact; MegatronBert's would not
    run_cfg = tiny_run_config("bert", tokenizer=str(word_tokenizer), bias_gelu_fusion=True)
    make_checkpoint(work / "ckpt_bert_tanh", run_cfg)
    xlmr = export_to_hf(work / "ckpt_bert_tanh", work / "hf_bert_tanh")
    legacy = export_to_hf(work / "ckpt_bert_tanh", work / "hf_bert_tanh_mb", format_name="megatron-bert")
    assert read_json(xlmr / "config.json")["architectures"] == ["XLMRobertaXLForMaskedLM"]
    assert read_json(legacy / "config.json")["architectures"] == ["MegatronBertModel"]
    assert "The MLM head is omitted" in (legacy / "README.md").read_text()


def _randomise_foreign(hf):
    with torch.no_grad():
        hf.embeddings.token_type_embeddings.weight.zero_()
        for name, param in hf.named_parameters():
            if name.endswith("bias") or "ln." in name.lower() or "layernorm" in name.lower():
                param.add_(0.1 * torch.randn_like(param))


@pytest.mark.parametrize("name", FORMATS)
def test_import_foreign_model(work, word_tokenizer, name):
    """An HF model we did not write (odd vocab, no run config) imports and matches."""
    import transformers
    from transformers import AutoTokenizer

    fmt = get_format(name)
    config_cls = getattr(transformers, fmt.base_class.replace("Model", "Config"))
    config = config_cls(vocab_size=130, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=48, max_position_embeddings=40 + fmt.position_offset(0),
                        layer_norm_eps=1e-5, pad_token_id=0)
    hf = getattr(transformers, fmt.base_class)(config).eval()
    _randomise_foreign(hf)
    hf.save_pretrained(work / f"foreign_{name}")
    AutoTokenizer.from_pretrained(word_tokenizer).save_pretrained(work / f"foreign_{name}")
    ckpt_dir = import_from_hf(work / f"foreign_{name}", work / f"foreign_native_{name}")
    cfg = read_json(ckpt_dir / "run_config.json")["model"]
    assert (cfg["arch"], cfg["vocab_size"], cfg["ffn_hidden_size"]) == ("crossbert", 125, 48)
    assert cfg["max_position_embeddings"] == 40  # XLM-R: the pad + 1 rows before position 0 are dropped
    ids, mask = padded_batch(125, [17, 9, 3], seed=4)
    native = native_features(ckpt_dir, ids, mask)
    with torch.no_grad():
        expected = hf(input_ids=ids, attention_mask=mask).last_hidden_state
    assert max_diff(native, expected, mask) <= TOL
