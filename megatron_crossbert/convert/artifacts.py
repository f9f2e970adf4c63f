"""Files of an HF export besides the weights: tokenizer, sentence-transformers modules, model card.

Constraints that shape this module:
- Without tokenizer files ``AutoTokenizer``/``SentenceTransformer`` silently build an empty BERT
  tokenizer and map every word to [UNK], so the tokenizer is copied, then reloaded from the export
  and checked against the model's vocabulary before anything is written.
- Weights are read and written only as safetensors; a directory with only pickle weights
  (``pytorch_model.bin``) is refused rather than unpickled.
- The export is staged in a hidden sibling directory and moved into place at the end
  (``outputs.staged_dir``), so a failed export (a full disk included) never leaves a half-written model
  behind, a killed one's stage is removed by the next, and ``--force`` replaces an old one in one step.
"""

from __future__ import annotations

import json
import shutil
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

from megatron_crossbert.convert.errors import ConversionError
from megatron_crossbert.outputs import OutputError, staged_dir

WEIGHTS_FILE = "model.safetensors"
WEIGHTS_INDEX_FILE = "model.safetensors.index.json"
RUN_CONFIG_COPY = "crossbert_run_config.json"
"""The exporting run's RunConfig (decoder size, masking, data...), used by import to restore it."""
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                   "vocab.txt", "vocab.json", "merges.txt", "spiece.model", "sentencepiece.model",
                   "sentencepiece.bpe.model", "tokenizer.model")
PICKLE_WEIGHTS = ("pytorch_model.bin", "pytorch_model.bin.index.json", "model.pt", "model.ckpt")


@dataclass(frozen=True)
class TokenizerInfo:
    """What the export needs to know about a tokenizer (loaded through ``AutoTokenizer``)."""

    directory: Path
    """The tokenizer directory that is copied into the export."""
    size: int
    """``len(tokenizer)``: every id it can emit is below this."""
    pad_token_id: int
    """Padding id (0 when the tokenizer defines none): HF ``pad_token_id``."""
    has_mask_token: bool
    """Whether ``[MASK]``-style filling works (fill-mask pipelines need it)."""
    cls_token_id: int | None = None
    """Sequence-start id (``[CLS]``/``<s>``), for configs that record it (bos/cls ids)."""
    sep_token_id: int | None = None
    """Sequence-end id (``[SEP]``/``</s>``), for configs that record it (eos/sep ids)."""
    mask_token_id: int | None = None
    """Mask id, for configs that record it."""


def _load_auto_tokenizer(directory: Path):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
    except Exception as err:  # transformers raises OSError/ValueError/... for unusable directories
        raise ConversionError(f"tokenizer directory {directory} does not load with AutoTokenizer: {err}") from err


def inspect_tokenizer(path: str | Path) -> TokenizerInfo:
    """Load a tokenizer directory (or the directory of a ``tokenizer.json``) the way HF users will."""
    directory = Path(path)
    if directory.is_file():
        directory = directory.parent
    if not directory.is_dir() or not any((directory / name).is_file() for name in TOKENIZER_FILES):
        raise ConversionError(f"no Hugging Face tokenizer files in {path}; pass --tokenizer DIR (a directory "
                              f"with tokenizer.json + tokenizer_config.json)")
    tok = _load_auto_tokenizer(directory)
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    return TokenizerInfo(directory=directory, size=len(tok), pad_token_id=int(pad),
                         has_mask_token=tok.mask_token is not None, cls_token_id=tok.cls_token_id,
                         sep_token_id=tok.sep_token_id, mask_token_id=tok.mask_token_id)


def check_tokenizer_fits(info: TokenizerInfo, vocab_size: int, vocab_rows: int) -> None:
    """Every id the tokenizer can emit must index a trained embedding row."""
    if info.size > vocab_size or info.size > vocab_rows:
        raise ConversionError(f"tokenizer {info.directory} has {info.size} tokens but the model was trained with "
                              f"vocab_size={vocab_size} ({vocab_rows} embedding rows); wrong tokenizer?")


