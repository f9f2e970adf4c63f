"""crossbert-preprocess: accounting of bad input, strict mode, worker determinism, atomicity, CLIs."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from megatron_crossbert.cli import preprocess as cli
from megatron_crossbert.data.jsonl import BadInputError
from megatron_crossbert.data.preprocessing import preprocess as pp
from megatron_crossbert.data.tokenizers.tokenizer import load_tokenizer
from tests.support import REPO_ROOT



@pytest.fixture(scope="module")
def setup(tmp_path_factory, text_corpus, bpe_tokenizer):
    """(this module's output dir, the session corpus, its texts, the session tokenizer)."""
    return tmp_path_factory.mktemp("pp"), text_corpus.path, text_corpus.texts, bpe_tokenizer


def _bad_fixture(root: Path) -> tuple[list[Path], dict[str, int]]:
    lines = [b'{"text": "A fine first document."}', b'{"text": "unterminated"', b'{"other": "no text key"}',
             b'{"text": 5}', b'{"text": "bad \xff\xfe bytes"}', b'{"text": "   "}', b"", b"[1, 2, 3]",
             b'{"text": "Another good one!", "id": 7}']
    plain = root / "bad.jsonl"
    plain.write_bytes(b"\n".join(lines) + b"\n")
    full = gzip.compress(("\n".join(json.dumps({"text": f"doc {i} text"}) for i in range(400)) + "\n").encode())
    trunc = root / "trunc.jsonl.gz"
    trunc.write_bytes(full[: len(full) // 2])
    expected = {"invalid_json": 1, "missing_key": 1, "not_string": 1, "invalid_utf8": 1, "empty_text": 1,
                "blank_line": 1, "not_object": 1, "truncated_gzip": 1}
    return [plain, trunc], expected


def _opts(setup, inputs, prefix: str, **kw) -> pp.PreprocessOptions:
    root, _, _, tok = setup
    return pp.PreprocessOptions(inputs=[str(p) for p in inputs], output_prefix=str(root / prefix),
                                tokenizer=str(tok), progress=False, **kw)


def test_nothing_lost_on_every_bad_input_kind(setup):
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    root, _, _, _ = setup
    inputs, expected = _bad_fixture(root)
    report = pp.preprocess(_opts(setup, inputs, "bad"))
    assert report["skipped_by_kind"] == expected
    assert report["documents_read"] == report["documents_written"] + report["documents_skipped"]
    assert report["documents_written"] >= 2 and report["documents_skipped"] == len(expected)
    assert report["first_skip_location"]["invalid_json"] == f"{inputs[0]}:2"
    assert report["first_skip_location"]["not_object"] == f"{inputs[0]}:8"
    assert json.loads(Path(pp.report_path(str(root / "bad"))).read_text())["documents_read"] == report["documents_read"]
    ds = IndexedDataset(str(root / "bad_text_document"))
    assert len(ds.document_indices) - 1 == report["documents_written"]


def test_strict_fails_with_file_and_line(setup):
    root, _, _, _ = setup
    inputs, _ = _bad_fixture(root)
    with pytest.raises(BadInputError, match=r"bad\.jsonl:2: invalid_json"):
        pp.preprocess(_opts(setup, inputs, "strict", strict=True))
    assert not list(root.glob("strict*")), "a failed run leaves no outputs or temporaries"


def test_output_matches_tokenizer_and_loads_in_megatron(setup):
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    root, corpus, texts, tok = setup
    report = pp.preprocess(_opts(setup, [corpus], "plain", append_eod=True))
    tok = load_tokenizer(tok)
    ds = IndexedDataset(str(root / "plain_text_document"))
    assert ds.index.dtype == np.uint16 and report["dtype"] == "uint16"
    assert len(ds) == len(texts) and report["tokens"]["text"] == int(ds.sequence_lengths.sum())
    for i in (0, 7, len(texts) - 1):
        assert ds[i].tolist() == tok.encode(texts[i]) + [tok.eod_id]


def test_split_sentences_offline(setup):
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    root, corpus, texts, _ = setup
    report = pp.preprocess(_opts(setup, [corpus], "sent", split_sentences=True))
    ds = IndexedDataset(str(root / "sent_text_document"))
    assert len(ds.document_indices) - 1 == len(texts)
    assert len(ds) == report["sequences"]["text"] > 2 * len(texts)
    assert "Punkt" in report["sentence_splitter"]


@pytest.mark.slow
def test_workers_byte_identical_and_script_entry_point(setup):
    root, corpus, _, tok = setup
    extra = ["--split-sentences", "--append-eod", "--no-progress"]
    assert cli.main(["--input", str(corpus), "--output-prefix", str(root / "w1"), "--tokenizer",
                     str(tok), "--workers", "1", *extra]) == 0
    run = subprocess.run([sys.executable, str(REPO_ROOT / "tools" / "preprocess_data.py"), "--input", str(corpus),
                          "--output-prefix", str(root / "w2"), "--tokenizer", str(tok), "--workers", "2",
                          *extra], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    for ext in (".bin", ".idx"):
        assert (root / f"w1_text_document{ext}").read_bytes() == (root / f"w2_text_document{ext}").read_bytes()


def test_refuses_overwrite_without_force(setup, capsys):
    root, corpus, _, tok = setup
    args = ["--input", str(corpus), "--output-prefix", str(root / "f"), "--tokenizer", str(tok), "--no-progress"]
    assert cli.main(args) == 0
    before = (root / "f_text_document.idx").stat().st_mtime_ns
    assert cli.main(args) == 2 and "--force" in capsys.readouterr().err
    assert (root / "f_text_document.idx").stat().st_mtime_ns == before
    assert cli.main(args + ["--force"]) == 0


def test_interrupt_leaves_no_half_outputs(setup, monkeypatch):
    root, corpus, _, _ = setup
    pp.preprocess(_opts(setup, [corpus], "atomic"))
    old = {ext: (root / f"atomic_text_document{ext}").read_bytes() for ext in (".bin", ".idx")}
    calls = {"n": 0}
    real = pp.process_chunk

    def flaky(chunk):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real(chunk)

    monkeypatch.setattr(pp, "process_chunk", flaky)
    with pytest.raises(KeyboardInterrupt):
        pp.preprocess(_opts(setup, [corpus], "atomic", force=True, chunk_lines=16))
    assert {ext: (root / f"atomic_text_document{ext}").read_bytes() for ext in (".bin", ".idx")} == old
    with pytest.raises(KeyboardInterrupt):
        calls["n"] = 0
        pp.preprocess(_opts(setup, [corpus], "fresh", chunk_lines=16))
    leftovers = [p.name for p in root.iterdir() if ".tmp-" in p.name or p.name.startswith("fresh")]
    assert leftovers == []


def test_help_lists_options(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["--help"])
    out = capsys.readouterr().out
    assert exc.value.code == 0
    for flag in ("--json-keys", "--workers", "--split-sentences", "--append-eod", "--strict", "--force",
                 "--emit-mask-pairs", "--seq-length", "--mask-ratio", "--no-complementary", "--log-interval"):
        assert flag in out


def test_missing_input_and_bad_options(setup):
    root, corpus, _, tok = setup
    with pytest.raises(FileNotFoundError):
        pp.preprocess(_opts(setup, [root / "nope*.jsonl"], "x"))
    with pytest.raises(ValueError, match="seq-length"):
        pp.preprocess(_opts(setup, [corpus], "x", emit_mask_pairs=True))
    assert not any(p.name.startswith("x_") for p in root.iterdir())
    assert os.path.exists(tok)
