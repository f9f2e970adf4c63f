"""crossbert-finetune end to end on a tiny random BERT and the generated GLUE fixture: the smoke run, resume
(a finished run is never redone; a missing one is redone bit for bit; other settings are refused), one-line
errors, and --help."""

from __future__ import annotations

import json
import shutil

import pytest

from megatron_crossbert.cli.finetune import build_parser, main
from megatron_crossbert.evaluation.finetune import runner
from tests.support.synthetic_eval import write_glue_fixture


@pytest.fixture
def glue(tmp_path):
    return write_glue_fixture(tmp_path / "glue", n=24)


def _argv(model, glue, out, *extra: str) -> list[str]:
    return ["--model", str(model), "--glue-dir", str(glue), "--out", str(out), "--no-progress", "--threads", "1",
            "--cache-dir", "none", *extra]


def test_help_says_what_every_flag_does(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    for flag in ("--preset", "--lr", "--seeds", "--epochs", "--batch-size", "--max-train", "--max-len", "--tasks"):
        assert flag in text
    assert "cramming" in text and "modernbert" in text and "Matthews" in text


@pytest.mark.slow
def test_smoke_run_writes_results(tiny_hf_encoder, glue, tmp_path, capsys):
    out = tmp_path / "ft"
    assert main(_argv(tiny_hf_encoder, glue, out, "--tasks", "RTE,STS-B,MRPC,CoLA", "--max-train", "16",
                      "--epochs", "1", "--seeds", "0,1", "--lr", "1e-4,2e-4")) == 0
    report = json.loads((out / "results.json").read_text())
    assert report["preset"]["label"] == "cramming+overrides" and report["runs"] == {"resumed": 0, "run_now": 16}
    assert "max_len=64" in report["preset"]["overrides"]  # the preset's 128 capped at the tiny model's 64 positions
    rte = report["tasks"]["RTE"]
    assert rte["metrics"] == ["accuracy"] and set(rte["per_lr"]) == {"0.0001", "0.0002"} and rte["n_seeds"] == 2
    assert (rte["n_train"], rte["n_dev"], rte["hyper_parameters"]["epochs"]) == (16, 24, 1)
    assert set(report["tasks"]["STS-B"]["median"]) == {"score", "pearson", "spearman"}
    assert set(report["tasks"]["MRPC"]["median"]) == {"score", "f1", "accuracy"}
    assert set(report["tasks"]["CoLA"]["median"]) == {"score", "matthews"}
    assert all(0 <= rte["per_seed"][s]["accuracy"] <= 100 for s in ("0", "1"))
    assert len(list((out / "runs").rglob("seed=*.json"))) == 16
    record = json.loads((out / "embedder.json").read_text())  # the model alone: fine-tuning reads no pooling
    assert (record["model"]["form"], record["pooling"], record["identity"]) == (
        "hf-dir", None, report["model"]["identity"])
    assert "| RTE | accuracy |" in (out / "results.md").read_text() and "| CoLA | matthews |" in capsys.readouterr().out


@pytest.mark.slow
def test_resume_skips_finished_runs(tiny_hf_encoder, glue, tmp_path, monkeypatch):
    out = tmp_path / "ft"
    argv = _argv(tiny_hf_encoder, glue, out, "--tasks", "RTE", "--max-train", "16", "--epochs", "1", "--seeds", "0,1")
    calls = []
    real = runner.run_one
    monkeypatch.setattr(runner, "run_one", lambda *a, **k: calls.append(a[2].seed) or real(*a, **k))
    assert main(argv) == 0 and calls == [0, 1]
    first = json.loads((out / "results.json").read_text())
    mtimes = {p: p.stat().st_mtime_ns for p in (out / "runs").rglob("seed=*.json")}
    assert main(argv) == 0 and calls == [0, 1]  # everything finished: no model is built again
    assert {p: p.stat().st_mtime_ns for p in mtimes} == mtimes
    (out / "runs" / "RTE" / "lr=4e-05" / "seed=1.json").unlink()  # as if killed before seed 1 finished
    assert main(argv) == 0 and calls == [0, 1, 1]
    again = json.loads((out / "results.json").read_text())
    assert again["tasks"]["RTE"]["per_seed"] == first["tasks"]["RTE"]["per_seed"]  # redone bit for bit
    assert again["runs"] == {"resumed": 1, "run_now": 1}
    assert main([*argv, "--max-len", "32"]) == 2  # other settings into the same folder: refused, never mixed
    assert calls == [0, 1, 1] and {p: p.stat().st_mtime_ns for p in mtimes if p.name == "seed=0.json"} == {
        p: t for p, t in mtimes.items() if p.name == "seed=0.json"}


def test_each_bad_input_is_one_error_line(tiny_hf_encoder, glue, tmp_path, capsys):
    for task in ("QNLI", "WNLI"):
        (glue / task / "train.tsv").unlink()
    cases = {
        ("--tasks", "RTE,QNLI"): "QNLI/train.tsv: missing; QNLI has a dev set only here, so it cannot be fine-tuned",
        ("--tasks", "BoolQ"): "--tasks: unknown GLUE task 'BoolQ'",
        ("--tasks", "RTE", "--epochs", "0"): "--epochs (Preset.epochs): must be at least 1",
        ("--tasks", "RTE", "--preset", "cramming", "--lr", "-1"): "--lr (Preset.lrs): learning rates must be positive",
    }
    for extra, message in cases.items():
        assert main(_argv(tiny_hf_encoder, glue, tmp_path / "out", *extra)) == 2, extra
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: ") and message in err and "\n" not in err, err
    limited = shutil.copytree(tiny_hf_encoder, tmp_path / "limited")
    config = json.loads((limited / "tokenizer_config.json").read_text())
    (limited / "tokenizer_config.json").write_text(json.dumps({**config, "model_max_length": 64}))
    assert main(_argv(limited, glue, tmp_path / "out", "--tasks", "RTE", "--max-len", "100")) == 2
    assert "--max-len: 100 tokens exceed the limit of" in capsys.readouterr().err
    shutil.rmtree(glue / "RTE")
    assert main(_argv(tiny_hf_encoder, tmp_path / "nowhere", tmp_path / "out")) == 2
    assert "nowhere: no such GLUE folder (--glue-dir)" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # nothing was written for a refused run


def test_dev_only_tasks_are_left_out_by_default(glue):
    (glue / "QNLI" / "train.tsv").unlink()
    run, left_out = runner.resolve_tasks(glue, None)
    assert "QNLI" not in run and "RTE" in run
    assert left_out == ["QNLI: dev set only (no train.tsv), cannot be fine-tuned"]
    assert runner.resolve_tasks(glue, ["sts-b", "cola"]) == (["STS-B", "CoLA"], [])
