"""A full disk outside training: every writer says so in one ``error:`` line naming its output, and leaves
nothing on the disk, no partial file and no hidden stage.

Unguarded, export gave a 51-line ``SafetensorError`` traceback; import named its hidden stage and spoke of
training saves; preprocess and the probe/MTEB reports said ``[Errno 28]`` without a path (the probe left a
0-byte ``probe_results.json``, preprocess and MTEB an empty directory); train-tokenizer left a 0-byte
``tokenizer.json`` that looked whole; the evaluation cache's export was a traceback.

All writers run in one private 8 MiB tmpfs (``unshare -m``; skipped with the reason where none can be
mounted), filled to a few KiB before each, through one ``cli_cases`` subprocess.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from tests.support.cli_cases import error_lines
from tests.support.disk_full_driver import run_cases_in_tmpfs

pytestmark = pytest.mark.e2e


def _cli(name: str, *argv, env: dict | None = None) -> dict:
    return {"module": f"megatron_crossbert.cli.{name}", "argv": [str(a) for a in argv], "env": env or {}}


def _fill(mnt: Path, slack: int) -> dict:
    return {"module": "tests.support.disk_full_driver", "argv": ["fill", str(mnt), str(slack)]}


def _inputs(tmp: Path) -> tuple[Path, Path]:
    """A JSONL corpus big enough to overflow the free space, and a probe task (outside the tmpfs)."""
    from tests.support.synthetic_eval import write_jsonl_task

    rng = random.Random(0)
    corpus = tmp / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"text": " ".join(f"w{rng.randrange(120)}" for _ in range(60))}) + "\n"
                              for _ in range(3000)))
    return corpus, write_jsonl_task(tmp / "task", n_train=20, n_test=10)


def _scenario(tmp: Path, mnt: Path, ckpt: Path, hf: Path) -> dict[str, dict]:
    """name -> case, in order; each writer runs on a disk filled to a few KiB."""
    from tests.support.checkpoints import write_tokenizer

    tok = write_tokenizer(tmp / "tok")
    corpus, task = _inputs(tmp)
    kib = 1 << 10
    return {
        "export outside (the import's input)": _cli("convert_hf", "export", ckpt, tmp / "hf_ok", "--tokenizer", tok),
        "an old export to replace": _cli("convert_hf", "export", ckpt, mnt / "old_hf", "--tokenizer", tok),
        "fill 1": _fill(mnt, 40 * kib),
        "export": _cli("convert_hf", "export", ckpt, mnt / "hf", "--tokenizer", tok),
        "export --force": _cli("convert_hf", "export", ckpt, mnt / "old_hf", "--tokenizer", tok, "--force"),
        "import": _cli("convert_hf", "import", tmp / "hf_ok", mnt / "native"),
        "preprocess": _cli("preprocess", "--input", corpus, "--tokenizer", tok, "--output-prefix", mnt / "data" / "corpus",
                           "--workers", 1, "--no-progress"),
        "fill 2": _fill(mnt, 4 * kib),
        "train-tokenizer": _cli("train_tokenizer", "--input", corpus, "--output-dir", mnt / "tok", "--model", "wordpiece",
                                "--vocab-size", 200),
        "fill 3": _fill(mnt, 40 * kib),
        "probe, eval cache on the full disk": _cli("probe", "--model", ckpt, "--tokenizer-dir", tok, "--jsonl", task,
                                                   "--cv-folds", 2, "--out", tmp / "probe_ok",
                                                   env={"CROSSBERT_EVAL_CACHE": str(mnt / "cache")}),
        "fill 4": _fill(mnt, 2 * kib),
        "probe --out": _cli("probe", "--model", hf, "--jsonl", task, "--cv-folds", 2, "--cache-dir", "none",
                            "--out", mnt / "probe"),
        "mteb --out": _cli("mteb", "--model", hf, "--local-task", f"classification:t:{task}", "--cache-dir", "none",
                           "--out", mnt / "mteb"),
        "left on the disk": {"module": "tests.support.disk_full_driver", "argv": ["entries", str(mnt)]},
    }


def _expected(mnt: Path) -> dict[str, str]:
    """name -> the start of its one error line."""
    return {
        "export": f"error: {mnt / 'hf'}: no space left on device while writing the export; "
                  "nothing was written there",
        "export --force": f"error: {mnt / 'old_hf'}: no space left on device while writing the export",
        "import": f"error: {mnt / 'native'}: no space left on device while writing the imported "
                  "checkpoint",
        "preprocess": f"error: {mnt / 'data' / 'corpus_text_document.bin'}: no space left on device while writing the "
                      "preprocessed dataset",
        "train-tokenizer": f"error: {mnt / 'tok'}: no space left on device while writing the tokenizer",
        "probe, eval cache on the full disk": f"error: {mnt / 'cache' / 'hf_export'}/",
        "probe --out": f"error: {mnt / 'probe'}: no space left on device while writing the probe report",
        "mteb --out": f"error: {mnt / 'mteb'}: no space left on device while writing the MTEB results",
    }


@pytest.mark.slow
def test_a_full_disk_is_one_line_naming_the_output_and_leaves_nothing(tiny_checkpoint, tiny_hf_encoder, tmp_path):
    mnt = tmp_path / "mnt"
    cases = _scenario(tmp_path, mnt, tiny_checkpoint, tiny_hf_encoder)
    results = run_cases_in_tmpfs(cases, tmp_path, mnt, "8m")
    for name in ("export outside (the import's input)", "an old export to replace", "fill 1", "fill 2", "fill 3"):
        assert results[name]["rc"] == 0, (name, results[name]["stderr"][-3000:])
    for name, start in _expected(mnt).items():
        result = results[name]
        assert result["rc"] == 2 and "Traceback" not in result["stderr"], (name, result["stderr"][-3000:])
        errors = error_lines(result)
        assert len(errors) == 1 and errors[0].startswith(start), (name, errors, start)
        assert "no space left on device" in errors[0], (name, errors)
    left = json.loads(results["left on the disk"]["stdout"].splitlines()[-1])
    old = [entry for entry in left if entry.startswith("old_hf")]
    assert "old_hf/config.json" in old and "old_hf/model.safetensors" in old  # --force moved nothing
    assert [entry for entry in left if not entry.startswith("old_hf")] == [], left
