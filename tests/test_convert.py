"""HF export/import end to end on tiny randomised checkpoints (CPU, fp32), for every classic format.

Checks the contract of docs/architecture.md: stock ``AutoModel`` (no remote code) equals ``encode``
within 1e-5 at every attention backend the class supports (right-padded batches, and left-padded ones
where the format's positions allow it), ``SentenceTransformer`` equals masked mean pooling,
native -> HF -> native is bit-identical, the BERT baseline's MLM logits match through the format's
``...ForMaskedLM`` and ``pipeline("fill-mask")``, and only safetensors are written.
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
from megatron_crossbert.convert.formats import get_format

FORMATS = ["xlmr-xl", "megatron-bert"]
BACKENDS = [("xlmr-xl", "sdpa"), ("xlmr-xl", "eager"), ("megatron-bert", "eager")]


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("convert")


@pytest.fixture(scope="module")
def tokenizer_dir(work):
    return make_tokenizer(work / "tokenizer")


@pytest.fixture(scope="module")
def crossbert(work, tokenizer_dir):
    """(checkpoint root, native state, {format: export dir}) of a randomised CrossBERT."""
    run_cfg = tiny_run_config("crossbert", tokenizer=str(tokenizer_dir))
    state = make_checkpoint(work / "ckpt_crossbert", run_cfg)
    outs = {"default": export_to_hf(work / "ckpt_crossbert", work / "hf_crossbert")}
    outs.update({name: export_to_hf(work / "ckpt_crossbert", work / f"hf_crossbert_{name}", format_name=name)
                 for name in FORMATS})
    return work / "ckpt_crossbert", state, outs


@pytest.mark.parametrize("name, impl", BACKENDS)
def test_automodel_matches_native_encoder_on_right_padded_batch(crossbert, name, impl):
    checkpoint, _, outs = crossbert
    ids, mask = padded_batch(125, LENGTHS)
    native = native_features(checkpoint, ids, mask)
    cls, got = hf_features(outs[name], impl, ids, mask)
    assert cls == get_format(name).base_class
    diff = max_diff(got, native, mask)
    print(f"{name}/{impl} AutoModel vs CrossBertModel.encode max abs diff: {diff:.3g}")
    assert diff <= TOL


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_left_padded_batch_matches_native_rows(crossbert, impl):
    """XLM-R positions count from each row's first real token, so left padding is exact too."""
    checkpoint, _, outs = crossbert
    assert get_format("xlmr-xl").left_padding and not get_format("megatron-bert").left_padding
    ids, mask = padded_batch(125, LENGTHS, seed=5)
    native = native_features(checkpoint, ids, mask)
    left_ids, left_mask = left_padded(ids, LENGTHS)
    _, got = hf_features(outs["xlmr-xl"], impl, left_ids, left_mask)
    diff = left_padded_diff(got, native, LENGTHS)
    print(f"xlmr-xl/{impl} left-padded vs native max abs diff: {diff:.3g}")
    assert diff <= TOL


@pytest.mark.parametrize("name", FORMATS)
def test_sentence_transformers_equals_mean_pooled_native(crossbert, name):
    checkpoint, _, outs = crossbert
    diff = sentence_transformers_check(outs[name], checkpoint, get_format(name).base_class)
    print(f"{name} SentenceTransformer vs mean-pooled native max abs diff: {diff:.3g}")
    assert diff <= TOL


def test_default_export_files_config_card_and_safe_formats(crossbert):
    _, _, outs = crossbert
    out = outs["default"]
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


