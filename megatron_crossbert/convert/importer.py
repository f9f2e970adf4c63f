"""Hugging Face ``MegatronBert`` directory -> native model-only checkpoint (``import_from_hf``).

The result is what ``CheckpointConfig.init_from`` loads, so an exported encoder can be trained further.
The RunConfig comes from ``crossbert_run_config.json`` when the directory is one of our exports (so
the decoder size, masking and data settings survive a round trip), otherwise from defaults; the model
dimensions always come from ``config.json``. Only the encoder (and a BERT MLM head) exists in HF
files: a CrossBERT reconstruction decoder is freshly initialised from ``training.seed``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

from megatron_crossbert.config import CheckpointConfig, ModelConfig, ParallelConfig, RunConfig
from megatron_crossbert.convert import artifacts, hf_config
from megatron_crossbert.convert.adapter import has_mlm_head, hf_to_megatron
from megatron_crossbert.convert.errors import ConversionError
from megatron_crossbert.convert.native import save_native

log = logging.getLogger(__name__)


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise ConversionError(f"cannot read {path}: {err}") from err


def _base_run_config(hf_dir: Path, mlm: bool) -> RunConfig:
    """Our export's RunConfig if present; else defaults (arch from whether an MLM head is stored)."""
    saved = hf_dir / artifacts.RUN_CONFIG_COPY
    if saved.is_file():
        try:
            return RunConfig.load_json(saved)
        except (ValueError, TypeError) as err:
            raise ConversionError(f"{saved} is not a valid run config: {err}") from err
    return RunConfig(model=ModelConfig(arch="bert" if mlm else "crossbert"))


def _tokenizer_size(hf_dir: Path) -> int | None:
    if not any((hf_dir / name).is_file() for name in artifacts.TOKENIZER_FILES):
        return None
    return artifacts.inspect_tokenizer(hf_dir).size


def run_config_from_hf(hf_dir: str | Path, mlm: bool = False) -> RunConfig:
    """RunConfig for an HF directory: model dims from config.json, the rest from our export or defaults."""
    hf_dir = Path(hf_dir)
    hf_cfg = _read_json(hf_dir / "config.json")
    hf_config.check_importable(hf_cfg)
    base = _base_run_config(hf_dir, mlm)
    tok_size = _tokenizer_size(hf_dir)
    vocab_hint = base.model.vocab_size if (hf_dir / artifacts.RUN_CONFIG_COPY).is_file() else tok_size
    try:
        model = hf_config.model_config_from_hf(hf_cfg, base.model, vocab_hint)
        data = dataclasses.replace(base.data, seq_length=min(base.data.seq_length, model.max_position_embeddings),
                                   tokenizer=str(hf_dir.resolve()) if tok_size else base.data.tokenizer)
        return dataclasses.replace(base, model=model, data=data, parallel=ParallelConfig(),
                                   checkpoint=CheckpointConfig())
    except (ValueError, KeyError) as err:
        raise ConversionError(f"config.json of {hf_dir} gives an invalid run config: {err}") from err


def import_from_hf(hf_dir: str | Path, out_root: str | Path, *, force: bool = False) -> Path:
    """Convert an HF directory into a model-only checkpoint root; returns its ``iter_*`` directory.

    Refuses configs/weights with no exact native equivalent (see ``hf_config.check_importable`` and
    ``adapter.hf_to_megatron``). For CrossBERT the reconstruction decoder is freshly initialised.
    """
    hf_dir = Path(hf_dir)
    if not (hf_dir / "config.json").is_file():
        raise ConversionError(f"{hf_dir} is not a Hugging Face model directory (no config.json)")
    hf_state = artifacts.load_weights(hf_dir)
    run_cfg = run_config_from_hf(hf_dir, mlm=has_mlm_head(hf_state))
    weights = hf_to_megatron(hf_state, run_cfg.model)
    if run_cfg.model.arch == "crossbert":
        log.warning("CrossBERT reconstruction decoder is not part of HF files: freshly initialised (seed %d)",
                    run_cfg.training.seed)
    with artifacts.staged_output(out_root, force, protected=[hf_dir]) as stage:
        ckpt_dir = save_native(run_cfg, weights, stage)
    return Path(out_root) / ckpt_dir.name
