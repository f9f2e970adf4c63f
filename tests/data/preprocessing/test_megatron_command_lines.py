"""Megatron-LM's preprocess command lines run unchanged with the binary name swapped."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

from megatron_crossbert.cli import preprocess as cli
from megatron_crossbert.data.indexed.writer import read_header
from megatron_crossbert.data.tokenizers.sources import open_tokenizer
from megatron_crossbert.data.tokenizers.tokenizer import SPECIAL_TOKENS, load_tokenizer
from tests.support import REPO_ROOT



@pytest.fixture(scope="module")
def setup(tmp_path_factory, text_corpus, bpe_tokenizer):
    """(this module's dir with a BERT vocab.txt, the session corpus, its texts, the session tokenizer)."""
    root, texts = tmp_path_factory.mktemp("mlm"), text_corpus.texts
    wp = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    wp.normalizer = normalizers.BertNormalizer(lowercase=False)
    wp.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    wp.train_from_iterator(texts, trainers.WordPieceTrainer(vocab_size=400, special_tokens=list(SPECIAL_TOKENS.values())))
    vocab = root / "vocab.txt"
    vocab.write_text("".join(t + "\n" for t, _ in sorted(wp.get_vocab().items(), key=lambda kv: kv[1])))
    return root, text_corpus.path, texts, bpe_tokenizer


def test_megatron_hf_command_line_runs_unchanged(setup):
    root, corpus, texts, tok_dir = setup
    cmd = [sys.executable, str(REPO_ROOT / "tools" / "preprocess_data.py"), "--input", str(corpus), "--output-prefix",
           str(root / "hf"), "--json-keys", "text", "--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model",
           str(tok_dir), "--append-eod", "--workers", "2", "--partitions", "2", "--log-interval", "10"]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    tok = load_tokenizer(tok_dir)
    ds = IndexedDataset(str(root / "hf_text_document"))
    assert len(ds) == len(texts) and ds[3].tolist() == tok.encode(texts[3]) + [tok.eod_id]
    assert "--partitions 2 accepted and ignored" in run.stderr


@pytest.mark.parametrize("kind, lower", [("BertWordPieceLowerCase", True), ("BertWordPieceCase", False)])
def test_bert_wordpiece_vocab_file(setup, kind, lower):
    root, corpus, texts, _ = setup
    prefix = root / kind
    assert cli.main(["--input", str(corpus), "--output-prefix", str(prefix), "--tokenizer-type", kind,
                     "--vocab-file", str(root / "vocab.txt"), "--no-progress"]) == 0
    tok = open_tokenizer(root / "vocab.txt", "bert-lower" if lower else "bert-cased")
    dtype, sequences, _ = read_header(f"{prefix}_text_document.idx")
    data = np.fromfile(f"{prefix}_text_document.bin", dtype=dtype)
    assert sequences == len(texts) and data[: len(tok.encode(texts[0]))].tolist() == tok.encode(texts[0])
    assert (tok.decode(tok.encode("Hello World")) == "hello world") == lower


@pytest.mark.parametrize("argv, message", [
    (["--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", "v.json", "--merge-file", "m.txt"],
     "error: --tokenizer-type GPT2BPETokenizer is not supported (supported: HuggingFaceTokenizer, "
     "BertWordPieceLowerCase, BertWordPieceCase)"),
    (["--tokenizer-type", "BertWordPieceLowerCase"], "error: --tokenizer-type BertWordPieceLowerCase needs --vocab-file"),
    ([], "error: no tokenizer: pass --tokenizer DIR"),
])
def test_unsupported_tokenizer_flags_rejected_clearly(setup, capsys, argv, message):
    root, corpus, _, _ = setup
    assert cli.main(["--input", str(corpus), "--output-prefix", str(root / "rej"), *argv]) == 2
    assert capsys.readouterr().err.startswith(message)
    assert not list(root.glob("rej*"))
