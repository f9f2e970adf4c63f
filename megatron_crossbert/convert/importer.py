"""Hugging Face directory of any registered format -> native model-only checkpoint (``import_from_hf``).

The result is what ``CheckpointConfig.init_from`` loads, so an exported encoder can be trained further.
The RunConfig comes from ``crossbert_run_config.json`` when the directory is one of our exports (so
the decoder size, masking and data settings survive a round trip), otherwise from defaults; the model
dimensions always come from ``config.json``, read by the format its ``model_type`` names. Only the
encoder (and an encoder MLM head) exists in HF files: a reconstruction decoder is freshly initialised
from ``training.seed``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

from megatron_crossbert.config import CheckpointConfig, ModelConfig, ParallelConfig, RunConfig
from megatron_crossbert.convert import artifacts
from megatron_crossbert.convert.errors import ConversionError
from megatron_crossbert.convert.formats import format_for_hf_config
from megatron_crossbert.convert.formats.interface import HfFormat, arch_for_foreign_import, encoder_of, model_traits
from megatron_crossbert.convert.native import save_native
from megatron_crossbert.outputs import require_output_dir

log = logging.getLogger(__name__)


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise ConversionError(f"cannot read {path}: {err}") from err


def _base_run_config(hf_dir: Path, mlm: bool, fmt: HfFormat) -> RunConfig:
    """Our export's RunConfig if present; else defaults, with the architecture chosen by whether an
    MLM head is stored (``formats.interface.arch_for_foreign_import``) and the format's encoder family."""
    saved = hf_dir / artifacts.RUN_CONFIG_COPY
    if saved.is_file():
        try:
            return RunConfig.load_json(saved)
        except (ValueError, TypeError) as err:
            raise ConversionError(f"{saved} is not a valid run config: {err}") from err
    encoder = encoder_of(fmt)
    return RunConfig(model=ModelConfig(arch=arch_for_foreign_import(mlm, encoder), encoder=encoder))


def _tokenizer_size(hf_dir: Path) -> int | None:
    if not any((hf_dir / name).is_file() for name in artifacts.TOKENIZER_FILES):
        return None
    return artifacts.inspect_tokenizer(hf_dir).size


def read_hf_config(hf_dir: Path) -> tuple[dict, HfFormat]:
    """config.json and the format that reads it (checked for importability)."""
    path = hf_dir / "config.json"
    hf_cfg = _read_json(path)
    fmt = format_for_hf_config(hf_cfg, str(path))
    fmt.check_importable(hf_cfg)
    return hf_cfg, fmt


def run_config_from_hf(hf_dir: str | Path, mlm: bool = False) -> RunConfig:
    """RunConfig for an HF directory: model dims from config.json, the rest from our export or defaults."""
    hf_dir = Path(hf_dir)
    hf_cfg, fmt = read_hf_config(hf_dir)
    base = _base_run_config(hf_dir, mlm, fmt)
    tok_size = _tokenizer_size(hf_dir)
    vocab_hint = base.model.vocab_size if (hf_dir / artifacts.RUN_CONFIG_COPY).is_file() else tok_size
    try:
        model = fmt.model_config_from_hf(hf_cfg, base.model, vocab_hint)
        data = dataclasses.replace(base.data, seq_length=min(base.data.seq_length, model.max_position_embeddings),
                                   tokenizer=str(hf_dir.resolve()) if tok_size else base.data.tokenizer)
        return dataclasses.replace(base, model=model, data=data, parallel=ParallelConfig(),
                                   checkpoint=CheckpointConfig())
    except (ValueError, KeyError) as err:
        raise ConversionError(f"config.json of {hf_dir} gives an invalid run config: {err}") from err


def import_from_hf(hf_dir: str | Path, out_root: str | Path, *, force: bool = False) -> Path:
    """Convert an HF directory into a model-only checkpoint root; returns its ``iter_*`` directory.

    Refuses configs/weights with no exact native equivalent (the format's ``check_importable`` and
    ``from_hf``). A reconstruction decoder is freshly initialised.
    """
    hf_dir = Path(hf_dir)
    require_output_dir(out_root, "output directory")
    if not (hf_dir / "config.json").is_file():
        raise ConversionError(f"{hf_dir} is not a Hugging Face model directory (no config.json)")
    hf_cfg, fmt = read_hf_config(hf_dir)
    hf_state = artifacts.load_weights(hf_dir)
    run_cfg = run_config_from_hf(hf_dir, mlm=fmt.has_mlm_head(hf_state))
    weights = fmt.from_hf(hf_state, hf_cfg, run_cfg.model)
    if model_traits(run_cfg.model).has_reconstruction_decoder:
        log.warning("the reconstruction decoder is not part of HF files: freshly initialised (seed %d)",
                    run_cfg.training.seed)
    with artifacts.staged_output(out_root, force, protected=[hf_dir], what="the imported checkpoint") as stage:
        ckpt_dir = save_native(run_cfg, weights, stage)
    return Path(out_root) / ckpt_dir.name
