"""The ``modernbert`` HF format through the convert format table's interface (``convert/formats/``).

Exact against stock ``ModernBertForMaskedLM`` (fp32 <= 1e-5), import side reproduces the native config
and tensors bit for bit, and a classic config is refused with the reason.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from megatron_crossbert.convert import formats
from megatron_crossbert.convert.artifacts import TokenizerInfo
from megatron_crossbert.convert.formats import interface
from tests.support.models import build, tiny_config


def _context(rows: int) -> interface.ExportContext:
    info = TokenizerInfo(directory=Path("."), size=rows, pad_token_id=0, has_mask_token=True, cls_token_id=2,
                         sep_token_id=3, mask_token_id=4)
    return interface.ExportContext(vocab_rows=rows, tokenizer=info)


def test_modernbert_format_is_registered_exact_and_importable():
    from transformers import ModernBertConfig, ModernBertForMaskedLM

    fmt = formats.get_format("modernbert")
    cfg = tiny_config("model.encoder=modern", "model.rotary_base=40000", arch="mlm")
    assert formats.default_format(cfg.model) is fmt
    assert fmt.unsupported(tiny_config().model)  # classic encoder: refused, with a reason
    model = build(cfg).eval()
    native = {k: v for k, v in model.state_dict().items() if torch.is_tensor(v) and not k.endswith("_extra_state")}
    ctx = _context(native["embedding.word_embeddings.weight"].shape[0])
    hf_cfg = fmt.hf_config(cfg.model, ctx, with_mlm_head=True)
    fmt.check_importable(hf_cfg)
    hf = ModernBertForMaskedLM(ModernBertConfig(**hf_cfg)).eval()
    hf_state = fmt.to_hf(native, cfg.model, ctx, with_mlm_head=True)
    hf.load_state_dict(hf_state, strict=False)
    ids = torch.randint(5, cfg.model.vocab_size, (2, 12))
    with torch.no_grad():
        assert (model(ids) - hf(input_ids=ids).logits).abs().max() <= 1e-5
    imported_cfg = fmt.model_config_from_hf(hf_cfg, cfg.model, cfg.model.vocab_size)
    assert imported_cfg == dataclasses.replace(cfg.model, ffn_hidden_size=cfg.model.ffn)
    back = fmt.from_hf(hf_state, hf_cfg, imported_cfg)
    assert all(torch.equal(back[k], native[k]) for k in back) and fmt.has_mlm_head(hf_state)
