"""crossbert-demo at tiny size: every stage runs and leaves usable artefacts (end-to-end smoke)."""

import dataclasses
import json
import math
from pathlib import Path

import pytest

from crossbert_demo import cli as demo_cli
from crossbert_demo.pipeline import DemoOptions, build_probe_rows, demo_run_config, run_demo


def test_probe_rows_balance_sources_or_fall_back_to_word_order():
    records = [{"text": f"text number {i} " * 3, "source": "a" if i % 3 else "b"} for i in range(30)]
    name, rows = build_probe_rows(records, seed=0)
    assert name == "docstring_source"
    assert sorted(r["label"] for r in rows).count("a") == sorted(r["label"] for r in rows).count("b") == 10
    name, rows = build_probe_rows([{"text": r["text"]} for r in records], seed=0)
    assert name == "word_order" and {r["label"] for r in rows} == {"original", "shuffled"}


def test_help_and_refusal_to_overwrite(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        demo_cli.main(["--help"])
    assert exit_info.value.code == 0 and "--corpus" in capsys.readouterr().out
    (tmp_path / "keep.txt").write_text("precious")
    assert demo_cli.main(["--out-dir", str(tmp_path)]) == 2
    assert (tmp_path / "keep.txt").read_text() == "precious"


def test_force_moves_the_old_output_aside(tmp_path, capsys):
    from crossbert_demo.pipeline import _prepare_out_dir

    out = tmp_path / "demo"
    out.mkdir()
    (out / "keep.txt").write_text("precious")
    assert (_prepare_out_dir(DemoOptions(out_dir=str(out), force=True)) / "corpus").is_dir()
    moved = list(tmp_path.glob("demo.replaced-*"))
    assert len(moved) == 1 and (moved[0] / "keep.txt").read_text() == "precious"
    assert "nothing deleted" in capsys.readouterr().out


def test_run_flags_set_the_config_sections(tmp_path, capsys):
    args = demo_cli.build_parser().parse_args(["--arch", "mlm", "--encoder", "modern", "--micro-batch-size", "8",
                                               "--seed", "7", "--seq-length", "64", "--train-iters", "50"])
    opts = demo_cli.options_from_args(args)
    assert (opts.model.arch, opts.model.encoder, opts.data.seq_length) == ("mlm", "modern", 64)
    assert opts.training.micro_batch_size == opts.training.global_batch_size == 8
    assert opts.training.seed == opts.masking.seed == 7
    run = demo_run_config(opts, "data/corpus_text_document", Path("tok"), tmp_path / "ckpt")
    assert run.model.decoder_num_layers == 0 and run.model.max_position_embeddings == 64
    assert (run.training.lr_warmup_iters, run.training.log_interval) == (5, 5)
    assert run.training.min_lr == pytest.approx(run.training.lr / 10)
    assert demo_cli.main(["--arch", "mlm", "--out-dir", str(tmp_path / "new")]) == 2  # mlm needs the modern encoder
    assert "cannot build model.arch='mlm', which is built with encoder modern" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()


def test_the_sts_line_names_the_folders_it_read():
    """The shared MTEB-lite data holds STS12-16 and STSBenchmark, and the demo reads every STS folder."""
    from crossbert_demo.pipeline import _sts_line

    scores = {"average": 50.0, "tasks": {"STS12": 40.0, "STSBenchmark": 60.0}}
    line = _sts_line({"pretrained": scores, "untrained": scores, "seconds": 1, "data": "mteb_lite"})
    assert "STS average (MTEB-lite STS12, STSBenchmark; cosine Spearman x100): pretrained 50.0" in line


def test_without_mteb_lite_the_summary_names_the_command(tmp_path, capsys):
    from crossbert_demo.pipeline import _sts_line, sts_stage

    sts = sts_stage({"pretrained": tmp_path / "hf"}, DemoOptions(mteb_lite_dir=None), tmp_path)
    assert sts == {"command": f"crossbert-mteb --model {tmp_path / 'hf'} --benchmark-dir ../shared/data/mteb_lite "
                              "--tasks STS12,STS13,STS14,STS15,STS16"}
    assert "MTEB-lite data not found; score the export with: crossbert-mteb" in _sts_line(sts)
    assert demo_cli.main(["--mteb-lite-dir", str(tmp_path / "absent"), "--out-dir", str(tmp_path / "o")]) == 2
    assert "--mteb-lite-dir" in capsys.readouterr().err and not (tmp_path / "o").exists()


@pytest.mark.e2e
def test_tiny_demo_end_to_end(tmp_path):
    from tests.support.synthetic_eval import write_mteb_lite_fixture

    defaults = DemoOptions()
    opts = DemoOptions(out_dir=str(tmp_path / "demo"), corpus_bytes=250_000, probe_train=120, probe_test=60,
                       model=dataclasses.replace(defaults.model, vocab_size=2000, hidden_size=64, num_layers=2),
                       data=dataclasses.replace(defaults.data, seq_length=64),
                       training=dataclasses.replace(defaults.training, train_iters=6, micro_batch_size=8,
                                                    global_batch_size=8),
                       mteb_lite_dir=str(write_mteb_lite_fixture(tmp_path / "mteb_lite", pairs=20)))
    result = run_demo(opts)
    assert set(result["sts"]["pretrained"]["tasks"]) == {"ToySTSA", "ToySTSB"}  # every STS folder, no classification
    assert "STS average (MTEB-lite ToySTSA, ToySTSB; cosine Spearman x100): pretrained" in demo_cli.format_summary(
        result)  # labelled by the folders it read
    assert json.loads((tmp_path / "demo" / "summary.json").read_text())["paths"] == result["paths"]
    assert result["pretrain"]["steps"] == 6
    assert result["pretrain"]["final_loss"] < result["pretrain"]["first_loss"]
    for name in ("pretrained", "untrained"):
        assert 0.0 <= result["probe"][name]["accuracy"] <= 100.0
    from sentence_transformers import SentenceTransformer

    embeddings = SentenceTransformer(result["paths"]["hf"], device="cpu").encode(["a tiny test sentence"])
    assert embeddings.shape == (1, 64) and all(math.isfinite(float(x)) for x in embeddings[0])


@pytest.mark.e2e
def test_a_stop_signal_during_pretraining_ends_the_demo(tmp_path, monkeypatch, capsys):
    """A user's Ctrl-C or a batch system's SIGTERM stops the demo after the stop checkpoint: no export, no
    probe, one line, exit 128 + the signal (before, the demo went on to export and probe a 115-step model)."""
    from crossbert_demo import pipeline

    def stopped(run_cfg):
        return {"iteration": 3, "stopped_by_signal": True, "stop_reason": "SIGTERM", "losses": [1.0]}

    monkeypatch.setattr(pipeline, "pretrain_stage", stopped)
    argv = ["--out-dir", str(tmp_path / "demo"), "--corpus-bytes", "60000", "--probe-train", "40", "--probe-test",
            "20", "--train-iters", "4", "--seq-length", "32", "--vocab-size", "1000", "--hidden-size", "32", "--num-layers", "1",
            "--mteb-lite-dir", "none"]
    assert demo_cli.main(argv) == 128 + 15
    err = capsys.readouterr().err
    assert "stopped: " in err and "stopped by SIGTERM at step 3" in err and "Traceback" not in err
    assert not (tmp_path / "demo" / "hf").exists() and not (tmp_path / "demo" / "summary.json").exists()
