"""Every damaged or hostile input ends in one ``error:`` line, exit status 2, and no traceback.

One subprocess (``tests/support/cli_cases.py``) pays the torch/megatron imports once and forks a real
process per case, so each case has its own exit status and stderr.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.support.checkpoints import flip_byte
from tests.support.cli_cases import run_cases
from tests.support.training import copy_corpus, tiny_overrides

PRETRAIN = "megatron_crossbert.cli.pretrain"


def _pretrain(prefix: str, *extra: str, save: Path | None = None) -> dict:
    overrides = tiny_overrides("crossbert", prefix, save, training__train_iters=2)
    return {"module": PRETRAIN, "argv": [a for o in overrides for a in ("--set", o)] + list(extra)}


def _truncate(path: Path, keep: int) -> None:
    with open(path, "r+b") as handle:
        handle.truncate(keep)


def _empty_dataset(directory: Path) -> str:
    from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

    directory.mkdir()
    prefix = str(directory / "corpus_text_document")
    IndexedDatasetBuilder(prefix + ".bin", dtype=np.int32).finalize(prefix + ".idx")
    return prefix


def _checkpoint_copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst / "iter_0000002"


def _cli(name: str, *argv: str) -> dict:
    return {"module": f"megatron_crossbert.cli.{name}", "argv": [str(a) for a in argv]}


def _user_error_cases(tmp: Path, corpus: str, tokenizer: Path) -> dict[str, tuple[dict, str]]:
    """Settings this machine cannot honour, and every console script's plain user errors (unguarded,
    fp8 trains in bf16 with rc 0, TE layers give a traceback, crossbert-preprocess exits 1)."""
    done = tmp / "done"
    done.mkdir()
    (done / "corpus_preprocess_report.json").write_text("{}")
    (done / "tok").mkdir()
    (done / "tok" / "tokenizer.json").write_text("{}")
    missing = tmp / "missing.jsonl"
    return {
        "fp8 on CPU": (_pretrain(corpus, "--precision", "fp8"), "training.precision=fp8 needs CUDA and an importable "
                                                                 "Transformer Engine, but no CUDA device"),
        "TE layers on CPU": (_pretrain(corpus, "--set", "model.transformer_impl=transformer_engine"),
                             "model.transformer_impl=transformer_engine needs CUDA"),
        "preprocess: missing input": (_cli("preprocess", "--input", missing, "--output-prefix", tmp / "pp",
                                           "--tokenizer", tokenizer, "--no-progress"), f"{missing}"),
        "preprocess: existing output": (_cli("preprocess", "--input", missing, "--output-prefix", done / "corpus",
                                             "--tokenizer", tokenizer, "--no-progress"),
                                        "refusing to overwrite existing outputs (pass --force)"),
        "train-tokenizer: existing": (_cli("train_tokenizer", "--input", missing, "--output-dir", done / "tok"),
                                      f"{done / 'tok'}: already holds a tokenizer"),
        "probe: no tasks": (_cli("probe", "--model", tmp), "no tasks: give --glue-dir"),
        "mteb: no tasks": (_cli("mteb", "--model", tmp), "no tasks: give --benchmark"),
    }


def _checksum_cases(tmp: Path, corpus: str, ckpt: Path) -> dict[str, tuple[dict, str]]:
    """One flipped byte in a shard: every reader names the file (checking sizes alone, all of them would read
    the changed weight silently)."""
    from tests.support.synthetic_eval import write_jsonl_task

    flipped = _checkpoint_copy(ckpt, tmp / "flipped")
    flip_byte(flipped / "__0_0.distcp")
    line = f"{flipped}/__0_0.distcp: content changed since it was saved (xxh3_128 "
    unrecorded = _checkpoint_copy(ckpt, tmp / "unrecorded")  # damaged, not "saved by an older version" with rc 0
    (unrecorded / "checksums.json").unlink()
    flip_byte(unrecorded / "__0_0.distcp")
    task = write_jsonl_task(tmp / "task", n_train=8, n_test=8)
    cache = ("--cache-dir", "none")
    return {
        "flipped byte: resume": (_pretrain(corpus, "--load", str(flipped.parent)), line),
        "flipped byte: init_from": (_pretrain(corpus, "--init-from", str(flipped.parent)), line),
        "flipped byte: export": (_cli("convert_hf", "export", flipped.parent, tmp / "hf_flipped"), line),
        "flipped byte: probe": (_cli("probe", "--model", flipped.parent, "--jsonl", task, *cache), line),
        "flipped byte: mteb": (_cli("mteb", "--model", flipped.parent, "--local-task", f"classification:t:{task}",
                                    *cache), line),
        "record deleted, flipped byte: export": (_cli("convert_hf", "export", unrecorded.parent, tmp / "hf_unrec"),
                                                 f"{unrecorded}/checksums.json: missing, but this checkpoint was "
                                                 f"saved with checksums"),
    }


def _build_cases(tmp: Path, corpus: str, ckpt: Path) -> dict[str, tuple[dict, str]]:
    """name -> (case, a fragment the single error line must contain)."""
    from tests.support.checkpoints import write_malicious_metadata, write_tokenizer

    short_bin = copy_corpus(corpus, tmp / "short_bin")
    _truncate(Path(short_bin + ".bin"), 1000)
    short_idx = copy_corpus(corpus, tmp / "short_idx")
    _truncate(Path(short_idx + ".idx"), 40)
    no_meta = _checkpoint_copy(ckpt, tmp / "no_meta")
    (no_meta / ".metadata").unlink()
    short_shard = _checkpoint_copy(ckpt, tmp / "short_shard")
    _truncate(short_shard / "__0_0.distcp", 5000)
    evil = _checkpoint_copy(ckpt, tmp / "evil")
    write_malicious_metadata(evil / ".metadata", tmp / "pwned")
    junk_latest = tmp / "junk_latest"
    shutil.copytree(ckpt, junk_latest)
    (junk_latest / "latest").write_bytes(b"\xff\xfe\x00junk")
    empty = _empty_dataset(tmp / "empty")
    binary_tok = tmp / "tokenizer.bin"
    binary_tok.write_bytes(bytes(range(256)) * 4)
    return _user_error_cases(tmp, corpus, write_tokenizer(tmp / "tok")) | _checksum_cases(tmp, corpus, ckpt) | {
        "truncated .bin": (_pretrain(short_bin), f"{short_bin}.bin: size"),
        "truncated .idx": (_pretrain(short_idx), f"{short_idx}.idx: truncated: 40 bytes"),
        "0-document dataset": (_pretrain(empty), f"{empty}.idx: the dataset holds 0 documents"),
        "missing .metadata": (_pretrain(corpus, "--load", str(no_meta.parent)), f"{no_meta}/.metadata: missing"),
        # the resume's verify reads the optimizer layout from .metadata, whose shard sizes are checked before the
        # collective checksum pass starts: the size check names the short file first, with checksums on or off
        "truncated .distcp": (_pretrain(corpus, "--load", str(short_shard.parent)),
                              f"{short_shard}/__0_0.distcp: truncated: 5000 bytes"),
        "truncated .distcp, no checksums": (_pretrain(corpus, "--load", str(short_shard.parent),
                                                      "--checkpoint-verify", "off"),
                                            f"{short_shard}/__0_0.distcp: truncated: 5000 bytes"),
        "binary --tokenizer": (_pretrain(corpus, "--tokenizer", str(binary_tok)), f"{binary_tok}: not a tokenizer.json"),
        "malicious .metadata (export)": ({"module": "megatron_crossbert.cli.convert_hf",
                                          "argv": ["export", str(evil.parent), str(tmp / "hf"), "--tokenizer",
                                                   str(tmp / "tok")]},
                                         "refused to unpickle posix.mkdir"),
        "junk latest beside checkpoints": (_pretrain(corpus, save=junk_latest),
                                           f"{junk_latest}/latest: holds 7 bytes that are not text"),
    }


@pytest.fixture(scope="module")
def trained(tiny_checkpoint, indexed_corpus) -> tuple[str, Path]:
    return indexed_corpus, tiny_checkpoint


def _accepted_cases(tmp: Path, corpus: str, ckpt: Path) -> dict[str, tuple[dict, str]]:
    """Starts that must succeed: name -> (case, a fragment stderr must contain)."""
    from tests.support.training import write_corpus

    other = write_corpus(tmp / "other_data", seed=1)
    locked = tmp / "locked"
    shutil.copytree(ckpt, locked)
    return {
        "export of a checkpoint whose run holds the lock": (_cli(
            "convert_hf", "export", locked, tmp / "hf_locked", "--tokenizer", tmp / "tok"), ""),
        "resume on other data, allowed": (_pretrain(other, "--load", str(ckpt), "--allow-data-change"),
                                          "on changed data, allowed by checkpoint.allow_data_change (dataset 1 ("),
    }


def _data_change_cases(tmp: Path, ckpt: Path) -> dict[str, tuple[dict, str]]:
    """Resuming on other data (unguarded: silently, from the old sample count)."""
    other = str(tmp / "other_data" / "corpus_text_document")  # written by _accepted_cases
    return {"resume on other data": (_pretrain(other, "--load", str(ckpt)),
                                     f"{ckpt / 'iter_0000002'}: this run's data differs from the checkpoint's "
                                     f"(dataset 1 (")}


@pytest.mark.slow
def test_each_bad_input_is_one_error_line(trained, tmp_path):
    from megatron_crossbert.checkpoint.run_lock import RunLock

    corpus, ckpt = trained
    accepted = _accepted_cases(tmp_path, corpus, ckpt)
    cases = _build_cases(tmp_path, corpus, ckpt) | _data_change_cases(tmp_path, ckpt)
    with RunLock(tmp_path / "locked"):  # a live run in that directory: readers never take its lock
        outputs = run_cases([case for case, _ in (cases | accepted).values()], tmp_path)
    results = dict(zip(cases | accepted, outputs))
    assert "the new data's sample stream starts at sample 8" in results["resume on other data, allowed"]["stderr"]
    for name, (_, fragment) in accepted.items():
        result = results.pop(name)
        assert result["rc"] == 0 and fragment in result["stderr"], (name, result["stderr"][-3000:])
    for name, result in results.items():
        errors = [line for line in result["stderr"].splitlines() if line.startswith("error: ")]
        assert result["rc"] == 2, (name, result)
        assert "Traceback" not in result["stderr"], (name, result["stderr"][-3000:])
        assert len(errors) == 1 and cases[name][1] in errors[0], (name, errors, cases[name][1])
    assert not (tmp_path / "pwned").exists()
    junk = [line for line in results["junk latest beside checkpoints"]["stderr"].splitlines()
            if line.startswith("error: ")][0]
    assert "--resume-from iter_0000002" in junk and "--overwrite" in junk


def test_debug_flag_shows_the_traceback(capsys, tmp_path):
    """--debug re-raises (full traceback); without it the same error is one line and status 2."""
    from megatron_crossbert.checkpoint.errors import CheckpointError
    from megatron_crossbert.cli import convert_hf

    missing = str(tmp_path / "nope")
    assert convert_hf.main(["export", missing, str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.startswith("error: cannot export")
    with pytest.raises(Exception) as info:
        convert_hf.main(["export", missing, str(tmp_path / "out"), "--debug"])
    assert isinstance(info.value.__cause__, CheckpointError)


def test_cli_main_prints_once_from_rank_zero_and_keeps_bugs_loud(capsys, monkeypatch):
    from megatron_crossbert.checkpoint.errors import CheckpointError
    from megatron_crossbert.cli.errors import cli_main

    @cli_main
    def fails(argv):
        raise {"ckpt": CheckpointError("a/latest: holds 'x'\n  second line"), "bug": KeyError("k"),
               "missing": FileNotFoundError("tokenizer not found: t")}[argv[0]]

    monkeypatch.delenv("CROSSBERT_DEBUG", raising=False)
    assert fails(["ckpt"]) == 2 and capsys.readouterr().err == "error: a/latest: holds 'x'; second line\n"
    assert fails(["missing"]) == 2 and capsys.readouterr().err == "error: tokenizer not found: t\n"
    monkeypatch.setenv("RANK", "1")  # under torchrun every rank fails alike: only rank 0 prints
    assert fails(["ckpt"]) == 2 and capsys.readouterr().err == ""
    with pytest.raises(KeyError):  # not a user error: the traceback stays
        fails(["bug"])
    monkeypatch.setenv("CROSSBERT_DEBUG", "1")
    with pytest.raises(CheckpointError):
        fails(["ckpt"])


def test_help_states_the_resume_policies():
    import importlib

    from megatron_crossbert.cli.pretrain import build_parser

    text = " ".join(build_parser().format_help().split())
    assert "refuse (default), keep the checkpoint's schedule, or apply this run's config" in text
    assert "--resume-from ITER_DIR" in text and "never deleted" in text and "--allow-tokenizer-change" in text
    for module in [f"megatron_crossbert.cli.{name}" for name in ("bench", "convert_hf", "finetune", "mteb", "pretrain",
                                                                  "probe", "train_tokenizer")] + ["crossbert_demo.cli"]:
        assert "--debug" in importlib.import_module(module).build_parser().format_help()
