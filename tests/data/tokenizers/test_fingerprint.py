"""Tokenizer fingerprints: stable for one tokenizer, different for a same-size other one."""

import json

import pytest

from megatron_crossbert.data.tokenizers.fingerprint import (
    read_dataset_record, record_path, tokenizer_fingerprint, write_dataset_record,
)
from megatron_crossbert.data.tokenizers.tokenizer import SPECIAL_TOKENS, Tokenizer, resolve_special_ids


def _wordlevel(words):
    import tokenizers
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    vocab = {tok: i for i, tok in enumerate([*SPECIAL_TOKENS.values(), *words])}
    backend = tokenizers.Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = Whitespace()
    return Tokenizer(backend=backend, special_ids=resolve_special_ids(backend, {}, "test"))


def test_fingerprint_is_stable_and_sensitive_to_id_meaning():
    a, again = _wordlevel(["cat", "dog"]), _wordlevel(["cat", "dog"])
    swapped = _wordlevel(["dog", "cat"])  # same size, same pieces, different ids
    assert tokenizer_fingerprint(a) == tokenizer_fingerprint(again)
    assert tokenizer_fingerprint(a) != tokenizer_fingerprint(swapped)
    assert tokenizer_fingerprint(a).startswith("sha256:") and len(tokenizer_fingerprint(a)) == 23


def test_dataset_record_round_trip_and_errors(tmp_path):
    prefix = tmp_path / "corpus_text_document"
    assert read_dataset_record(prefix) is None  # other tools' datasets carry no record
    tok = _wordlevel(["cat"])
    write_dataset_record(prefix, tok, "tok_dir")
    record = read_dataset_record(prefix)
    assert record["fingerprint"] == tokenizer_fingerprint(tok) and record["tokenizer"] == "tok_dir"
    record_path(prefix).write_bytes(b"\xff\xfe junk")
    with pytest.raises(ValueError, match=r"corpus_text_document\.tokenizer\.json: not a valid tokenizer record"):
        read_dataset_record(prefix)
    record_path(prefix).write_text(json.dumps({"x": 1}))
    with pytest.raises(ValueError, match="has no 'fingerprint' field"):
        read_dataset_record(prefix)
