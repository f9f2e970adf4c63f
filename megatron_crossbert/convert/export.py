"""Native dist checkpoint -> Hugging Face ``MegatronBert`` directory (``export_to_hf``).

The directory loads with ``AutoModel.from_pretrained`` (no remote code), ``AutoTokenizer`` and
``SentenceTransformer`` (mean pooling), and for the BERT baseline with ``pipeline("fill-mask")``.
All checks (config exactness, tokenizer fit, output path) run before any tensor is loaded, so a bad
invocation fails in seconds, and the files appear only once the whole export succeeded.
"""

from __future__ import annotations

import logging
from pathlib import Path

from megatron_crossbert.config import RunConfig
from megatron_crossbert.convert import artifacts, hf_config
from megatron_crossbert.convert.adapter import megatron_to_hf
from megatron_crossbert.convert.errors import ConversionError
from megatron_crossbert.convert.model_card import model_card
from megatron_crossbert.convert.native import load_native_state, read_checkpoint_config

log = logging.getLogger(__name__)


def _resolve_tokenizer(run_cfg: RunConfig, tokenizer_dir: str | Path | None) -> artifacts.TokenizerInfo:
    source = tokenizer_dir or run_cfg.data.tokenizer
    if not source:
        raise ConversionError("the run config names no tokenizer (data.tokenizer); pass --tokenizer DIR")
    return artifacts.inspect_tokenizer(source)


def _write_export(stage: Path, run_cfg: RunConfig, hf_state: dict, tok: artifacts.TokenizerInfo,
                  rows: int, with_mlm: bool, source: str) -> None:
    model = run_cfg.model
    artifacts.write_json(stage / "config.json", hf_config.hf_config_dict(model, rows, tok.pad_token_id, with_mlm))
    artifacts.save_weights(hf_state, stage)
    artifacts.copy_tokenizer(tok, stage, model.max_position_embeddings)
    artifacts.write_sentence_transformers(stage, model.hidden_size, model.max_position_embeddings)
    run_cfg.save_json(stage / artifacts.RUN_CONFIG_COPY)
    (stage / "README.md").write_text(model_card(run_cfg, with_mlm, source))


def export_to_hf(checkpoint: str | Path, out_dir: str | Path, *, tokenizer_dir: str | Path | None = None,
                 force: bool = False) -> Path:
    """Export the encoder of a checkpoint (root or ``iter_*`` dir, any TP/PP) to an HF directory.

    CrossBERT: encoder only (``MegatronBertModel``; the decoder is discarded). BERT baseline:
    ``MegatronBertForMaskedLM`` with the tied MLM head, unless bias-GELU fusion makes the head inexact.
    Must run in a single process, or in one whose megatron parallel state is TP=1/PP=1.
    """
    run_cfg = read_checkpoint_config(checkpoint)
    hf_config.check_exportable(run_cfg.model)
    tok = _resolve_tokenizer(run_cfg, tokenizer_dir)
    rows = run_cfg.model.padded_vocab_size(run_cfg.parallel.tensor_model_parallel_size)
    artifacts.check_tokenizer_fits(tok, run_cfg.model.vocab_size, rows)
    with_mlm = hf_config.mlm_head_exportable(run_cfg.model)
    if with_mlm and not tok.has_mask_token:
        log.warning("tokenizer %s has no mask token: fill-mask pipelines will not work", tok.directory)
    with artifacts.staged_output(out_dir, force, protected=[Path(checkpoint), tok.directory]) as stage:
        native = load_native_state(checkpoint, run_cfg)
        hf_state = megatron_to_hf(native, run_cfg.model, with_mlm_head=with_mlm)
        _write_export(stage, run_cfg, hf_state, tok, rows, with_mlm, str(checkpoint))
    log.info("exported %s -> %s (%s)", checkpoint, out_dir, "MLM" if with_mlm else "encoder")
    return Path(out_dir)
