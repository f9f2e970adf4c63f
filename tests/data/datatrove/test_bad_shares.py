"""A datatrove task whose whole share is an empty file, blank lines or bad JSON behaves as crossbert-preprocess
over the same files does: the lines are skips in the task's report, the task finishes (no traceback, exit 0),
a rerun continues, and the merge holds every good document. Generated corpus, the session's BPE tokenizer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from megatron_crossbert.cli.merge import main as merge_main
from megatron_crossbert.cli.preprocess_datatrove import main as datatrove_main
from megatron_crossbert.data.datatrove.shards import task_files
from megatron_crossbert.data.indexed.merge import read_shards
from megatron_crossbert.data.preprocessing.preprocess import PreprocessOptions, preprocess
from tests.support.synthetic_text import synthetic_documents, write_jsonl

GOOD = (11, 8, 13)


def _bad_file(path: Path, kind: str, size: int) -> tuple[str, str]:
    """(path, skip kind) of a file as large as a good one (so it is a task's whole share) that holds no document."""
    if kind == "empty_file":
        path.write_bytes(b"")
    elif kind == "blank_line":
        path.write_bytes(b"\n" * size)
    else:
        path.write_bytes(b'{"text": oops\n' * (size // 14 + 1))
    return str(path), kind


def _alone(files: list[str], bad: str) -> tuple[int, list[int]]:
    """The fewest tasks (at least one per file) that give ``bad`` a task of its own, and that task."""
    for tasks in range(len(files), 8 * len(files)):
        owner = [rank for rank in range(tasks) if task_files(files, rank, tasks) == [bad]]
        if owner:
            return tasks, owner
    raise AssertionError(f"no task count gives {bad} a task of its own")


@pytest.mark.parametrize("kind, position", [("empty_file", 1), ("blank_line", 0), ("invalid_json", 3),
                                            ("invalid_json", 1), ("blank_line", 2)])
def test_a_task_whose_share_holds_no_document_reports_its_skips_and_finishes(tmp_path, bpe_tokenizer, capfd, kind,
                                                                              position):
    files = [str(write_jsonl(tmp_path / f"in{i}.jsonl", synthetic_documents(n, seed=80 + i, max_sentences=2)))
             for i, n in enumerate(GOOD)]
    bad, _ = _bad_file(tmp_path / "bad.jsonl", kind, Path(files[0]).stat().st_size)
    files.insert(position, bad)
    tasks, owner = _alone(files, bad)
    argv = ["--input", *files, "--output-dir", str(tmp_path / "dt"), "--tokenizer", str(bpe_tokenizer),
            "--tasks", str(tasks), "--parallel-tasks", "1"]
    assert datatrove_main(argv) == 0
    assert datatrove_main(argv) == 0  # the rerun continues the finished run
    assert "Traceback" not in capfd.readouterr().err
    reports = [json.loads(p.read_text()) for p in sorted((tmp_path / "dt").glob("*_preprocess_report.json"))]
    assert len(reports) == tasks and reports[owner[0]]["outputs"] == {}
    assert reports[owner[0]]["skipped_by_kind"] == {kind: reports[owner[0]]["documents_skipped"]}
    single = preprocess(PreprocessOptions(inputs=files, output_prefix=str(tmp_path / "one"),
                                          tokenizer=str(bpe_tokenizer), progress=False))
    kinds = {k: sum(r["skipped_by_kind"].get(k, 0) for r in reports) for k in single["skipped_by_kind"]}
    assert kinds == single["skipped_by_kind"]
    assert merge_main(["--input", str(tmp_path / "dt"), "--output-prefix", str(tmp_path / "m"), "--no-progress"]) == 0
    assert read_shards([str(tmp_path / "m")]).shards[0].documents == single["documents_written"] == sum(GOOD)


@pytest.mark.parametrize("kinds", [("blank_line", "empty_file"), ("invalid_json", "blank_line", "invalid_json")])
def test_a_run_in_which_every_document_is_skipped_fails_in_one_line(tmp_path, bpe_tokenizer, capfd, kinds):
    """As one crossbert-preprocess over the same files: nothing written is an error that says what was skipped."""
    files = [_bad_file(tmp_path / f"bad{i}.jsonl", kind, 300)[0] for i, kind in enumerate(kinds)]
    argv = ["--input", *files, "--output-dir", str(tmp_path / "dt"), "--tokenizer", str(bpe_tokenizer),
            "--tasks", str(len(files)), "--parallel-tasks", "1"]
    assert datatrove_main(argv) == 2
    errors = [line for line in capfd.readouterr().err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and f"no documents written by the run's {len(files)} task(s)" in errors[0]
    assert all(f"{kind}=" in errors[0] for kind in kinds)
