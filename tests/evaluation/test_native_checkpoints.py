"""Probing a native megatron-crossbert checkpoint: export to HF through ``convert.export_to_hf`` (cached),
then the HF path; and the in-training suite on the live ``CrossBertModel.encode`` agrees with it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("megatron_crossbert.convert")
pytest.importorskip("megatron_crossbert.models")
support = pytest.importorskip("tests.support.conversion")  # the convert tests' tiny-checkpoint helpers

from megatron_crossbert.platform import distributed as platform  # noqa: E402
from megatron_crossbert.config import ParallelConfig  # noqa: E402
from megatron_crossbert.evaluation.encoders import HFEncoder, resolve_model  # noqa: E402
from tests.support.synthetic_eval import write_jsonl_task  # noqa: E402

WORDS = ([f"w{i}" for i in range(0, 8)], [f"w{i}" for i in range(8, 16)], [f"w{i}" for i in range(16, 60)])


def _write_sts_folder(folder, n: int = 40):
    """STS pairs of the tokenizer's words (no two sentences alike, so cosine ties cannot decide the ranks)."""
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(60)]
    rows = [{"sentence1": " ".join(rng.choice(words, 6)), "sentence2": " ".join(rng.choice(words, 6)),
             "score": float(rng.uniform(0, 5))} for _ in range(n)]
    folder.mkdir(parents=True)
    (folder / "test.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))


@pytest.fixture(scope="module")
def native(tmp_path_factory, word_tokenizer):
    work, tokenizer = tmp_path_factory.mktemp("native_eval"), word_tokenizer
    run_cfg = support.tiny_run_config("crossbert", tokenizer=str(tokenizer))
    support.make_checkpoint(work / "ckpt", run_cfg)
    task = write_jsonl_task(work / "tasks" / "planted", n_train=100, n_test=60, words=WORDS)
    _write_sts_folder(work / "mteb_lite" / "WordSTS")
    return work, task, tokenizer


@pytest.mark.slow
def test_probe_cli_on_native_checkpoint(native):
    from megatron_crossbert.cli.probe import main

    work, task, _ = native
    out, cache = work / "out", work / "cache"
    assert main(["--model", str(work / "ckpt"), "--jsonl", str(task), "--max-len", "24",
                 "--cache-dir", str(cache), "--out", str(out)]) == 0
    report = json.loads((out / "probe_results.json").read_text())
    assert report["model"]["identity"].startswith("native:") and report["model"]["native_checkpoint"]
    assert report["tasks"]["planted"]["metrics"]["accuracy"] > 70.0  # random weights: signal is weak but above chance (50)
    assert (report["recipe"]["whiten"], report["recipe"]["whiten_source"]) == (True, "architecture crossbert")
    exported = resolve_model(work / "ckpt", cache_dir=cache)
    assert exported.hf_path == report["model"]["hf_path"]  # same checkpoint -> same cached export
    record = json.loads((out / "embedder.json").read_text())
    assert (record["model"]["form"], record["model"]["why"]) == ("native-checkpoint", str(work / "ckpt" / "latest"))


@pytest.mark.slow
def test_mteb_cli_on_native_checkpoint(native):
    """crossbert-mteb resolves the checkpoint through the verified export (the one crossbert-probe made, reused)
    and embeds with the export's own sentence-transformers recipe (mean pooling, not normalised)."""
    from megatron_crossbert.cli.mteb import main

    work, _, _ = native
    out = work / "mteb_out"
    assert main(["--model", str(work / "ckpt"), "--benchmark-dir", str(work / "mteb_lite"), "--max-len", "24",
                 "--cache-dir", str(work / "cache"), "--out", str(out)]) == 0
    summary = json.loads((out / "mteb_summary.json").read_text())
    assert summary["model"]["identity"].startswith("native:") and summary["model"]["native_checkpoint"]
    assert summary["model"]["hf_path"] == resolve_model(work / "ckpt", cache_dir=work / "cache").hf_path
    recipe = summary["model"]["recipe"]
    assert (recipe["pooling"], recipe["normalize"], recipe["max_len"]) == ("mean", False, 24)
    assert recipe["source"].startswith("flags over") and recipe["source"].endswith("modules.json")
    assert (recipe["whiten"], recipe["whiten_source"]) == (True, "architecture crossbert")
    assert [row["task"] for row in summary["tasks"]] == ["WordSTS"]


def test_live_encode_suite_matches_exported_features(native):
    from transformers import AutoTokenizer

    from megatron_crossbert.evaluation.in_training import probe_in_training
    from megatron_crossbert.evaluation.probing import in_training as linear
    from megatron_crossbert.evaluation.probing.in_training import load_probe_tasks, make_encode_embed_fn
    from tests.support.training import read_run_config

    work, task, tokenizer_dir = native
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    texts = [json.loads(line)["text"] for line in (task / "test.jsonl").read_text().splitlines()[:12]]
    exported = HFEncoder(resolve_model(work / "ckpt", cache_dir=work / "cache"), max_len=24)
    platform.initialize(ParallelConfig(), 0)
    try:
        model = support.load_native(work / "ckpt")
        embed = make_encode_embed_fn(model.encode, tokenizer, max_len=24, batch_size=5)
        np.testing.assert_allclose(embed(texts), exported.embed(texts, progress=False)[0], atol=1e-4)
        scores = linear.probe_in_training(embed, load_probe_tasks(jsonl=[task]))
        hook_scores = probe_in_training(model, read_run_config(work / "ckpt"),
                                        [f"jsonl:{task}", f"mteb:{work / 'mteb_lite'}"], iteration=3)
    finally:
        platform.destroy()
    assert scores["probe/planted/accuracy"] > 70.0 and "probe/avg" in scores
    assert hook_scores["planted/accuracy"] > 70.0 and "avg" in hook_scores  # the logger adds its own prefix
    from megatron_crossbert.evaluation.mteb.adapter import benchmark_tasks, build_mteb_encoder, evaluate_mteb

    exported_mteb, _ = evaluate_mteb(build_mteb_encoder(str(work / "ckpt"), cache_dir=str(work / "cache"), max_len=24),
                                     benchmark_tasks(work / "mteb_lite"))
    # the live model's in-training STS Spearman is crossbert-mteb's number on its export
    assert hook_scores["mteb/WordSTS/cosine_spearman"] == pytest.approx(exported_mteb["average"], abs=1e-3)
    assert hook_scores["mteb/avg"] == hook_scores["mteb/WordSTS/cosine_spearman"]


def test_an_export_is_reused_only_by_code_with_the_same_config_fields(native, monkeypatch, tmp_path):
    """A newer version adds a config field and writes it into its export; an older process sharing the cache would
    refuse the unknown key, so each set of fields gets its own export folder (the model's identity is unchanged)."""
    from megatron_crossbert.evaluation import encoders

    work, _, _ = native
    first = resolve_model(work / "ckpt", cache_dir=tmp_path)
    assert resolve_model(work / "ckpt", cache_dir=tmp_path).hf_path == first.hf_path  # reused
    monkeypatch.setattr(encoders, "export_schema", lambda: "another set of fields")
    other = resolve_model(work / "ckpt", cache_dir=tmp_path)
    assert other.hf_path != first.hf_path and other.identity == first.identity
    assert (Path(other.hf_path) / "config.json").is_file()
