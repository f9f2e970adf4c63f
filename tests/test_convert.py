"""HF export/import end to end on tiny randomised checkpoints (CPU, fp32).

Checks the contract of docs/architecture.md: ``AutoModel`` equals ``encode`` (<= 1e-4, padded batch),
``SentenceTransformer`` equals masked mean pooling, native -> HF -> native is bit-identical, the BERT
baseline's MLM logits match through ``pipeline("fill-mask")``, and only safetensors are written.
"""

from __future__ import annotations

import pytest
import torch
from test_convert_support import (
    load_native,
    make_checkpoint,
    make_tokenizer,
    padded_batch,
    read_json,
    read_safetensors,
    tiny_run_config,
)

from megatron_crossbert import platform
from megatron_crossbert.config import ParallelConfig
from megatron_crossbert.convert import export_to_hf, import_from_hf

TOL = 1e-4
LENGTHS = [20, 13, 5, 20]


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("convert")


@pytest.fixture(scope="module")
def tokenizer_dir(work):
    return make_tokenizer(work / "tokenizer")


@pytest.fixture(scope="module")
def crossbert(work, tokenizer_dir):
    """(checkpoint root, native state, export dir) of a randomised CrossBERT."""
    run_cfg = tiny_run_config("crossbert", tokenizer=str(tokenizer_dir))
    state = make_checkpoint(work / "ckpt_crossbert", run_cfg)
    out = export_to_hf(work / "ckpt_crossbert", work / "hf_crossbert")
    return work / "ckpt_crossbert", state, out


def _native_features(checkpoint, ids, mask):
    platform.initialize(ParallelConfig(), 0)
    from megatron_crossbert.models import model_encode

    with torch.no_grad():
        return model_encode(load_native(checkpoint), ids, mask)


def _max_diff(a, b, mask):
    return (a - b)[mask.bool()].abs().max().item()


def test_automodel_matches_native_encoder_on_padded_batch(crossbert):
    from transformers import AutoModel

    checkpoint, _, out = crossbert
    ids, mask = padded_batch(125, LENGTHS)
    native = _native_features(checkpoint, ids, mask)
    hf = AutoModel.from_pretrained(out, use_safetensors=True).eval()
    assert type(hf).__name__ == "MegatronBertModel"
    with torch.no_grad():
        got = hf(input_ids=ids, attention_mask=mask).last_hidden_state
    diff = _max_diff(got, native, mask)
    print(f"AutoModel vs CrossBertModel.encode max abs diff: {diff:.3g}")
    assert diff <= TOL


def test_sentence_transformers_equals_mean_pooled_native(crossbert):
    from sentence_transformers import SentenceTransformer
    from transformers import AutoTokenizer

    checkpoint, _, out = crossbert
    texts = ["w1 w2 w3 w4 w5 w6", "w7 w8", "w9 w10 w11 w12 w13 w14 w15 w16 w17"]
    batch = AutoTokenizer.from_pretrained(out).__call__(texts, padding=True, return_tensors="pt")
    assert batch["input_ids"][1].tolist()[:4] == [2, 12, 13, 3]  # [CLS] w7 w8 [SEP]: real ids, not [UNK]
    features = _native_features(checkpoint, batch["input_ids"], batch["attention_mask"])
    keep = batch["attention_mask"].unsqueeze(-1).float()
    pooled = (features * keep).sum(1) / keep.sum(1)
    st = SentenceTransformer(str(out), device="cpu", model_kwargs={"use_safetensors": True})
    got = torch.as_tensor(st.encode(texts, convert_to_numpy=True))
    diff = (got - pooled).abs().max().item()
    print(f"SentenceTransformer vs mean-pooled native max abs diff: {diff:.3g}")
    assert diff <= TOL


def test_export_files_config_and_safe_formats(crossbert):
    _, _, out = crossbert
    names = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "modules.json",
            "1_Pooling/config.json", "sentence_bert_config.json", "README.md"} <= names
    assert not [n for n in names if n.endswith((".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle"))]
    cfg = read_json(out / "config.json")
    assert cfg["architectures"] == ["MegatronBertModel"] and cfg["model_type"] == "megatron-bert"
    assert (cfg["hidden_act"], cfg["layer_norm_eps"], cfg["vocab_size"]) == ("gelu", 1e-5, 384)
    assert (cfg["type_vocab_size"], cfg["max_position_embeddings"], cfg["pad_token_id"]) == (2, 64, 0)
    tensors = read_safetensors(out)
    assert not any(k.startswith(("decoder", "mask_embedding", "cls.", "lm_head")) for k in tensors)
    assert not tensors["embeddings.token_type_embeddings.weight"].any()
    assert "decoder_num_layers: 1" in (out / "README.md").read_text()
    assert read_json(out / "tokenizer_config.json")["model_max_length"] == 64  # capped at the position table
    assert read_json(out / "sentence_bert_config.json")["max_seq_length"] == 64


