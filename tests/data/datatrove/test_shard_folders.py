"""crossbert-merge (and --blend-file) of a shard folder: the folder whole or one line, never fewer documents with
exit 0. An incomplete run names its missing tasks; a half pair, a gap in the task numbering or a pair no task
wrote is refused; the merge output never lands where a later merge would read it as a shard (real paths, so a
symlinked folder is the folder); --json-key errors name the key. Generated corpus, the session's BPE tokenizer."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from megatron_crossbert.cli.merge import main as merge_main
from megatron_crossbert.data.datatrove.launch import LaunchConfig, launch
from megatron_crossbert.data.datatrove.shard_run import RUN_FILE
from megatron_crossbert.data.indexed.merge import read_shards
from megatron_crossbert.data.preprocessing.preprocess import PreprocessOptions
from tests.support.synthetic_text import synthetic_documents, write_jsonl

COUNTS = (14, 9, 21, 6, 17)
TASKS = 4


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, bpe_tokenizer) -> Path:
    """A finished run: 4 tasks over 5 files (every task has files)."""
    root = tmp_path_factory.mktemp("shard_folders")
    files = [str(write_jsonl(root / f"in{i}.jsonl", synthetic_documents(n, seed=20 + i, max_sentences=4)))
             for i, n in enumerate(COUNTS)]
    cfg = LaunchConfig(output_dir=str(root / "dt"), logging_dir=str(root / "logs"), tasks=TASKS, parallel_tasks=1)
    launch(cfg, PreprocessOptions(inputs=files, output_prefix="unused", tokenizer=str(bpe_tokenizer), progress=False))
    assert len(list((root / "dt").glob("*.idx"))) == TASKS
    return root / "dt"


def _copy(run_dir: Path, dest: Path, record: bool = True) -> Path:
    shutil.copytree(run_dir, dest)
    if not record:
        (dest / RUN_FILE).unlink()
    return dest


def _merge(capsys, folder: Path, *extra: str) -> tuple[int, str]:
    capsys.readouterr()
    rc = merge_main(["--input", str(folder), "--no-progress", *extra])
    err = capsys.readouterr().err.strip()
    assert rc == 0 or (err.startswith("error: ") and "\n" not in err), err
    return rc, err


def _lose_task(folder: Path, rank: int) -> None:
    for path in folder.glob(f"{rank:05d}_*"):
        path.unlink()


def test_a_whole_run_merges_every_document(run_dir, tmp_path, capsys):
    assert _merge(capsys, run_dir, "--output-prefix", str(tmp_path / "all"))[0] == 0
    assert read_shards([str(tmp_path / "all")]).shards[0].documents == sum(COUNTS)


@pytest.mark.parametrize("lost", [(1,), (0, 3), (2, 1)])
@pytest.mark.parametrize("output", ["--output-prefix", "--blend-file"])
def test_an_incomplete_run_is_refused_naming_the_missing_tasks(run_dir, tmp_path, capsys, lost, output):
    folder = _copy(run_dir, tmp_path / "dt")
    for rank in lost:
        _lose_task(folder, rank)
    target = str(tmp_path / ("m" if output == "--output-prefix" else "m.blend.json"))
    rc, err = _merge(capsys, folder, output, target)
    names = ", ".join(str(r) for r in sorted(lost))
    assert rc == 2 and f"task(s) {names} of {TASKS} have no report" in err
    assert not list(tmp_path.glob("m*"))


@pytest.mark.parametrize("record", [True, False])
@pytest.mark.parametrize("rank, kept", [(2, ".bin"), (0, ".idx"), (3, ".bin")])
def test_a_half_pair_is_refused(run_dir, tmp_path, capsys, record, rank, kept):
    folder = _copy(run_dir, tmp_path / "dt", record)
    lost = {".bin": ".idx", ".idx": ".bin"}[kept]
    (folder / f"{rank:05d}_text_document{lost}").unlink()
    rc, err = _merge(capsys, folder, "--output-prefix", str(tmp_path / "m"))
    assert rc == 2 and f"{folder / f'{rank:05d}_text_document'}{lost}: missing beside its {kept}" in err


@pytest.mark.parametrize("lost", [(1,), (0,), (1, 2)])
def test_a_gap_in_the_task_numbering_is_refused_without_a_record(run_dir, tmp_path, capsys, lost):
    folder = _copy(run_dir, tmp_path / "dt", record=False)
    for rank in lost:
        _lose_task(folder, rank)
    rc, err = _merge(capsys, folder, "--blend-file", str(tmp_path / "m.blend.json"))
    assert rc == 2 and f"no shard of task(s) {', '.join(map(str, lost))} " in err


def test_a_pair_no_task_wrote_is_refused_in_a_run_folder(run_dir, tmp_path, capsys):
    folder = _copy(run_dir, tmp_path / "dt")
    for ext in (".bin", ".idx", ".tokenizer.json"):  # what an earlier merge into the folder left
        shutil.copy(folder / f"00001_text_document{ext}", folder / f"all_text_document{ext}")
    rc, err = _merge(capsys, folder, "--output-prefix", str(tmp_path / "m"))
    assert rc == 2 and f"{folder / 'all_text_document'}: not an output of the run's tasks" in err


@pytest.mark.parametrize("record", [True, False])
def test_an_output_inside_the_shard_folder_is_refused_and_never_read_later(run_dir, tmp_path, capsys, record):
    folder = _copy(run_dir, tmp_path / "dt", record)
    rc, err = _merge(capsys, folder, "--output-prefix", str(folder / "all"), "--blend-file",
                     str(tmp_path / "b.blend.json"))
    assert rc == 2 and "is in the folder of the shards it merges" in err
    assert not list(folder.glob("all*")) and not (tmp_path / "b.blend.json").exists()  # both outputs or neither
    assert _merge(capsys, folder, "--output-prefix", str(tmp_path / "all"))[0] == 0
    assert read_shards([str(tmp_path / "all")]).shards[0].documents == sum(COUNTS)


@pytest.mark.parametrize("name", ["00001_text_document", "merged"])
def test_an_output_through_a_symlinked_folder_is_refused_and_no_input_moves(run_dir, tmp_path, capsys, name):
    folder = _copy(run_dir, tmp_path / "dt")
    os.symlink(folder, tmp_path / "link")
    before = sorted(p.name for p in folder.iterdir())
    rc, err = _merge(capsys, folder, "--output-prefix", str(tmp_path / "link" / name), "--force")
    assert rc == 2 and "Errno" not in err and str(tmp_path / "link" / name) in err
    assert sorted(p.name for p in folder.iterdir()) == before


def test_json_key_errors_name_the_key(run_dir, tmp_path, capsys):
    folder = _copy(run_dir, tmp_path / "dt")
    rc, err = _merge(capsys, folder, "--json-key", "title", "--output-prefix", str(tmp_path / "m"))
    assert rc == 2 and "--json-key title" in err and "tokenized text only" in err
    (folder / RUN_FILE).unlink()
    rc, err = _merge(capsys, folder, "--json-key", "summary", "--blend-file", str(tmp_path / "m.blend.json"))
    assert rc == 2 and "--json-key summary" in err and "(the keys here: text)" in err
