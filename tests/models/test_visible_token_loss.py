"""CrossBERT's auxiliary visible-token loss (``model.encoder_token_loss_weight``): the encoder's states of the
visible tokens are decoded to their own ids through the reconstruction branch's LM head and the tied output
layer. The term leaves every reported loss value unchanged, carries exactly ``weight x n x`` the mean visible
cross-entropy's gradient (``n`` = the micro-batch's targets), runs only in training, is counted in the FLOPs,
and is refused where it cannot apply."""

from __future__ import annotations

import pytest
import torch

from megatron_crossbert.models.flops import lm_head_forward_flops, model_flops_per_sample
from tests.support.models import build, make_batch, tiny_config

WEIGHT = 0.5
ON = f"model.encoder_token_loss_weight={WEIGHT}"


def _grads(model) -> dict[str, torch.Tensor]:
    return {name: param.grad.clone() for name, param in model.named_parameters() if param.grad is not None}


def _by_hand(model, batch: dict) -> torch.Tensor:
    """The reconstruction loss's sum plus weight x n x the mean visible-token cross-entropy, written out."""
    model.encoder_token_loss_weight = 0.0
    recon = model(**batch)
    views = batch["visible"].shape[1]
    rows = batch["tokens"].repeat_interleave(views, dim=0)
    visible = batch["visible"].reshape(rows.shape[0], -1)
    ids = torch.gather(rows, 1, visible)
    hidden = model.run_encoder(ids, visible)
    logits, _ = model.output_layer(model.lm_head(hidden), weight=model.shared_embedding_or_output_weight())
    mean = model.compute_language_model_loss(ids, logits).float().mean()
    return recon.sum() + WEIGHT * recon.numel() * mean


def test_the_term_changes_no_loss_value_and_carries_exactly_the_visible_token_gradient():
    cfg = tiny_config(ON)
    batch = make_batch(cfg, batch=2)
    model = build(cfg)
    model.train()
    with_term = model(**batch)
    with_term.sum().backward()
    got = _grads(model)
    model.zero_grad()
    _by_hand(model, batch).backward()
    expected = _grads(model)
    plain = build(tiny_config())
    plain.train()
    assert torch.equal(with_term, plain(**batch))  # the reported loss is the reconstruction loss, bit for bit
    assert got.keys() == expected.keys()
    for name, grad in expected.items():
        assert torch.allclose(got[name], grad, atol=1e-6, rtol=1e-5), name
    plain.zero_grad()
    plain(**batch).sum().backward()
    first = "embedding.word_embeddings.weight"
    assert not torch.allclose(got[first], _grads(plain)[first])  # the term does reach the encoder


def test_evaluation_runs_no_visible_token_head():
    model = build(tiny_config(ON))
    model.eval()
    calls = []
    model.output_layer.register_forward_hook(lambda *args: calls.append(1))
    model(**make_batch(tiny_config(ON), batch=2))
    assert len(calls) == 1  # the targets' head only


def test_the_flops_count_the_head_over_the_visible_tokens_too():
    cfg = tiny_config(ON)
    added = model_flops_per_sample(cfg) - model_flops_per_sample(tiny_config())
    visible = cfg.masking.visible_length(cfg.data.seq_length)
    assert added == 3 * cfg.masking.num_views * lm_head_forward_flops(cfg, visible, input_width=cfg.model.dec_hidden)


@pytest.mark.parametrize("overrides, message", [
    (("model.encoder_token_loss_weight=-1",), r"model.encoder_token_loss_weight=-1.0 must be >= 0.0 \(0 turns it off\)"),
    ((ON, "model.arch=bert", "model.decoder_num_layers=0"),
     "needs CrossBERT's reconstruction branch, which model.arch='bert' does not have"),
    ((ON, "model.decoder_hidden_size=16", "model.decoder_num_attention_heads=2"),
     "shares the decoder's LM head, so the decoder width 16 must equal model.hidden_size=32"),
])
def test_refused_where_it_cannot_apply(overrides, message):
    with pytest.raises(ValueError, match=message):
        tiny_config(*overrides)
