"""``shared_data``: where the shared data is, and flags whose default is not there are required, in one line.

``$CROSSBERT_DATA_DIR`` points every lookup at a folder of this test's, so what ``../shared/data`` beside
this checkout holds (or lacks) decides nothing here. The CLIs run in this process: each refusal is one
``error:`` line with exit status 2, before anything is written.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from megatron_crossbert.shared_data import DATA_DIR_ENV, default_or_error, find_shared, shared_data_dir


@pytest.fixture
def data_dir(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "data"
    (root / "corpus").mkdir(parents=True)
    (root / "corpus" / "a.jsonl.gz").write_bytes(b"")
    monkeypatch.setenv(DATA_DIR_ENV, str(root))
    return root


def test_the_environment_variable_decides_and_finds_what_is_there(data_dir):
    assert shared_data_dir() == data_dir
    assert find_shared("corpus", "*.jsonl.gz") == data_dir / "corpus" / "*.jsonl.gz"
    assert find_shared("corpus") == data_dir / "corpus"
    assert find_shared("glue") is None and find_shared("glue", "*.tsv") is None
    assert default_or_error("--input", "corpus", "corpus", "*.jsonl.gz") == str(data_dir / "corpus" / "*.jsonl.gz")
    with pytest.raises(ValueError) as info:
        default_or_error("--glue-dir", "GLUE folder", "glue")
    assert str(info.value) == (f"--glue-dir: no default GLUE folder found (no {data_dir / 'glue'}); "
                               f"set {DATA_DIR_ENV} or pass --glue-dir")


def _one_error_line(capsys, rc: int, expected: str) -> None:
    err = capsys.readouterr().err
    assert rc == 2 and err.splitlines() == [expected], err


def test_a_flag_whose_default_is_missing_is_refused_in_one_line(tmp_path, monkeypatch, capsys):
    absent = tmp_path / "absent"
    monkeypatch.setenv(DATA_DIR_ENV, str(absent))
    monkeypatch.chdir(tmp_path)
    from megatron_crossbert.cli.bench import main as bench

    rc = bench(["preprocess", "--tokenizer", str(tmp_path / "tok"), "--work-dir", str(tmp_path / "work")])
    _one_error_line(capsys, rc, f"error: --input: no default corpus found (no {absent / 'corpus' / '*.jsonl.gz'}); "
                                f"set {DATA_DIR_ENV} or pass --input")
    assert not (tmp_path / "work").exists()

    from experiments.claims.__main__ import main as study

    _one_error_line(capsys, study(["--work-dir", str(tmp_path / "study")]),
                    f"error: --corpus: no default corpus found (no {absent / 'corpus'}); set {DATA_DIR_ENV} or pass "
                    f"--corpus")
    assert not (tmp_path / "study").exists()

    from experiments.device_check.cli import main as device_check

    _one_error_line(capsys, device_check(["prepare", "--no-wheels", "--repo", str(tmp_path)]),
                    f"error: --shared-data: no default shared data folder found (no {absent}); set {DATA_DIR_ENV} "
                    f"or pass --shared-data")