def _cap_model_max_length(config_path: Path, max_positions: int) -> None:
    """Tokenizers trained for packing often say ``model_max_length=1e30``; HF pipelines would then feed
    sequences longer than the position table and crash, so the copy is capped at the table size."""
    if not config_path.is_file():
        return
    config = json.loads(config_path.read_text())
    if float(config.get("model_max_length") or float("inf")) > max_positions:
        config["model_max_length"] = max_positions
        config_path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")


def copy_tokenizer(info: TokenizerInfo, out_dir: Path, max_positions: int) -> list[str]:
    """Copy the known tokenizer files, then prove that the copy loads and has the same size."""
    copied = [name for name in TOKENIZER_FILES if (info.directory / name).is_file()]
    for name in copied:
        shutil.copyfile(info.directory / name, out_dir / name)
    _cap_model_max_length(out_dir / "tokenizer_config.json", max_positions)
    reloaded = inspect_tokenizer(out_dir)
    if reloaded.size != info.size:
        raise ConversionError(f"copied tokenizer has {reloaded.size} tokens, source {info.size}")
    return copied


def write_json(path: Path, payload: dict | list) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2, sort_keys=False) + "\n")


def write_sentence_transformers(out_dir: Path, hidden_size: int, max_seq_length: int) -> None:
    """modules.json (Transformer -> mean Pooling) so ``SentenceTransformer(dir)`` mean-pools our encoder."""
    write_json(out_dir / "modules.json", [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ])
    write_json(out_dir / "1_Pooling" / "config.json", {
        "word_embedding_dimension": hidden_size, "pooling_mode_cls_token": False,
        "pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False, "include_prompt": True})
    write_json(out_dir / "sentence_bert_config.json", {"max_seq_length": max_seq_length, "do_lower_case": False})


def save_weights(state: dict[str, torch.Tensor], out_dir: Path) -> Path:
    """One ``model.safetensors`` (contiguous, unshared fp32 copies; safetensors refuses shared storage)."""
    from safetensors.torch import save_file

    tensors = {key: value.detach().to(torch.float32).contiguous().clone() for key, value in state.items()}
    path = out_dir / WEIGHTS_FILE
    save_file(tensors, str(path), metadata={"format": "pt"})
    return path


def load_weights(hf_dir: Path) -> dict[str, torch.Tensor]:
    """Read ``model.safetensors`` or its sharded index; never unpickles ``.bin`` files."""
    from safetensors.torch import load_file

    if (hf_dir / WEIGHTS_FILE).is_file():
        files = [hf_dir / WEIGHTS_FILE]
    elif (hf_dir / WEIGHTS_INDEX_FILE).is_file():
        index = json.loads((hf_dir / WEIGHTS_INDEX_FILE).read_text())
        files = [hf_dir / name for name in sorted(set(index["weight_map"].values()))]
    else:
        found = [name for name in PICKLE_WEIGHTS if (hf_dir / name).exists()]
        hint = f" (found pickle weights {found}: re-save them as safetensors first)" if found else ""
        raise ConversionError(f"no {WEIGHTS_FILE} in {hf_dir}{hint}")
    state: dict[str, torch.Tensor] = {}
    for path in files:
        try:
            state.update(load_file(str(path)))
        except Exception as err:  # safetensors raises SafetensorError / OSError for damaged files
            raise ConversionError(f"cannot read {path}: {err}") from err
    return state


def _check_not_inside(out_dir: Path, protected: list[Path]) -> None:
    """Refuse an output dir that is, or contains, one of the inputs (``--force`` would delete it)."""
    out = out_dir.resolve()
    for path in protected:
        resolved = path.resolve()
        if resolved == out or out in resolved.parents:
            raise ConversionError(f"output directory {out_dir} would overwrite the input {path}")


@contextmanager
def staged_output(out_dir: str | Path, force: bool, protected: list[Path] = (), what: str = "the export"):
    """Yield a hidden stage beside ``out_dir``; on success it takes ``out_dir``'s place
    (``outputs.staged_dir``: ``force`` moves an old one aside, never deletes it; a full disk is one line
    naming ``out_dir``; a killed export's stage is removed by the next run). ``protected``: inputs the
    output must not be, or contain."""
    _check_not_inside(Path(out_dir), list(protected))
    try:
        with staged_dir(out_dir, force, what) as stage:
            yield stage
    except OutputError as err:  # the convert CLI's own error type, the same one line
        raise ConversionError(str(err)) from err
