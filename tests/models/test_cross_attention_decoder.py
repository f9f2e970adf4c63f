"""A CrossBERT decoder of cross-attention alone (``model.decoder_cross_attention_only``): its layers hold no
self-attention and no MLP, the forward trains, its FLOPs count the cross-attention only, and only CrossBERT
accepts it."""

from __future__ import annotations

import pytest
import torch

from megatron_crossbert.config import load_run_config
from megatron_crossbert.models.flops import decoder_forward_flops
from tests.support.models import SEQ, build, make_batch, tiny_config

CROSS_ONLY = "model.decoder_cross_attention_only=true"


def _parameter_names(model) -> set[str]:
    return {name for name, _ in model.named_parameters() if name.startswith("decoder.")}


def test_the_decoder_layers_hold_cross_attention_only_and_the_forward_trains():
    cfg = tiny_config(CROSS_ONLY, "model.decoder_num_layers=2")
    model = build(cfg)
    names = _parameter_names(model)
    assert any(".cross_attention.linear_q." in name for name in names)
    assert any(".pre_cross_attn_layernorm." in name for name in names)
    assert not any(".self_attention." in name or ".mlp." in name or "input_layernorm" in name for name in names)
    full = _parameter_names(build(tiny_config("model.decoder_num_layers=2")))
    assert names < full and any(".mlp." in name for name in full)
    batch = make_batch(cfg, batch=2)
    loss = model(**batch)
    assert loss.shape == (2 * 2, SEQ - cfg.masking.visible_length(SEQ)) and torch.isfinite(loss).all()
    loss.mean().backward()
    grads = [p.grad for name, p in model.named_parameters() if ".cross_attention." in name]
    assert grads and all(g is not None and bool(g.abs().sum() > 0) for g in grads)


def test_modern_windows_keep_working_without_decoder_self_attention():
    cfg = tiny_config(CROSS_ONLY, "model.encoder=modern", "model.local_attention=4",
                      "model.global_attn_every_n_layers=2", "model.decoder_num_layers=2")
    model = build(cfg)
    assert torch.isfinite(model(**make_batch(cfg, batch=2))).all()


def test_flops_count_the_cross_attention_alone():
    tiny = ["model.vocab_size=100", "model.make_vocab_size_divisible_by=128", "model.hidden_size=8",
            "model.num_layers=2", "model.num_attention_heads=2", "model.max_position_embeddings=16",
            "model.decoder_num_layers=1", "data.seq_length=4"]
    h, lv, t = 8, 2, 2
    cross_attn = (2 * t * h * h) + (2 * lv * h * 2 * h) + (2 * t * lv * h) * 2 + (2 * t * h * h)
    assert decoder_forward_flops(load_run_config(None, tiny + [CROSS_ONLY]), t, lv) == cross_attn


def test_only_an_architecture_with_a_decoder_accepts_it():
    with pytest.raises(ValueError, match="model.decoder_cross_attention_only=true needs a reconstruction decoder, which model.arch='bert' does not"):
        tiny_config(CROSS_ONLY, "model.decoder_num_layers=0", arch="bert")