def test_round_trip_is_bit_identical(crossbert, work):
    checkpoint, state, out = crossbert
    ckpt_dir = import_from_hf(out, work / "reimported")
    platform.initialize(ParallelConfig(), 0)
    back = load_native(ckpt_dir).state_dict()
    encoder = [k for k in state if k.startswith(("embedding.", "encoder.")) and not k.endswith("_extra_state")]
    assert encoder and all(torch.equal(back[k], state[k]) for k in encoder)
    assert any(k.startswith("decoder.") for k in back)  # decoder rebuilt (fresh init)
    again = export_to_hf(ckpt_dir, work / "hf_again")  # reuses the caller's TP=1 parallel state
    first, second = read_safetensors(out), read_safetensors(again)
    assert first.keys() == second.keys() and all(torch.equal(first[k], second[k]) for k in first)


def test_tanh_gelu_run_exports_gelu_pytorch_tanh(work, tokenizer_dir):
    from transformers import AutoModel

    run_cfg = tiny_run_config("crossbert", tokenizer=str(tokenizer_dir), bias_gelu_fusion=True,
                              layernorm_epsilon=1e-6)
    make_checkpoint(work / "ckpt_tanh", run_cfg)
    out = export_to_hf(work / "ckpt_tanh", work / "hf_tanh")
    cfg = read_json(out / "config.json")
    assert (cfg["hidden_act"], cfg["layer_norm_eps"]) == ("gelu_pytorch_tanh", 1e-6)
    ids, mask = padded_batch(125, LENGTHS, seed=1)
    native = _native_features(work / "ckpt_tanh", ids, mask)
    with torch.no_grad():
        got = AutoModel.from_pretrained(out, use_safetensors=True)(input_ids=ids, attention_mask=mask)
    diff = _max_diff(got.last_hidden_state, native, mask)
    print(f"tanh-GELU export max abs diff: {diff:.3g}")
    assert diff <= TOL


def test_bert_baseline_fill_mask_and_mlm_logits(work, tokenizer_dir):
    from transformers import AutoModel, AutoModelForMaskedLM, pipeline

    run_cfg = tiny_run_config("bert", tokenizer=str(tokenizer_dir))
    state = make_checkpoint(work / "ckpt_bert", run_cfg)
    out = export_to_hf(work / "ckpt_bert", work / "hf_bert")
    assert read_json(out / "config.json")["architectures"] == ["MegatronBertForMaskedLM"]
    ids, mask = padded_batch(125, LENGTHS, seed=2)
    platform.initialize(ParallelConfig(), 0)
    with torch.no_grad():
        native = load_native(work / "ckpt_bert")(ids, mask)[0]
        mlm = AutoModelForMaskedLM.from_pretrained(out, use_safetensors=True).eval()
        logits = mlm(input_ids=ids, attention_mask=mask).logits
        base = AutoModel.from_pretrained(out, use_safetensors=True)(input_ids=ids, attention_mask=mask)
    diff = _max_diff(logits, native, mask)
    print(f"BERT MLM logits max abs diff: {diff:.3g}")
    assert diff <= TOL and base.last_hidden_state.shape == (4, 20, 32)
    fill = pipeline("fill-mask", model=str(out), model_kwargs={"use_safetensors": True})
    preds = fill("w1 w2 [MASK] w4")
    assert len(preds) == 5 and all("token_str" in p for p in preds)
    back = load_native(import_from_hf(out, work / "bert_back")).state_dict()
    heads = [k for k in state if k.startswith(("lm_head.", "output_layer.")) and not k.endswith("_extra_state")]
    assert heads and all(torch.equal(back[k], state[k]) for k in heads)


def test_import_foreign_megatron_bert(work, tokenizer_dir):
    """An HF MegatronBertModel we did not write (odd vocab, no run config) imports and matches."""
    from transformers import AutoTokenizer, MegatronBertConfig, MegatronBertModel

    config = MegatronBertConfig(vocab_size=130, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                intermediate_size=48, max_position_embeddings=40, layer_norm_eps=1e-5)
    hf = MegatronBertModel(config).eval()
    with torch.no_grad():
        hf.embeddings.token_type_embeddings.weight.zero_()
        for name, param in hf.named_parameters():
            if name.endswith("bias") or "ln." in name:
                param.add_(0.1 * torch.randn_like(param))
    hf.save_pretrained(work / "foreign")
    AutoTokenizer.from_pretrained(tokenizer_dir).save_pretrained(work / "foreign")
    ckpt_dir = import_from_hf(work / "foreign", work / "foreign_native")
    cfg = read_json(ckpt_dir / "run_config.json")["model"]
    assert (cfg["arch"], cfg["vocab_size"], cfg["ffn_hidden_size"]) == ("crossbert", 125, 48)
    ids, mask = padded_batch(125, [17, 9, 3], seed=4)
    native = _native_features(ckpt_dir, ids, mask)
    with torch.no_grad():
        expected = hf(input_ids=ids, attention_mask=mask).last_hidden_state
    assert _max_diff(native, expected, mask) <= TOL
