"""sentencepiece ``.model`` -> ``tokenizers.Tokenizer``: the one conversion both loading and training use.

Its own module so that ``tokenizer.py`` (loading) and ``training.py`` (training,
which builds on loading) do not import each other.
"""

from __future__ import annotations

from pathlib import Path

import tokenizers


def spm_to_tokenizers(model_path: Path) -> tokenizers.Tokenizer:
    """sentencepiece ``.model`` -> equivalent ``tokenizers.Tokenizer`` (BPE or Unigram model)."""
    from transformers.convert_slow_tokenizer import SpmConverter, import_protobuf

    proto = import_protobuf().ModelProto()
    proto.ParseFromString(model_path.read_bytes())
    if proto.trainer_spec.model_type == 2:  # BPE: vocab dict, merges derived from piece scores
        vocab = {piece.piece: i for i, piece in enumerate(proto.pieces)}
    elif proto.trainer_spec.model_type == 1:  # unigram: (piece, score) list
        vocab = [(piece.piece, piece.score) for piece in proto.pieces]
    else:
        raise ValueError(f"{model_path}: only sentencepiece BPE and unigram models are supported")
    backend = SpmConverter.build_tokenizer_from_spm_proto(proto, vocab)
    if backend is None:
        raise ValueError(f"{model_path}: could not convert the sentencepiece model")
    return backend
