"""Same bytes whatever the backend, thread/worker count and chunking; backend choice; no torch in the process."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from megatron_crossbert.data.preprocessing import encoding
from megatron_crossbert.data.preprocessing import preprocess as pp
from megatron_crossbert.data.tokenizers.tokenizer import SPECIAL_TOKENS, load_tokenizer
from tests.support import REPO_ROOT
from tests.support.synthetic_text import synthetic_documents

UNICODE = ["Ünïcödé façade — “quotes” … naïve", "日本語のテキスト、中文文本，한국어", "emoji 😀🎉👩‍👩‍👧 ∑∫√∞",
           "Ελληνικά Русский עברית العربية हिन्दी", "tab\tnew\nline\r\n  spaced  ", "[CLS] literal [SEP] tokens [MASK]"]


def _texts() -> list[str]:
    base = synthetic_documents(150, seed=5)
    long_doc = " ".join(base) * 3  # one document far longer than a chunk's others
    return base[:60] + UNICODE + [long_doc] + base[60:]


def _write_corpus(path: Path, texts: list[str]) -> Path:
    lines = []
    for i, text in enumerate(texts):
        lines.append(json.dumps({"text": text, "title": f"title {i} {text[:12]}"}, ensure_ascii=i % 2 == 0))
        if i % 17 == 0:
            lines.append(json.dumps({"text": " \t \n ", "title": "empty after strip"}))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _train(root: Path, kind: str) -> Path:
    if kind == "bytebpe":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=list(SPECIAL_TOKENS.values()),
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    else:
        tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
        tok.normalizer = normalizers.BertNormalizer(lowercase=True)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        trainer = trainers.WordPieceTrainer(vocab_size=500, special_tokens=list(SPECIAL_TOKENS.values()))
    tok.train_from_iterator(_texts(), trainer)
    out = root / kind
    out.mkdir()
    tok.save(str(out / "tokenizer.json"))
    return out


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("ident")
    return root, _write_corpus(root / "c.jsonl", _texts()), _train(root, "bytebpe"), _train(root, "wordpiece")


def _run(root: Path, corpus: Path, tok: Path, name: str, **kw) -> dict:
    opts = pp.PreprocessOptions(inputs=[str(corpus)], output_prefix=str(root / name), tokenizer=str(tok),
                                json_keys=["text", "title"], append_eod=True, progress=False, **kw)
    return pp.preprocess(opts)


def _bytes(root: Path, name: str) -> dict[str, bytes]:
    return {f"{key}{ext}": (root / f"{name}_{key}_document{ext}").read_bytes()
            for key in ("text", "title") for ext in (".bin", ".idx")}


def test_bytes_identical_across_backends_workers_and_chunks(setup):
    root, corpus, bpe, _ = setup
    runs = {"g1": dict(backend="gigatoken", workers=1), "g2": dict(backend="gigatoken", workers=2),
            "t1": dict(backend="tokenizers", workers=1), "t2c": dict(backend="tokenizers", workers=2, chunk_lines=7),
            "a2c": dict(backend="auto", workers=2, chunk_lines=5)}
    reports = {name: _run(root, corpus, bpe, name, **kw) for name, kw in runs.items()}
    assert reports["a2c"]["backend"] == "gigatoken" and reports["t1"]["backend"] == "tokenizers"
    assert reports["g1"]["skipped_by_kind"] == {"empty_text": len(range(0, len(_texts()), 17))}
    reference = _bytes(root, "t1")
    for name in runs:
        assert _bytes(root, name) == reference, name
    tok = load_tokenizer(bpe)
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    ds = IndexedDataset(str(root / "g2_text_document"))
    texts = _texts()
    for i in (0, 61, 66, len(texts) - 1):  # plain, unicode, the long document, the last one
        assert ds[i].tolist() == tok.encode(texts[i]) + [tok.eod_id]


def test_auto_falls_back_for_wordpiece_and_says_why(setup, caplog):
    root, corpus, _, wordpiece = setup
    with caplog.at_level(logging.INFO, logger="megatron_crossbert.data.preprocessing.encoding"):
        report = _run(root, corpus, wordpiece, "wp", backend="auto", workers=2)
    assert report["backend"] == "tokenizers"
    assert "encoding backend: tokenizers" in caplog.text and "gigatoken" in caplog.text
    _run(root, corpus, wordpiece, "wp1", backend="tokenizers", workers=1, chunk_lines=9)
    assert _bytes(root, "wp") == _bytes(root, "wp1")
    with pytest.raises(ValueError, match="--backend gigatoken: "):
        _run(root, corpus, wordpiece, "wpg", backend="gigatoken")


def test_verify_reports_the_first_differing_text(setup):
    _, _, bpe, wordpiece = setup
    a, b = encoding.TokenizersEncoder(load_tokenizer(bpe)), encoding.TokenizersEncoder(load_tokenizer(wordpiece))
    assert encoding.verify(a, encoding.GigatokenEncoder(load_tokenizer(bpe), threads=1), ["some text"]) is None
    problem = encoding.verify(a, b, [])
    assert problem is not None and problem.startswith("text 0 ('Hello, world!")


def test_gigatoken_encoder_rebuilt_mid_run_gives_same_ids(setup):
    _, _, bpe, _ = setup
    tok = load_tokenizer(bpe)
    texts = _texts()
    refreshing = encoding.GigatokenEncoder(tok, threads=1, budget_mb=0, min_gap_chars=1)
    batches = [texts[i:i + 20] for i in range(0, len(texts), 20)]
    reference = encoding.TokenizersEncoder(tok)
    for batch in batches:
        got, want = refreshing.encode(batch), reference.encode(batch)
        assert got[0].tolist() == want[0].tolist() and got[1].tolist() == want[1].tolist()
    assert refreshing.rebuilds > 0, "a zero budget rebuilds the encoder during the run"


@pytest.mark.slow
def test_no_torch_imported_by_a_preprocessing_run(setup):
    root, corpus, bpe, _ = setup
    code = ("import json, sys; from megatron_crossbert.cli.preprocess import main; "
            f"rc = main(['--input', {str(corpus)!r}, '--output-prefix', {str(root / 'nt')!r}, '--tokenizer', "
            f"{str(bpe)!r}, '--workers', '2', '--append-eod', '--no-progress']); "
            "print(json.dumps({'rc': rc, 'torch': 'torch' in sys.modules, "
            "'megatron': sorted(m for m in sys.modules if m.startswith('megatron.'))}))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"})
    assert run.returncode == 0, run.stderr[-2000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result == {"rc": 0, "torch": False, "megatron": []}
