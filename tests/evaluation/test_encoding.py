"""Probe-time encoding options on an exported native CrossBERT: a visible subset is exactly the native encoder
run on those tokens at their original positions (what it trains on); the tensor before the final norm and a
middle layer are the HF hidden states the options name; every probe report carries the features' geometry."""

from __future__ import annotations

import numpy as np
import pytest
import torch

support = pytest.importorskip("tests.support.conversion")

from megatron_crossbert.platform import distributed as platform  # noqa: E402
from megatron_crossbert.config import ParallelConfig  # noqa: E402
from megatron_crossbert.evaluation.encoders import HFEncoder, resolve_model  # noqa: E402
from megatron_crossbert.evaluation.encoding import EncodingOptions, visible_mask  # noqa: E402
from megatron_crossbert.evaluation.probing.report import render_markdown  # noqa: E402
from megatron_crossbert.evaluation.probing.runner import ProbeRunConfig, collect_tasks, run_probing  # noqa: E402
from tests.support.synthetic_eval import write_jsonl_task  # noqa: E402

TEXTS = ["w1 w2 w3 w4 w5 w6 w7 w8 w9", "w10 w11 w12", "w20 w21 w22 w23 w24 w25"]


@pytest.fixture(scope="module")
def native(tmp_path_factory, word_tokenizer):
    work = tmp_path_factory.mktemp("encoding")
    support.make_checkpoint(work / "ckpt", support.tiny_run_config("crossbert", tokenizer=str(word_tokenizer),
                                                                   num_layers=4))
    return work


def _encoder(work, **options) -> HFEncoder:
    return HFEncoder(resolve_model(work / "ckpt", cache_dir=work / "cache"), max_len=24,
                     encoding=EncodingOptions(**options))


def test_options_refuse_what_cannot_run_and_only_a_changed_reading_changes_the_identity():
    with pytest.raises(ValueError, match="visible_fraction must be in"):
        EncodingOptions(visible_fraction=0.0)
    with pytest.raises(ValueError, match="hidden_state must be one of"):
        EncodingOptions(hidden_state="pooler")
    assert EncodingOptions().identity == "" and EncodingOptions(seed=5).identity == ""
    assert EncodingOptions(0.5).identity != EncodingOptions(0.5, seed=1).identity
    assert "middle_layer" in EncodingOptions(hidden_state="middle_layer").identity


def test_a_visible_subset_is_seeded_per_text_and_keeps_half_of_the_real_tokens():
    mask = torch.tensor([[1] * 10, [1] * 4 + [0] * 6])
    keep = visible_mask(mask, ["a", "b"], 0.5, seed=0)
    assert keep.sum(1).tolist() == [5, 2] and not bool((keep > mask).any())    # padding never visible
    again = visible_mask(mask[[1, 0]], ["b", "a"], 0.5, seed=0)                 # another batch order
    assert torch.equal(again, keep[[1, 0]])
    assert visible_mask(torch.ones(1, 1, dtype=torch.long), ["x"], 0.5, 0).sum() == 1   # at least one token


@pytest.mark.slow
def test_the_visible_subset_is_the_native_encoder_on_those_tokens_at_their_positions(native):
    encoder = _encoder(native, visible_fraction=0.5, seed=3)
    pooled = encoder.embed(TEXTS, progress=False)[0]
    platform.initialize(ParallelConfig(), 0)
    try:
        model = support.load_native(native / "ckpt").eval()
        for text, row in zip(TEXTS, pooled):
            ids = encoder.tokenizer([text], return_tensors="pt")["input_ids"]
            kept = visible_mask(torch.ones_like(ids), [text], 0.5, seed=3)[0].nonzero().flatten()
            with torch.no_grad():
                hidden = model.run_encoder(ids[:, kept], kept[None])               # [s, 1, h], final norm applied
            np.testing.assert_allclose(row, hidden[:, 0].mean(0).numpy(), atol=1e-5)
    finally:
        platform.destroy()
    assert not np.allclose(pooled, _encoder(native).embed(TEXTS, progress=False)[0], atol=1e-3)


@pytest.mark.slow
def test_before_the_final_norm_and_the_middle_layer_are_the_hidden_states_they_name(native):
    final = _encoder(native)
    batch = final.tokenizer(TEXTS[:1], return_tensors="pt")
    layers, seen = final.model.encoder.layer, []
    hook = layers[-1].register_forward_hook(lambda module, args, output: seen.append(output))
    with torch.no_grad():
        out = final.model(**batch, output_hidden_states=True)
    hook.remove()
    torch.testing.assert_close(final.model.encoder.LayerNorm(seen[0]), out.last_hidden_state)
    before = seen[0][0].mean(0).numpy()                                         # the last layer's own output
    for option, expected in (("before_final_norm", before), ("middle_layer", out.hidden_states[2][0].mean(0).numpy())):
        pooled = _encoder(native, hidden_state=option).embed(TEXTS[:1], progress=False)[0, 0]
        np.testing.assert_allclose(pooled, expected, atol=1e-5)
    assert not np.allclose(before, final.embed(TEXTS[:1], progress=False)[0, 0], atol=1e-3)


@pytest.mark.slow
def test_a_model_without_a_final_norm_has_nothing_before_it(tiny_hf_encoder):
    encoder = HFEncoder(str(tiny_hf_encoder), max_len=16, encoding=EncodingOptions(hidden_state="before_final_norm"))
    with pytest.raises(ValueError, match="no final norm"):
        encoder.embed(["w1 w2"], progress=False)


@pytest.mark.slow
def test_the_probe_report_carries_the_features_geometry_and_the_encoding(native, tmp_path):
    task = write_jsonl_task(tmp_path / "planted", n_train=40, n_test=20,
                            words=([f"w{i}" for i in range(8)], [f"w{i}" for i in range(8, 16)],
                                   [f"w{i}" for i in range(16, 60)]))
    tasks = collect_tasks(jsonl=[task])
    config = ProbeRunConfig(max_len=24, cache_dir=str(tmp_path / "cache"),
                            encoding=EncodingOptions(visible_fraction=0.5))
    report = run_probing(str(native / "ckpt"), tasks, config)
    stats = report["feature_stats"]
    assert stats["n"] == 60 and stats["dim"] == 32 and 1.0 <= stats["effective_rank"] <= 32
    assert -1.0 <= stats["mean_cosine"] <= 1.0
    assert report["config"]["encoding"]["visible_fraction"] == 0.5
    assert set(report["tasks"]["planted"]["readouts"]) == {"raw", "whitened"}
    text = render_markdown(report)
    assert "0.5 of each text's tokens visible" in text and f"effective rank {stats['effective_rank']:.1f} of 32" in text
    with pytest.raises(ValueError, match="--layers all"):
        run_probing(str(native / "ckpt"), tasks, ProbeRunConfig(
            layers="all", encoding=EncodingOptions(hidden_state="middle_layer"), cache_dir=str(tmp_path / "cache")))
