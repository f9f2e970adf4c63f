"""crossbert-finetune's resume key holds what a run's numbers depend on, by content: the model's files (not their
directory), the task's data files (not the --glue-dir path), the preset and its overrides. Another key in the same
--out is refused in one line and nothing finished is lost; the same content elsewhere resumes. Bad labels and an
--out that cannot be a folder are one line before anything trains; a full disk names the file."""

from __future__ import annotations

import errno
import json
import shutil

import pytest

from megatron_crossbert.cli.finetune import main
from megatron_crossbert.evaluation.encoders import resolve_model
from megatron_crossbert.evaluation.finetune import runner
from tests.support.synthetic_eval import write_glue_fixture


def _argv(model, glue, out, *extra: str) -> list[str]:
    return ["--model", str(model), "--glue-dir", str(glue), "--out", str(out), "--no-progress", "--threads", "1",
            "--cache-dir", "none", "--tasks", "RTE", "--max-train", "8", "--max-dev", "8", "--epochs", "1", *extra]


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in err, err  # (transformers' weight-loading bar may precede it)
    return lines[0]


def _snapshot(out):
    return {p: p.read_bytes() for p in sorted(out.rglob("*.json"))}


@pytest.mark.slow
def test_another_glue_dirs_data_into_the_same_out_is_refused_and_a_copy_resumes(tiny_hf_encoder, tmp_path, capsys):
    first, other = write_glue_fixture(tmp_path / "a", n=16), write_glue_fixture(tmp_path / "b", n=16, seed=7)
    out = tmp_path / "ft"
    assert main(_argv(tiny_hf_encoder, first, out)) == 0
    before = _snapshot(out)
    assert main(_argv(tiny_hf_encoder, other, out)) == 2  # other rows under the same file names
    assert "RTE" in _one_error_line(capsys) and _snapshot(out) == before  # nothing finished is lost or rewritten
    copy = shutil.copytree(first, tmp_path / "copy")
    assert main(_argv(tiny_hf_encoder, copy, out)) == 0  # the same bytes in another folder: resumed
    assert json.loads((out / "results.json").read_text())["runs"] == {"resumed": 1, "run_now": 0}


def test_the_model_identity_is_its_content_not_its_folder(tiny_hf_encoder, tmp_path):
    copy = shutil.copytree(tiny_hf_encoder, tmp_path / "renamed_copy")
    assert resolve_model(copy).identity == resolve_model(tiny_hf_encoder).identity
    vocab = copy / "tokenizer.json"
    vocab.write_text(vocab.read_text().replace('"[UNK]"', '"[unk]"'))  # same weights, another tokenizer
    assert resolve_model(copy).identity != resolve_model(tiny_hf_encoder).identity


def test_the_data_key_is_each_task_files_content(tmp_path):
    first, copy = write_glue_fixture(tmp_path / "a", n=8), tmp_path / "copy"
    shutil.copytree(first, copy)
    assert runner.data_key(first, "RTE") == runner.data_key(copy, "RTE")
    dev = copy / "RTE" / "dev.tsv"
    dev.write_text(dev.read_text().replace("\tentailment", "\tnot_entailment", 1))  # one label flipped
    assert runner.data_key(first, "RTE") != runner.data_key(copy, "RTE")


@pytest.mark.parametrize("edit,where", [
    (lambda glue: _replace_label(glue / "SST-2" / "train.tsv", 3, "-1"), "SST-2/train.tsv:3: label '-1'"),
    (lambda glue: (glue / "SST-2" / "dev.tsv").write_text("sentence\tlabel\n"), "SST-2/dev.tsv: no data rows"),
])
def test_a_bad_label_or_an_empty_dev_file_is_one_line(tiny_hf_encoder, tmp_path, capsys, edit, where):
    glue = write_glue_fixture(tmp_path / "glue", n=8)
    edit(glue)
    assert main(_argv(tiny_hf_encoder, glue, tmp_path / "ft", "--tasks", "SST-2")) == 2
    assert where in _one_error_line(capsys)


def _replace_label(path, line: int, label: str) -> None:
    lines = path.read_text().splitlines()
    lines[line - 1] = lines[line - 1].rsplit("\t", 1)[0] + "\t" + label
    path.write_text("\n".join(lines) + "\n")


def test_an_out_that_is_a_file_is_refused_before_training(tiny_hf_encoder, tmp_path, capsys, monkeypatch):
    glue, out = write_glue_fixture(tmp_path / "glue", n=8), tmp_path / "results.txt"
    out.write_text("keep me\n")
    monkeypatch.setattr(runner, "run_one", lambda *a, **k: pytest.fail("trained before checking --out"))
    assert main(_argv(tiny_hf_encoder, glue, out)) == 2
    assert f"--out {out}: is a file" in _one_error_line(capsys) and out.read_text() == "keep me\n"


@pytest.mark.slow
def test_a_full_disk_names_the_file_it_was_writing(tiny_hf_encoder, tmp_path, capsys, monkeypatch):
    glue, out = write_glue_fixture(tmp_path / "glue", n=8), tmp_path / "ft"

    def full(path, text):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(runner, "atomic_write_text", full)
    assert main(_argv(tiny_hf_encoder, glue, out)) == 2
    err = _one_error_line(capsys)
    assert "no space left on device" in err and str(out / "runs" / "RTE") in err, err


def test_a_native_checkpoint_copied_elsewhere_keeps_its_identity(tiny_checkpoint, tmp_path):
    from megatron_crossbert.convert.native import open_export_source
    from megatron_crossbert.evaluation.encoders import native_checkpoint_identity

    copy = shutil.copytree(tiny_checkpoint, tmp_path / "another_name" / "ckpt")
    first, second = (native_checkpoint_identity(open_export_source(path, "off")) for path in (tiny_checkpoint, copy))
    assert first == second and first.startswith("native:iter_0000002:")
