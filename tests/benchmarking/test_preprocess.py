"""crossbert-bench preprocess: the side-by-side table and the process-tree measurements behind it."""

from __future__ import annotations

import json
import sys

import pytest

from megatron_crossbert.benchmarking.preprocess import (
    PreprocessBenchOptions, combine_inputs, measure, preprocess_markdown, run_preprocess_bench,
)
from megatron_crossbert.cli import bench


@pytest.mark.slow
def test_measure_counts_children_cpu_and_own_peak_rss():
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6: pass"
    code = (f"import subprocess, sys; subprocess.run([sys.executable, '-c', {burn!r}], check=True)\n"
            "b = bytearray(150 * 2**20); b[::4096] = b'x' * len(b[::4096])\n")
    result = measure("child", [sys.executable, "-c", code], nbytes=10**6)
    assert result.rc == 0 and result.cpu_s >= 0.6  # the grandchild's CPU is counted
    assert 150 < result.peak_rss_mb < 400  # the command's own peak, not the (large) pytest process's


@pytest.mark.slow
def test_measure_counts_a_process_its_parent_never_waits_for():
    """datatrove's tasks are children of its forkserver, which their parent never waits for: an orphan's
    CPU must still count (the launcher is a subreaper and reaps the whole tree)."""
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6: pass"
    code = f"import subprocess, sys; subprocess.Popen([sys.executable, '-c', {burn!r}])"  # exits at once
    result = measure("orphan", [sys.executable, "-c", code], nbytes=10**6)
    assert result.rc == 0 and result.cpu_s >= 0.6 and result.wall_s >= 0.6


def test_bench_table_without_megatron(tmp_path, text_corpus, bpe_tokenizer):
    corpus = text_corpus.path
    import gzip

    (tmp_path / "c.jsonl.gz").write_bytes(gzip.compress(corpus.read_bytes()))
    combined, nbytes = combine_inputs([str(corpus), str(tmp_path / "c.jsonl.gz")], tmp_path / "x" / "all.jsonl")
    assert combined.read_bytes() == corpus.read_bytes() * 2 and nbytes == 2 * corpus.stat().st_size
    report = run_preprocess_bench(PreprocessBenchOptions(inputs=[str(corpus)], tokenizer=str(bpe_tokenizer),
                                                         work_dir=str(tmp_path / "w"), workers=1))
    names = [c["name"] for c in report["cases"]]
    assert names == ["crossbert-preprocess --backend auto", "crossbert-preprocess --backend tokenizers",
                     "tokenizers encode_batch_fast ceiling (1 threads)"]
    assert all(c["rc"] == 0 and c["cpu_s"] > 0 and c["peak_rss_mb"] > 0 for c in report["cases"]), report["cases"]
    table = preprocess_markdown(report)
    assert "| case | CPU-s | wall s | MB/s | peak RSS MB | rc |" in table
    json.dumps(report)


def test_bench_cli_help_and_bad_checkout(capsys, tmp_path):
    with pytest.raises(SystemExit) as exc:
        bench.main(["preprocess", "--help"])
    out = capsys.readouterr().out
    assert exc.value.code == 0 and "--megatron-lm" in out and "--backends" in out
    with pytest.raises(ValueError, match="not a Megatron-LM checkout"):
        PreprocessBenchOptions(inputs=["x"], tokenizer="t", work_dir=str(tmp_path), megatron_lm=str(tmp_path))
