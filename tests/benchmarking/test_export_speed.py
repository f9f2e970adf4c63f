"""``crossbert-bench export-speed`` on a tiny model: every exact format x backend is timed side by side
(classic CrossBERT -> xlmr-xl/megatron-bert, modern CrossBERT -> modernbert), each row computes the same
function as its checkpoint's reference row, and the CLI writes JSON + markdown."""

from __future__ import annotations

import json

import pytest

from megatron_crossbert.benchmarking.export_speed import ExportSpeedOptions, export_speed_markdown, run_export_speed
from megatron_crossbert.cli.bench import main as bench_main

TINY = dict(hidden_size=32, num_layers=2, num_attention_heads=4, vocab_size=200, seq_lengths=[16, 32],
            batch_size=2, warmup=0, repeats=1, device="cpu")


@pytest.mark.slow
def test_every_format_and_backend_is_timed_and_exact(tmp_path):
    report = run_export_speed(ExportSpeedOptions(**TINY, work_dir=str(tmp_path)))
    rows = {(r["format"], r["backend"], r["seq_length"]): r for r in report["results"]}
    assert set(rows) == {(f, b, s) for f, b in [("xlmr-xl", "sdpa"), ("xlmr-xl", "eager"), ("megatron-bert", "eager"),
                                                 ("modernbert", "sdpa"), ("modernbert", "eager")] for s in (16, 32)}
    for row in rows.values():
        assert row["sentences_per_s"] > 0 and len(row["cpu_s"]) == 1 and row["speedup_vs_reference"] > 0
        assert row["max_abs_diff_vs_reference"] <= 1e-5  # same weights, same function
    assert rows[("megatron-bert", "eager", 16)]["speedup_vs_reference"] == 1.0
    assert {r["diff_reference"] for r in rows.values() if r["encoder"] == "classic"} == {"megatron-bert/eager"}
    assert {r["diff_reference"] for r in rows.values() if r["encoder"] == "modern"} == {"modernbert/eager"}
    table = export_speed_markdown(report)
    assert "| xlmr-xl | XLMRobertaXLModel | classic | sdpa | 32 |" in table and "clock: cpu" in table
    assert "| modernbert | ModernBertModel | modern | sdpa | 32 |" in table


def test_options_are_validated():
    with pytest.raises(ValueError, match="seq_lengths"):
        ExportSpeedOptions(seq_lengths=[1])
    with pytest.raises(ValueError, match="device"):
        ExportSpeedOptions(device="tpu")


def test_cli_writes_json(tmp_path, capsys):
    out = tmp_path / "speed.json"
    args = ["export-speed", "--hidden-size", "32", "--num-layers", "1", "--num-attention-heads", "4",
            "--seq-lengths", "16", "--batch-size", "2", "--warmup", "0", "--repeats", "1", "--device", "cpu",
            "--formats", "xlmr-xl", "--threads", "1", "--out", str(out)]
    assert bench_main(args) == 0
    report = json.loads(out.read_text())
    assert {r["backend"] for r in report["results"]} == {"sdpa", "eager"}
    assert report["meta"]["reference"] == "megatron-bert/eager"
    assert "sentences/s" in capsys.readouterr().out
