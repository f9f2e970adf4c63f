"""Inputs that yield nothing fail in one line that names the file and says why."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

import pytest

from megatron_crossbert.data.jsonl import BadInputError
from megatron_crossbert.data.preprocessing import preprocess as pp
from tests.support import REPO_ROOT



@pytest.fixture(scope="module")
def setup(tmp_path_factory, text_corpus, bpe_tokenizer):
    """(this module's dir with the bad inputs, the session corpus, the session tokenizer)."""
    root = tmp_path_factory.mktemp("err")
    (root / "binary.jsonl").write_bytes(bytes(range(256)) * 40)
    (root / "empty.jsonl").write_bytes(b"")
    (root / "plain.jsonl.gz").write_text(json.dumps({"text": "not compressed at all"}) + "\n")
    (root / "adir").mkdir()
    return root, text_corpus.path, bpe_tokenizer


def _opts(setup, inputs, prefix: str) -> pp.PreprocessOptions:
    root, _, tok = setup
    return pp.PreprocessOptions(inputs=[str(p) for p in inputs], output_prefix=str(root / prefix),
                                tokenizer=str(tok), progress=False)


@pytest.mark.parametrize("name, expected", [
    ("binary.jsonl", r"binary\.jsonl: no documents written; \d+ read, all skipped: .*invalid_utf8=\d+ "
                     r"\(first at .*binary\.jsonl:\d+\)"),
    ("empty.jsonl", r"empty\.jsonl: no documents written; 1 read, all skipped: empty_file=1 \(first at .*empty\.jsonl:1\)"),
    ("plain.jsonl.gz", r"plain\.jsonl\.gz: no documents written; 1 read, all skipped: not_gzip=1"),
])
def test_nothing_written_is_an_error_naming_what_was_skipped(setup, name, expected):
    root, _, _ = setup
    with pytest.raises(BadInputError, match=expected):
        pp.preprocess(_opts(setup, [root / name], "none"))
    assert not list(root.glob("none*")), "no outputs and no temporaries"


def test_not_gzip_and_empty_files_are_counted_beside_good_ones(setup):
    root, corpus, _ = setup
    report = pp.preprocess(_opts(setup, [corpus, root / "plain.jsonl.gz", root / "empty.jsonl"], "mixed"))
    assert report["skipped_by_kind"] == {"empty_file": 1, "not_gzip": 1}
    assert report["first_skip_location"]["not_gzip"] == f"{root / 'plain.jsonl.gz'}:1"
    assert report["documents_written"] == 120  # the session corpus


def test_truncated_gzip_is_still_truncated_gzip(setup):
    root, _, _ = setup
    data = gzip.compress(("\n".join(json.dumps({"text": f"doc {i}"}) for i in range(300)) + "\n").encode())
    (root / "trunc.jsonl.gz").write_bytes(data[: len(data) // 2])
    report = pp.preprocess(_opts(setup, [root / "trunc.jsonl.gz"], "trunc"))
    assert report["skipped_by_kind"] == {"truncated_gzip": 1} and report["documents_written"] > 0


def test_directory_input_has_its_own_message(setup):
    root, _, _ = setup
    with pytest.raises(BadInputError, match=r"adir: is a directory, not a JSONL file; pass the files in it"):
        pp.preprocess(_opts(setup, [root / "adir"], "dir"))


@pytest.mark.parametrize("name, needle", [("binary.jsonl", "invalid_utf8="), ("empty.jsonl", "empty_file=1"),
                                          ("plain.jsonl.gz", "not_gzip=1"), ("adir", "is a directory")])
def test_cli_one_error_line_nonzero_exit_no_traceback(setup, name, needle):
    root, _, tok = setup
    run = subprocess.run([sys.executable, str(REPO_ROOT / "tools" / "preprocess_data.py"), "--input", str(root / name),
                          "--output-prefix", str(root / "cli"), "--tokenizer", str(tok), "--no-progress"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2  # every CLI: user errors exit 2
    assert "Traceback" not in run.stderr
    errors = [line for line in run.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and needle in errors[0] and name in errors[0]
