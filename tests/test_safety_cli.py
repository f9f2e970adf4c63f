"""Every damaged or hostile input ends in one ``error:`` line, exit status 2, and no traceback.

One subprocess (``tests/cli_cases.py``) pays the torch/megatron imports once and forks a real
process per case, so each case has its own exit status and stderr.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from test_train_support import tiny_config, tiny_overrides

REPO = Path(__file__).resolve().parents[1]
PRETRAIN = "megatron_crossbert.cli.pretrain"


def _pretrain(prefix: str, *extra: str, save: Path | None = None) -> dict:
    overrides = tiny_overrides("crossbert", prefix, save, training__train_iters=2)
    return {"module": PRETRAIN, "argv": [a for o in overrides for a in ("--set", o)] + list(extra)}


def _copy_corpus(src: str, dst: Path) -> str:
    dst.mkdir()
    for suffix in (".bin", ".idx"):
        shutil.copy(src + suffix, dst / ("corpus_text_document" + suffix))
    return str(dst / "corpus_text_document")


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
    """Settings this machine cannot honour, and every console script's plain user errors (issue 17:
    fp8 trained in bf16 with rc 0, TE layers gave a traceback, crossbert-preprocess exited 1)."""
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


def _build_cases(tmp: Path, corpus: str, ckpt: Path) -> dict[str, tuple[dict, str]]:
    """name -> (case, a fragment the single error line must contain)."""
    from test_safety_checkpoint import write_malicious_metadata, write_tokenizer

    short_bin = _copy_corpus(corpus, tmp / "short_bin")
    _truncate(Path(short_bin + ".bin"), 1000)
    short_idx = _copy_corpus(corpus, tmp / "short_idx")
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
    return _user_error_cases(tmp, corpus, write_tokenizer(tmp / "tok")) | {
        "truncated .bin": (_pretrain(short_bin), f"{short_bin}.bin: size"),
        "truncated .idx": (_pretrain(short_idx), f"{short_idx}.idx: truncated: 40 bytes"),
        "0-document dataset": (_pretrain(empty), f"{empty}.idx: the dataset holds 0 documents"),
        "missing .metadata": (_pretrain(corpus, "--load", str(no_meta.parent)), f"{no_meta}/.metadata: missing"),
        "truncated .distcp": (_pretrain(corpus, "--load", str(short_shard.parent)),
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
def trained(tmp_path_factory, indexed_corpus) -> tuple[str, Path]:
    from megatron_crossbert.training import train

    root = tmp_path_factory.mktemp("cli_safety")
    train(tiny_config("crossbert", indexed_corpus, root / "ckpt", training__train_iters=2))
    return indexed_corpus, root / "ckpt"


def run_cases(cases: list[dict], tmp: Path) -> list[dict]:
    (tmp / "cases.json").write_text(json.dumps(cases))
    env = {k: v for k, v in os.environ.items() if k not in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "tests"), env.get("PYTHONPATH", "")])
    subprocess.run([sys.executable, str(REPO / "tests" / "cli_cases.py"), str(tmp / "cases.json"),
                    str(tmp / "results.json")], check=True, cwd=tmp, env=env, timeout=600)
    return json.loads((tmp / "results.json").read_text())


def test_each_bad_input_is_one_error_line(trained, tmp_path):
    corpus, ckpt = trained
    cases = _build_cases(tmp_path, corpus, ckpt)
    results = dict(zip(cases, run_cases([case for case, _ in cases.values()], tmp_path)))
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
    for module in [f"megatron_crossbert.cli.{name}" for name in ("bench", "convert_hf", "mteb", "pretrain", "probe",
                                                                  "train_tokenizer")] + ["crossbert_demo.cli"]:
        assert "--debug" in importlib.import_module(module).build_parser().format_help()
