"""Preprocessing records its dataset's content fingerprint beside its tokenizer (``<prefix>.tokenizer.json``), and
every start checks the pair against it: a ``.bin`` of other content beside an ``.idx`` of the same shape is refused
for a fresh run too, not only on a resume (where the checkpoint's data record catches it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from megatron_crossbert.data.preprocessing import preprocess as pp
from megatron_crossbert.data.tokenizers.fingerprint import record_path
from tests.support.training import tiny_config


@pytest.fixture
def preprocessed(tmp_path, text_corpus, bpe_tokenizer) -> str:
    opts = pp.PreprocessOptions(inputs=[str(text_corpus.path)], output_prefix=str(tmp_path / "data"),
                                tokenizer=str(bpe_tokenizer), progress=False)
    pp.preprocess(opts)
    return str(tmp_path / "data_text_document")


def test_a_bin_of_other_content_is_refused_at_a_fresh_start(preprocessed, bpe_tokenizer):
    from megatron_crossbert.checkpoint.manager import CheckpointManager

    def config():
        return tiny_config("crossbert", preprocessed, None, data__tokenizer=str(bpe_tokenizer))

    assert CheckpointManager.check(config()).choice.source is None  # the pair as preprocessing wrote it: a fresh start
    assert json.loads(record_path(preprocessed).read_text())["content"].startswith("xxh3_128:")
    data = bytearray(Path(preprocessed + ".bin").read_bytes())
    data[8:40] = data[40:72]  # other token ids, the same size: the .idx still fits
    Path(preprocessed + ".bin").write_bytes(bytes(data))
    with pytest.raises(ValueError) as err:  # CorruptDatasetError
        CheckpointManager.check(config())
    message = str(err.value)
    assert f"{preprocessed}.bin" in message and str(record_path(preprocessed)) in message and "\n" not in message
