"""The pooler trained on a frozen backbone: leak check, training, the saved sentence-transformers directory,
and ``crossbert-pooler`` end to end, on the tiny HF encoder and the toy MTEB-lite folders."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from megatron_crossbert.evaluation.pooler.leaks import check_leaks, pair_key
from megatron_crossbert.evaluation.pooler.pairs import TextPairs, read_pairs, span_pairs
from megatron_crossbert.evaluation.pooler.train import PoolerConfig, train_linear_pooler
from tests.support.synthetic_eval import write_mteb_lite_fixture


def _toy_pairs(n: int = 24, seed: int = 1) -> TextPairs:
    rng = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(120)]
    anchors = [" ".join(rng.choice(words, 6)) for _ in range(n)]
    return TextPairs(anchors, [a + " " + " ".join(rng.choice(words, 2)) for a in anchors], "toy")


def _sts_pairs(bench: Path) -> list[tuple[str, str]]:
    rows = [json.loads(line) for line in (bench / "ToySTSA" / "test.jsonl").read_text().splitlines()]
    return [(r["sentence1"], r["sentence2"]) for r in rows]


def test_leak_check_finds_planted_test_pairs_and_refuses_them(tmp_path):
    """A test pair hidden among the training pairs, swapped, re-cased and re-spaced, is found and refuses the
    run; asked for, the run goes on and the report is marked; clean pairs report zero."""
    bench = write_mteb_lite_fixture(tmp_path / "bench")
    clean = _toy_pairs()
    report = check_leaks(clean, bench)
    assert report.leaking_pairs == 0 and not report.as_dict()["marked"]
    first, second = _sts_pairs(bench)[3]
    planted = TextPairs(clean.anchors + [second.upper()], clean.positives + ["  " + first.replace(" ", "   ") + " "],
                        "planted")
    with pytest.raises(ValueError, match="1 training pairs are test pairs.*ToySTSA 1.*--allow-test-overlap"):
        check_leaks(planted, bench)
    allowed = check_leaks(planted, bench, allow=True)
    assert allowed.pairs["ToySTSA"] == 1 and allowed.as_dict()["marked"] and allowed.texts["ToySTSA"] >= 1
    assert pair_key("A  b", "c") == pair_key("C", "a b")


def test_pairs_from_a_file_and_spans_of_one_document(tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_text('{"anchor": "a b", "positive": "c d"}\n\n{"sentence1": "e", "sentence2": "f"}\n')
    pairs = read_pairs(path)
    assert (pairs.anchors, pairs.positives) == (["a b", "e"], ["c d", "f"])
    path.write_text('{"anchor": "a"}\n')
    with pytest.raises(ValueError, match=r"pairs.jsonl:1: needs one of"):
        read_pairs(path)
    corpus = tmp_path / "corpus.jsonl"
    docs = [" ".join(f"d{d}x{i}" for i in range(40)) for d in range(5)]
    corpus.write_text("".join(json.dumps({"text": t}) + "\n" for t in docs + ["too short"]))
    spans = span_pairs([corpus], 4, seed=0, span=(5, 10))
    assert len(spans) == 4
    for a, p in zip(spans.anchors, spans.positives):
        assert 5 <= len(a.split()) <= 10 and a.split()[0].split("x")[0] == p.split()[0].split("x")[0]


def test_training_moves_positives_together():
    """Pairs share 4 signal axes and differ in 4 loud nuisance axes: the map learns to drop the nuisance."""
    rng = np.random.default_rng(0)
    signal = rng.normal(size=(64, 4))
    a, p = (np.hstack([signal, 3 * rng.normal(size=(64, 4))]).astype(np.float32) for _ in range(2))
    layer, log = train_linear_pooler(a, p, PoolerConfig(epochs=5, batch_size=16, lr=1e-2))
    assert log["loss_per_epoch"][-1] < log["loss_per_epoch"][0] and log["steps"] == 20
    assert tuple(layer.weight.shape) == (8, 8)


def test_a_map_started_at_the_whitening_is_the_whitening():
    from megatron_crossbert.evaluation.pooler.train import initial_map, start_at_whitening
    from megatron_crossbert.evaluation.whitening import fit_whitening

    x = (np.random.default_rng(0).normal(size=(50, 6)) * [9, 3, 1, 1, 0.1, 0.1]).astype(np.float32)
    layer = initial_map(6, 6, 0)
    start_at_whitening(layer, x)
    with torch.no_grad():
        mapped = layer(torch.from_numpy(x)).numpy()
    assert np.allclose(mapped, fit_whitening(x)(x), atol=1e-4)
    with pytest.raises(ValueError, match="init"):
        PoolerConfig(init="random")


def _safetensors(directory: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(directory / "model.safetensors"))


def test_saved_directory_keeps_the_backbone_and_equals_the_cached_path(tmp_path, tiny_hf_encoder):
    """Backbone weights bit-identical after training; ``SentenceTransformer(dir).encode`` and crossbert-mteb's
    reading of the saved dir equal the cached features through the trained map, to 1e-6."""
    from sentence_transformers import SentenceTransformer

    from megatron_crossbert.evaluation.dense_head import apply_dense
    from megatron_crossbert.evaluation.mteb.adapter import build_mteb_encoder
    from megatron_crossbert.evaluation.pooler.train import save_pooler

    original = _safetensors(tiny_hf_encoder)
    wrapper = build_mteb_encoder(str(tiny_hf_encoder), device="cpu")
    pairs = _toy_pairs()
    feats = [wrapper.features(texts, task="pooler-pairs", split=s)
             for texts, s in ((pairs.anchors, "anchor"), (pairs.positives, "positive"))]
    layer, _ = train_linear_pooler(*feats, PoolerConfig(epochs=2, batch_size=8, lr=1e-2, dim=16))
    dense_dir = save_pooler(wrapper.model.resolved.hf_path, wrapper.recipe, layer, tmp_path / "model")
    saved = _safetensors(tmp_path / "model")
    assert set(saved) >= set(original) or {k.removeprefix("bert.") for k in saved} >= set(original)
    assert all(torch.equal(original[k], saved[k]) for k in original)
    assert all(torch.equal(original[k], v) for k, v in wrapper.model.model.state_dict().items() if k in original)
    cached = apply_dense([str(dense_dir)], feats[0])
    st = SentenceTransformer(str(tmp_path / "model"), device="cpu").encode(pairs.anchors, convert_to_numpy=True)
    assert st.shape == (len(pairs), 16) and np.allclose(st, cached, atol=1e-6)
    reread = build_mteb_encoder(str(tmp_path / "model"), device="cpu")
    assert reread.recipe.dense == (str(dense_dir),) and not reread.recipe.whiten
    assert np.allclose(apply_dense(reread.recipe.dense, reread.features(pairs.anchors, task="t", split="s")),
                       cached, atol=1e-6)


@pytest.mark.parametrize("pooling", ["mean", "attention"])
def test_crossbert_pooler_end_to_end(tmp_path, tiny_hf_encoder, pooling):
    """One command: before (raw and whitened), training, the saved dir, after; the after scores are what
    crossbert-mteb gives the saved directory; a second run into the same --out is refused."""
    from megatron_crossbert.cli.mteb import main as mteb_main
    from megatron_crossbert.cli.pooler import main

    bench = write_mteb_lite_fixture(tmp_path / "bench")
    pairs = _toy_pairs(40)
    (tmp_path / "pairs.jsonl").write_text("".join(json.dumps({"anchor": a, "positive": p}) + "\n"
                                                  for a, p in zip(pairs.anchors, pairs.positives)))
    argv = ["--model", str(tiny_hf_encoder), "--benchmark-dir", str(bench), "--pairs", str(tmp_path / "pairs.jsonl"),
            "--out", str(tmp_path / "out"), "--cache-dir", str(tmp_path / "cache"), "--device", "cpu",
            "--epochs", "2", "--batch-size", "8", "--pooling", pooling]
    assert main(argv) == 0
    report = json.loads((tmp_path / "out" / "pooler_report.json").read_text())
    assert report["leaks"]["leaking_pairs"] == 0 and report["training"]["steps"] == 10
    assert set(report["before"]["readouts"]["tasks"]) == {r["task"] for r in report["after"]["tasks"]}
    assert "pooler trained" in (tmp_path / "out" / "pooler_report.md").read_text()
    assert report["config"]["pooler"]["pooling"] == pooling
    kinds = [m["type"].rsplit(".", 1)[-1] for m in json.loads((tmp_path / "out" / "model" / "modules.json").read_text())]
    assert kinds[1] == {"mean": "Pooling", "attention": "AttentionPooling"}[pooling] and kinds[2] == "Dense"
    before, after = (json.loads((tmp_path / "out" / side / "embedder.json").read_text()) for side in ("before", "after"))
    assert (before["model"]["form"], before["pooling"]["source"]) == ("hf-dir", "default")
    assert len(after["recipe"]["dense"]) == 1 and not after["recipe"]["whiten"]
    if pooling == "attention":  # the saved directory itself, its backbone run again
        assert (after["model"]["form"], after["pooling"]["pooling"]) == ("sentence-transformers", "attention")
    else:  # the backbone's cached features through the saved Dense module
        assert after["identity"] == before["identity"] and after["name"] == before["name"] + "+pooler"
    assert mteb_main(["--model", str(tmp_path / "out" / "model"), "--benchmark-dir", str(bench), "--device", "cpu",
                      "--out", str(tmp_path / "again"), "--cache-dir", "none", "--no-both-readouts"]) == 0
    again = json.loads((tmp_path / "again" / "mteb_summary.json").read_text())
    after = {r["task"]: r["main_score"] for r in report["after"]["tasks"]}
    assert all(abs(after[r["task"]] - r["main_score"]) < 1e-4 for r in again["tasks"])
    assert main(argv) == 2


def test_attention_pooling_starts_at_the_mean_and_never_looks_at_padding():
    from megatron_crossbert.evaluation.pooler.attention import AttentionPooling, padded

    states = [np.random.default_rng(i).normal(size=(n, 6)).astype(np.float32) for i, n in enumerate((3, 5, 1))]
    batch, mask = padded(states)
    pooler = AttentionPooling(6)
    with torch.no_grad():
        assert np.allclose(pooler.pool(batch, mask).numpy(), [s.mean(0) for s in states], atol=1e-6)
        pooler.query.copy_(torch.arange(6.0))
        batch[0, 3:] = 1e4  # padding rows of the first text: masked out, so they change nothing
        alone = pooler.pool(*padded(states[:1]))
        assert torch.allclose(pooler.pool(batch, mask)[0], alone[0], atol=1e-5)
        assert not torch.allclose(alone[0], torch.from_numpy(states[0].mean(0)))


def test_attention_pooler_keeps_the_backbone_and_its_directory_equals_the_cached_path(tmp_path, tiny_hf_encoder):
    """Trained on cached token states: backbone bit-identical; ``SentenceTransformer(dir, trust_remote_code=True)``
    and crossbert-mteb's reading of the saved dir equal the cached states through the trained query and map."""
    from sentence_transformers import SentenceTransformer

    from megatron_crossbert.evaluation.dense_head import apply_dense
    from megatron_crossbert.evaluation.mteb.adapter import build_mteb_encoder
    from megatron_crossbert.evaluation.pooler.attention import padded, train_attention_pooler
    from megatron_crossbert.evaluation.pooler.train import save_pooler

    original = _safetensors(tiny_hf_encoder)
    wrapper = build_mteb_encoder(str(tiny_hf_encoder), device="cpu")
    pairs = _toy_pairs()
    states = [wrapper.model.token_states(texts) for texts in (pairs.anchors, pairs.positives)]
    config = PoolerConfig(epochs=2, batch_size=8, lr=1e-2, dim=16, pooling="attention")
    attention, layer, log = train_attention_pooler(*states, config)
    assert log["steps"] == 6 and float(attention.query.abs().sum()) > 0
    dense_dir = save_pooler(wrapper.model.resolved.hf_path, wrapper.recipe, layer, tmp_path / "model", attention)
    assert all(torch.equal(original[k], v) for k, v in _safetensors(tmp_path / "model").items() if k in original)
    assert all(torch.equal(original[k], v) for k, v in wrapper.model.model.state_dict().items() if k in original)
    with torch.no_grad():
        cached = layer(attention.pool(*padded(states[0]))).numpy()
    st = SentenceTransformer(str(tmp_path / "model"), device="cpu", trust_remote_code=True)
    assert np.allclose(st.encode(pairs.anchors, convert_to_numpy=True), cached, atol=1e-6)
    reread = build_mteb_encoder(str(tmp_path / "model"), device="cpu")
    assert reread.recipe.pooling == "attention" and reread.recipe.dense == (str(dense_dir),)
    assert reread.model.identity != wrapper.model.identity
    features = reread.features(pairs.anchors, task="t", split="s")
    assert np.allclose(apply_dense(reread.recipe.dense, features), cached, atol=1e-6)
