"""Native dist checkpoint -> Hugging Face directory (``export_to_hf``), in any registered format.

The directory loads with ``AutoModel.from_pretrained`` (no remote code), ``AutoTokenizer`` and
``SentenceTransformer`` (mean pooling), and for a model with an encoder MLM head with
``pipeline("fill-mask")``. The format defaults to the first one that represents the model exactly
(``formats.default_format``: ``xlmr-xl`` for the classic encoder). All checks (format exactness,
tokenizer fit, output path) run before any tensor is loaded, so a bad invocation fails in seconds,
and the files appear only once the whole export succeeded.
"""

from __future__ import annotations

import logging
from pathlib import Path

from megatron_crossbert.checkpoint.verify import VerifiedCheckpoint
from megatron_crossbert.config import RunConfig
from megatron_crossbert.convert import artifacts
from megatron_crossbert.convert.errors import ConversionError
from megatron_crossbert.convert.formats import default_format, get_format
from megatron_crossbert.convert.formats.interface import ExportContext, HfFormat, model_traits
from megatron_crossbert.convert.model_card import model_card
from megatron_crossbert.convert.native import load_native_state, open_export_source
from megatron_crossbert.outputs import require_output_dir

log = logging.getLogger(__name__)


def _resolve_tokenizer(run_cfg: RunConfig, tokenizer_dir: str | Path | None) -> artifacts.TokenizerInfo:
    source = tokenizer_dir or run_cfg.data.tokenizer
    if not source:
        raise ConversionError("the run config names no tokenizer (data.tokenizer); pass --tokenizer DIR")
    return artifacts.inspect_tokenizer(source)


def resolve_format(run_cfg: RunConfig, format_name: str | None) -> HfFormat:
    """The named format (checked for exactness) or the model's default one."""
    if format_name is None:
        return default_format(run_cfg.model)
    fmt = get_format(format_name)
    fmt.check_exportable(run_cfg.model)
    return fmt


def _write_export(stage: Path, run_cfg: RunConfig, fmt: HfFormat, hf_state: dict, ctx: ExportContext,
                  with_mlm: bool, source: str) -> None:
    model = run_cfg.model
    artifacts.write_json(stage / "config.json", fmt.hf_config(model, ctx, with_mlm))
    artifacts.save_weights(hf_state, stage)
    artifacts.copy_tokenizer(ctx.tokenizer, stage, model.max_position_embeddings)
    artifacts.write_sentence_transformers(stage, model.hidden_size, model.max_position_embeddings)
    run_cfg.save_json(stage / artifacts.RUN_CONFIG_COPY)
    (stage / "README.md").write_text(model_card(run_cfg, fmt, with_mlm, source))


def export_to_hf(checkpoint: str | Path | VerifiedCheckpoint, out_dir: str | Path, *,
                 tokenizer_dir: str | Path | None = None, force: bool = False,
                 format_name: str | None = None, verify: str = "full") -> Path:
    """Export the encoder of a checkpoint (root or ``iter_*`` dir, any TP/PP) to an HF directory.

    ``checkpoint`` may also be one already opened (``native.open_export_source``); it is then not
    resolved again. ``format_name``: a ``formats.format_names()`` entry, or None for the model's
    default. A reconstruction decoder is discarded; an encoder MLM head is exported with the format's
    MLM class when it maps exactly. ``verify`` (full or off): check the checkpoint's files against
    their recorded hashes first. Must run in a single process, or one whose megatron state is TP=1/PP=1.
    """
    require_output_dir(out_dir, "output directory")  # a file there is refused before the checkpoint is read
    source = open_export_source(checkpoint, verify)
    run_cfg = source.saved
    fmt = resolve_format(run_cfg, format_name)
    tok = _resolve_tokenizer(run_cfg, tokenizer_dir)
    rows = run_cfg.model.padded_vocab_size(run_cfg.parallel.tensor_model_parallel_size)
    artifacts.check_tokenizer_fits(tok, run_cfg.model.vocab_size, rows)
    with_mlm = bool(model_traits(run_cfg.model).encoder_mlm_head and fmt.mlm_class
                    and fmt.mlm_head_exact(run_cfg.model))
    if with_mlm and not tok.has_mask_token:
        log.warning("tokenizer %s has no mask token: fill-mask pipelines will not work", tok.directory)
    ctx = ExportContext(vocab_rows=rows, tokenizer=tok)
    with artifacts.staged_output(out_dir, force, protected=[Path(source.reference), tok.directory]) as stage:
        native = load_native_state(source)
        hf_state = fmt.to_hf(native, run_cfg.model, ctx, with_mlm)
        _write_export(stage, run_cfg, fmt, hf_state, ctx, with_mlm, source.reference)
    log.info("exported %s -> %s (%s)", source.reference, out_dir, fmt.mlm_class if with_mlm else fmt.base_class)
    return Path(out_dir)