@pytest.mark.parametrize("name", FORMATS)
def test_round_trip_is_bit_identical(crossbert, work, name):
    checkpoint, state, outs = crossbert
    ckpt_dir = import_from_hf(outs[name], work / f"reimported_{name}")
    platform.initialize(ParallelConfig(), 0)
    back = load_native(ckpt_dir).state_dict()
    encoder = encoder_keys(state)
    assert encoder and all(torch.equal(back[k], state[k]) for k in encoder)
    assert any(k.startswith("decoder.") for k in back)  # decoder rebuilt (fresh init)
    again = export_to_hf(ckpt_dir, work / f"hf_again_{name}", format_name=name)  # reuses the TP=1 state
    first, second = read_safetensors(outs[name]), read_safetensors(again)
    assert first.keys() == second.keys() and all(torch.equal(first[k], second[k]) for k in first)


def test_tanh_gelu_run_exports_gelu_pytorch_tanh(work, tokenizer_dir):
    run_cfg = tiny_run_config("crossbert", tokenizer=str(tokenizer_dir), bias_gelu_fusion=True,
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
def bert(work, tokenizer_dir):
    run_cfg = tiny_run_config("bert", tokenizer=str(tokenizer_dir))
    return work / "ckpt_bert", make_checkpoint(work / "ckpt_bert", run_cfg)


@pytest.mark.parametrize("name", FORMATS)
def test_bert_baseline_mlm_logits_and_head_round_trip(work, bert, name):
    from transformers import AutoModelForMaskedLM

    checkpoint, state = bert
    fmt = get_format(name)
    out = export_to_hf(checkpoint, work / f"hf_bert_{name}", format_name=name)
    assert read_json(out / "config.json")["architectures"] == [fmt.mlm_class]
    ids, mask = padded_batch(125, LENGTHS, seed=2)
    platform.initialize(ParallelConfig(), 0)
    with torch.no_grad():
        native = load_native(checkpoint)(ids, mask)[0]
        mlm = AutoModelForMaskedLM.from_pretrained(out, use_safetensors=True).eval()
        assert type(mlm).__name__ == fmt.mlm_class
        logits = mlm(input_ids=ids, attention_mask=mask).logits
    _, base = hf_features(out, fmt.attention_backends[0], ids, mask)
    diff = max_diff(logits, native, mask)
    print(f"{name} BERT MLM logits max abs diff: {diff:.3g}")
    assert diff <= TOL and base.shape == (4, 20, 32)
    back = load_native(import_from_hf(out, work / f"bert_back_{name}")).state_dict()
    keys = [k for k in state if not k.endswith("_extra_state")]
    assert all(torch.equal(back[k], state[k]) for k in keys)


def test_bert_fill_mask_pipeline_and_tanh_head_choice(work, bert, tokenizer_dir):
    from transformers import pipeline

    fill = pipeline("fill-mask", model=str(export_to_hf(bert[0], work / "hf_fill")),
                    model_kwargs={"use_safetensors": True})
    preds = fill("w1 w2 [MASK] w4")
    assert len(preds) == 5 and all("token_str" in p for p in preds)
    # tanh encoder GELU: XLM-R's head (erf, like megatron's) stays exact; MegatronBert's would not
    run_cfg = tiny_run_config("bert", tokenizer=str(tokenizer_dir), bias_gelu_fusion=True)
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
def test_import_foreign_model(work, tokenizer_dir, name):
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
    AutoTokenizer.from_pretrained(tokenizer_dir).save_pretrained(work / f"foreign_{name}")
    ckpt_dir = import_from_hf(work / f"foreign_{name}", work / f"foreign_native_{name}")
    cfg = read_json(ckpt_dir / "run_config.json")["model"]
    assert (cfg["arch"], cfg["vocab_size"], cfg["ffn_hidden_size"]) == ("crossbert", 125, 48)
    assert cfg["max_position_embeddings"] == 40  # XLM-R: the pad + 1 rows before position 0 are dropped
    ids, mask = padded_batch(125, [17, 9, 3], seed=4)
    native = native_features(ckpt_dir, ids, mask)
    with torch.no_grad():
        expected = hf(input_ids=ids, attention_mask=mask).last_hidden_state
    assert max_diff(native, expected, mask) <= TOL
