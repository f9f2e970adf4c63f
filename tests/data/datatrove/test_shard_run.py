"""A sharded preprocessing run records what it read and how it was cut, so a rerun into the same folder is the
same run or a refusal: another task count, a grown, changed, added or missing input, or another encoding is
refused in one line naming the folder and what changed (nothing of the earlier run touched), and --force
starts over with the earlier run moved aside. Generated corpus and the session's BPE tokenizer; tasks run in
the launcher (parallel_tasks=1)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from megatron_crossbert.cli.preprocess_datatrove import main as datatrove_main
from megatron_crossbert.content_identity import sampled_identity
from megatron_crossbert.data.datatrove.launch import LaunchConfig, launch
from megatron_crossbert.data.datatrove.shard_run import RUN_FILE
from megatron_crossbert.data.datatrove.shards import checked_prefixes, task_files
from megatron_crossbert.data.indexed.merge import read_shards
from megatron_crossbert.data.preprocessing.preprocess import PreprocessOptions
from tests.support.synthetic_text import synthetic_documents, write_jsonl


def _files(root: Path, counts: list[int], seed: int = 0) -> list[str]:
    return [str(write_jsonl(root / f"in{i}.jsonl", synthetic_documents(n, seed=seed + i, max_sentences=3)))
            for i, n in enumerate(counts)]


def _launch(files, tokenizer, out: Path, tasks: int, force: bool = False, **encoding):
    cfg = LaunchConfig(output_dir=str(out), logging_dir=str(out / "logs"), tasks=tasks, parallel_tasks=1, force=force)
    launch(cfg, PreprocessOptions(inputs=list(files), output_prefix="unused", tokenizer=str(tokenizer),
                                  progress=False, **encoding))


def _documents(out: Path) -> int:
    return sum(shard.documents for shard in read_shards(checked_prefixes(out)).shards)


def _snapshot(out: Path) -> dict[str, int]:
    return {str(p.relative_to(out)): p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}


@pytest.mark.parametrize("counts, first, second", [([30, 20, 25], 2, 3), ([10, 10, 10, 10], 3, 2), ([40], 1, 4)])
def test_a_rerun_with_another_task_count_is_refused_and_touches_nothing(tmp_path, bpe_tokenizer, counts, first,
                                                                         second):
    files = _files(tmp_path, counts)
    out = tmp_path / "dt"
    _launch(files, bpe_tokenizer, out, first)
    assert _documents(out) == sum(counts)
    before = _snapshot(out)
    with pytest.raises(ValueError) as refusal:
        _launch(files, bpe_tokenizer, out, second)
    message = str(refusal.value)
    assert "\n" not in message and message.startswith(f"{out}: ") and f"--tasks {first} then, {second} now" in message
    assert _snapshot(out) == before and _documents(out) == sum(counts)


@pytest.mark.parametrize("grown, added", [(0, 50), (2, 7), (1, 1)])
def test_a_rerun_after_an_input_grew_is_refused(tmp_path, bpe_tokenizer, grown, added):
    files = _files(tmp_path, [25, 15, 30])
    out = tmp_path / "dt"
    _launch(files, bpe_tokenizer, out, 2)
    size = Path(files[grown]).stat().st_size
    with open(files[grown], "a", encoding="utf-8") as handle:
        handle.writelines(json.dumps({"text": t}) + "\n" for t in synthetic_documents(added, seed=99))
    before = _snapshot(out)
    with pytest.raises(ValueError, match=f"input {files[grown]}: {size} bytes then, {Path(files[grown]).stat().st_size}"
                                         " now") as refusal:
        _launch(files, bpe_tokenizer, out, 2)
    assert "\n" not in str(refusal.value) and _snapshot(out) == before


def test_same_size_edits_added_gone_inputs_and_encoding_changes_are_named(tmp_path, bpe_tokenizer):
    files = _files(tmp_path, [12, 18, 9])
    out = tmp_path / "dt"
    _launch(files, bpe_tokenizer, out, 2)
    text = Path(files[1]).read_text(encoding="utf-8")
    Path(files[1]).write_text(text.replace("a", "b", 1) if "a" in text else text.replace("e", "f", 1), encoding="utf-8")
    with pytest.raises(ValueError, match=f"input {files[1]}: other content at the same size"):
        _launch(files, bpe_tokenizer, out, 2)
    (tmp_path / "more").mkdir()
    extra = _files(tmp_path / "more", [5], seed=40)
    with pytest.raises(ValueError, match=f"input {extra[0]} added"):
        _launch(files + extra, bpe_tokenizer, out, 2)
    with pytest.raises(ValueError, match=f"input {files[2]} gone"):
        _launch(files[:2], bpe_tokenizer, out, 2)
    with pytest.raises(ValueError, match="--append-eod False then, True now"):
        _launch(files, bpe_tokenizer, out, 2, append_eod=True)


def test_the_same_rerun_continues_and_force_starts_over_moving_the_earlier_run_aside(tmp_path, bpe_tokenizer):
    files = _files(tmp_path, [20, 35, 10])
    out = tmp_path / "dt"
    _launch(files, bpe_tokenizer, out, 2)
    (out / "notes.txt").write_text("the user's own file")
    before = _snapshot(out)
    _launch(files, bpe_tokenizer, out, 2)  # the same run: every task is skipped
    assert {k: v for k, v in _snapshot(out).items() if not k.startswith("logs")} == \
        {k: v for k, v in before.items() if not k.startswith("logs")}
    with open(files[0], "a", encoding="utf-8") as handle:
        handle.writelines(json.dumps({"text": t}) + "\n" for t in synthetic_documents(13, seed=7))
    _launch(files, bpe_tokenizer, out, 3, force=True)
    assert _documents(out) == 20 + 13 + 35 + 10
    aside = [p for p in out.iterdir() if p.name.startswith("earlier-run.replaced-")]
    assert len(aside) == 1 and (aside[0] / RUN_FILE).is_file() and len(list(aside[0].glob("*.idx"))) == 2
    assert (out / "notes.txt").read_text() == "the user's own file"
    assert len([p for p in out.iterdir() if p.name.startswith("logs.replaced-")]) == 1


def test_a_folder_with_task_files_but_no_record_is_refused(tmp_path, bpe_tokenizer, capsys):
    files = _files(tmp_path, [8, 8])
    out = tmp_path / "dt"
    out.mkdir()
    (out / "00001_preprocess_report.json").write_text("{}")
    argv = ["--input", *files, "--output-dir", str(out), "--tokenizer", str(bpe_tokenizer), "--tasks", "2",
            "--parallel-tasks", "1"]
    assert datatrove_main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {out}: holds an earlier run") and "\n" not in err and "--force" in err
    assert datatrove_main(argv + ["--force"]) == 0
    assert _documents(out) == 16


def test_a_task_refuses_an_input_whose_size_changed_since_the_launch(tmp_path):
    files = _files(tmp_path, [6, 9, 4])
    sizes = [Path(f).stat().st_size for f in files]
    assert [task_files(files, r, 2, sizes) for r in range(2)] == [task_files(files, r, 2) for r in range(2)]
    owner = next(rank for rank in range(2) if files[2] in task_files(files, rank, 2, sizes))
    with open(files[2], "a", encoding="utf-8") as handle:
        handle.write(json.dumps({"text": "one more"}) + "\n")
    grown = Path(files[2]).stat().st_size
    with pytest.raises(ValueError, match=f"{files[2]}: {grown} bytes now, {sizes[2]} when the run was launched"):
        task_files(files, owner, 2, sizes)


def test_an_input_is_identified_by_its_size_and_sampled_bytes(tmp_path):
    """At most 1 MiB read per file (16 spread blocks of 64 KiB), whatever its size; the same bytes elsewhere
    are the same input, one more byte or an edit in a sampled block is another."""
    data = bytearray(range(256)) * (3 << 12)  # 3 MiB
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_bytes(data)
    b.write_bytes(data)
    assert sampled_identity(a) == sampled_identity(b)
    b.write_bytes(data + b"x")
    assert sampled_identity(a) != sampled_identity(b)
    data[len(data) - 1] ^= 1  # the last byte lies in the last sampled block
    b.write_bytes(data)
    assert sampled_identity(a) != sampled_identity(b)
