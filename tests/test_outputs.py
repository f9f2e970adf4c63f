"""``outputs.py``: outputs outside training appear whole or not at all, a full disk is one line naming the
output, and a file where a directory goes is refused before any work. The real full disk is
``tests/cli/test_disk_full_outputs.py``; here the rules, with real files and a real SIGKILL."""

from __future__ import annotations

import errno
import os
import signal
from pathlib import Path

import pytest

from megatron_crossbert.outputs import OutputError, no_space_in_chain, require_output_dir, staged_dir, writing


def test_a_file_where_a_directory_goes_is_refused(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    with pytest.raises(OutputError, match=f"^--out {afile}: is a file, not a directory$"):
        require_output_dir(afile, "--out")
    with pytest.raises(OutputError, match=f"^--out {afile}/a/b: {afile} is a file, so no directory can be created"):
        require_output_dir(afile / "a" / "b", "--out")
    assert require_output_dir(tmp_path / "new" / "dir", "--out") == tmp_path / "new" / "dir"
    assert not (tmp_path / "new").exists()  # nothing is created by the check
    with pytest.raises(OutputError, match="is a file"):  # --force never moves a user's file aside
        with staged_dir(afile, force=True, what="the export"):
            pass
    assert afile.read_text() == "x"


def test_a_staged_directory_appears_whole_or_not_at_all(tmp_path):
    out = tmp_path / "hf"
    with staged_dir(out, force=False, what="the export") as stage:
        (stage / "config.json").write_text("{}")
        assert not out.exists()
    assert (out / "config.json").read_text() == "{}"
    with pytest.raises(RuntimeError):
        with staged_dir(tmp_path / "broken", force=False, what="the export") as stage:
            (stage / "half").write_text("x")
            raise RuntimeError("the writer failed")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf"]  # no hidden stage, no partial output


def test_merge_keeps_the_other_files_of_a_directory(tmp_path):
    out = tmp_path / "tok"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    (out / "tokenizer.json").write_text("old")
    with staged_dir(out, force=False, what="the tokenizer", merge=True) as stage:
        (stage / "tokenizer.json").write_text("new")
    assert {p.name: p.read_text() for p in out.iterdir()} == {"notes.txt": "mine", "tokenizer.json": "new"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tok"]


def test_a_killed_writers_stage_is_removed_by_the_next_run(tmp_path):
    """The stage is named with its owner (fsutil's temporary names): a SIGKILLed export's stage was hidden
    forever before (``tempfile.mkdtemp``'s name said nothing about whose it was)."""
    out = tmp_path / "hf"
    pid = os.fork()
    if pid == 0:  # the export, killed mid-write as the OOM killer does
        with staged_dir(out, force=False, what="the export") as stage:
            (stage / "model.safetensors").write_bytes(b"\0" * 1024)
            os.kill(os.getpid(), signal.SIGKILL)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == -signal.SIGKILL
    (stale,) = [p for p in tmp_path.iterdir() if p.name.startswith(".hf.tmp-")]
    with staged_dir(out, force=False, what="the export") as stage:
        assert not stale.exists()  # removed before this run writes
        (stage / "config.json").write_text("{}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf"]


def test_writing_names_the_output_and_removes_what_it_created(tmp_path):
    target = tmp_path / "data" / "deeper" / "corpus.bin"
    with pytest.raises(OutputError, match=f"^{target}: no space left on device while writing the dataset; "):
        with writing(target, "the dataset"):
            target.parent.mkdir(parents=True)
            raise OSError(errno.ENOSPC, "No space left on device")  # what a failed write() raises: no filename
    assert not (tmp_path / "data").exists()
    with pytest.raises(OutputError, match=f"^{target}: writing the dataset failed: .*Input/output error"):
        with writing(target, "the dataset"):
            raise OSError(errno.EIO, "Input/output error")
    with pytest.raises(FileNotFoundError):  # an OSError that names its file stays as it is
        with writing(target, "the dataset"):
            open(tmp_path / "missing")


@pytest.mark.parametrize("message", [
    "Error while serializing: I/O error: No space left on device (os error 28)",  # safetensors
    "No space left on device (os error 28)",                                     # tokenizers
])
def test_library_disguises_of_a_full_disk(message):
    assert no_space_in_chain(Exception(message))
    assert not no_space_in_chain(Exception("Permission denied (os error 13)"))


def test_the_cli_prints_it_in_one_line(tmp_path, capsys):
    from megatron_crossbert.cli import probe

    afile = Path(tmp_path / "afile")
    afile.write_text("x")
    assert probe.main(["--model", str(tmp_path), "--jsonl", str(tmp_path), "--out", str(afile)]) == 2
    assert capsys.readouterr().err == f"error: --out {afile}: is a file, not a directory\n"


def test_a_tool_writes_only_its_own_section_of_a_shared_page(tmp_path):
    from megatron_crossbert.outputs import write_section

    page = tmp_path / "docs" / "results.md"
    write_section(page, "claims", "## Claims\n\nfirst", note="written by the study")
    page.write_text("# Results\n\nBy hand.\n\n" + page.read_text() + "\nA closing line by hand.\n")
    write_section(page, "gpu", "## GPU\n\nH200")
    before = page.read_text()
    write_section(page, "claims", "## Claims\n\nsecond", note="written by the study")
    after = page.read_text()
    assert after == before.replace("first", "second")  # nothing outside the section moved
    assert after.startswith("# Results\n\nBy hand.\n\n<!-- claims:start (written by the study) -->")
    assert after.endswith("A closing line by hand.\n\n<!-- gpu:start -->\n\n## GPU\n\nH200\n\n<!-- gpu:end -->\n")
