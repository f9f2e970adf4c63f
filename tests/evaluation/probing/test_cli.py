"""crossbert-probe end to end on a tiny random HF BERT built here: GLUE fixture + JSONL tasks, per-layer
PNG plot, planted signal vs shuffled labels through the real encoder, and the feature cache."""

from __future__ import annotations

import json
import sys

import pytest

from megatron_crossbert.cli.probe import build_parser, main
from tests.support.synthetic_eval import write_glue_fixture, write_jsonl_task


def test_help_lists_options(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--help"])
    assert "--layers" in capsys.readouterr().out


@pytest.mark.slow
def test_probe_cli_glue_jsonl_and_layer_plot(tiny_hf_encoder, tmp_path):
    glue = write_glue_fixture(tmp_path / "glue", n=24)
    write_jsonl_task(tmp_path / "tasks" / "planted", n_train=130, n_test=60)
    write_jsonl_task(tmp_path / "tasks" / "shuffled", n_train=130, n_test=160, shuffle_labels=True)
    out = tmp_path / "out"
    argv = ["--model", str(tiny_hf_encoder), "--glue-dir", str(glue), "--glue-tasks", "CoLA,STS-B",
            "--jsonl", str(tmp_path / "tasks"), "--layers", "all", "--max-len", "16", "--max-train", "120", "--batch-size", "64",
            "--cache-dir", str(tmp_path / "cache"), "--out", str(out)]
    assert main(argv) == 0
    report = json.loads((out / "probe_results.json").read_text())
    tasks = report["tasks"]
    assert list(tasks) == ["CoLA", "STS-B", "planted", "shuffled"]
    assert tasks["planted"]["metrics"]["accuracy"] > 90.0
    assert 30.0 < tasks["shuffled"]["metrics"]["accuracy"] < 70.0
    assert tasks["planted"]["n_train"] == 120 and len(tasks["CoLA"]["per_layer"]) == 3  # embeddings + 2 layers
    assert set(tasks["STS-B"]["metrics"]) == {"spearman", "pearson"}
    assert report["summary"]["glue_tasks"] == ["CoLA", "STS-B"]
    assert (out / "probe_results_layers.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| planted |" in (out / "probe_results.md").read_text()
    record = json.loads((out / "embedder.json").read_text())  # what was resolved, beside the results
    assert (record["model"]["form"], record["model"]["why"]) == ("hf-dir", str(tiny_hf_encoder / "config.json"))
    assert (record["pooling"]["source"], record["recipe"]["max_len"]) == ("default", 16)
    assert record["identity"].startswith(report["model"]["identity"])
    cached = list((tmp_path / "cache" / "features").glob("*.npy"))
    assert len(cached) == 2 + 4 + 2 * 2  # train+test: CoLA, STS-B (both sides), two JSONL tasks
    assert main(argv) == 0  # second run reads every feature from the cache
    assert sorted((tmp_path / "cache" / "features").glob("*.npy")) == sorted(cached)


@pytest.mark.slow
def test_report_says_whether_the_features_were_whitened(tiny_hf_encoder, tmp_path):
    """A plain HF model is not whitened unless --whiten says so; the JSON and the markdown say which."""
    write_jsonl_task(tmp_path / "tasks" / "planted", n_train=130, n_test=60)
    common = ["--model", str(tiny_hf_encoder), "--jsonl", str(tmp_path / "tasks"), "--max-len", "16",
              "--cache-dir", str(tmp_path / "cache")]
    for flag, whiten, source, words in (([], False, "default", "not whitened (default)"),
                                        (["--whiten"], True, "flag", "PCA-whitened (flag)")):
        out = tmp_path / f"out{len(flag)}"
        assert main(common + flag + ["--out", str(out)]) == 0
        report = json.loads((out / "probe_results.json").read_text())
        assert (report["recipe"]["whiten"], report["recipe"]["whiten_source"]) == (whiten, source)
        assert words in (out / "probe_results.md").read_text()
        assert report["tasks"]["planted"]["metrics"]["accuracy"] > 90.0
        readouts = report["tasks"]["planted"]["readouts"]  # both readouts, the run's own one equal to its score
        assert readouts["whitened" if whiten else "raw"] == report["tasks"]["planted"]["score"]
        assert readouts["raw" if whiten else "whitened"] is not None and "| raw | whitened |" in (
            out / "probe_results.md").read_text()
        assert report["summary"]["readouts"]["raw"]["average"] == readouts["raw"]


@pytest.mark.slow
def test_knn_probe_beside_the_linear_one_reads_a_planted_signal(tiny_hf_encoder, tmp_path, capsys):
    write_jsonl_task(tmp_path / "tasks" / "planted", n_train=130, n_test=60)
    write_jsonl_task(tmp_path / "tasks" / "shuffled", n_train=130, n_test=160, shuffle_labels=True)
    common = ["--model", str(tiny_hf_encoder), "--jsonl", str(tmp_path / "tasks"), "--max-len", "16",
              "--cache-dir", str(tmp_path / "cache")]
    assert main(common + ["--knn", "5", "--out", str(tmp_path / "out")]) == 0
    report = json.loads((tmp_path / "out" / "probe_results.json").read_text())
    planted, shuffled = report["tasks"]["planted"]["knn"], report["tasks"]["shuffled"]["knn"]
    assert planted["k"] == 5 and planted["score"] > 80.0 and 25.0 < shuffled["score"] < 75.0
    assert report["summary"]["knn_average"] == pytest.approx((planted["score"] + shuffled["score"]) / 2)
    assert "k-NN" in (tmp_path / "out" / "probe_results.md").read_text()
    capsys.readouterr()
    assert main(common + ["--knn", "-1", "--out", str(tmp_path / "neg")]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("error: --knn -1")
    assert not (tmp_path / "neg").exists()


def test_token_geometry_is_measured_on_request_and_said_in_one_line(tiny_hf_encoder, tmp_path, capsys):
    write_jsonl_task(tmp_path / "tasks" / "planted", n_train=40, n_test=60)
    common = ["--model", str(tiny_hf_encoder), "--jsonl", str(tmp_path / "tasks"), "--max-len", "16",
              "--cache-dir", "none", "--no-both-readouts"]
    assert main(common + ["--token-geometry", "50", "--out", str(tmp_path / "out")]) == 0
    geometry = json.loads((tmp_path / "out" / "probe_results.json").read_text())["token_geometry"]
    assert geometry["n_texts"] == 50 and 0 < geometry["token_effective_rank"] <= geometry["dim"]
    assert 0 <= geometry["position_share"] <= 1 and 0 <= geometry["identity_share"] <= 1
    assert "Token states (" in (tmp_path / "out" / "probe_results.md").read_text()
    assert main(common + ["--out", str(tmp_path / "plain")]) == 0  # off by default
    assert "token_geometry" not in json.loads((tmp_path / "plain" / "probe_results.json").read_text())
    capsys.readouterr()
    assert main(common + ["--token-geometry", "-2", "--out", str(tmp_path / "neg")]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("error: --token-geometry -2")


def test_a_probe_whose_output_goes_to_a_file_writes_lines_not_redraws(tiny_hf_encoder, tmp_path, monkeypatch):
    """A batch system keeps every ``\\r`` redraw of a progress bar (SLURM, ``> log``): a probe whose stderr is a
    file writes whole lines instead, and no line carries more than a few redraws."""
    write_jsonl_task(tmp_path / "tasks" / "planted", n_train=40, n_test=20)
    monkeypatch.setenv("TQDM_MININTERVAL", "0")  # every batch is due: what hours of encoding look like
    log_path = tmp_path / "probe.log"
    with open(log_path, "w") as log:
        monkeypatch.setattr(sys, "stderr", log)
        assert main(["--model", str(tiny_hf_encoder), "--jsonl", str(tmp_path / "tasks"), "--max-len", "16",
                     "--batch-size", "2", "--cache-dir", "none", "--out", str(tmp_path / "out")]) == 0
    lines = log_path.read_bytes().decode().split("\n")  # bytes: text mode would read each "\\r" as a newline
    assert max(line.count("\r") for line in lines) <= 2
    assert sum("planted/train" in line for line in lines) >= 20  # the bar of every batch, each on its own line
