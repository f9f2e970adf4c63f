"""CrossBERT's decoder reading positions itself (``model.decoder_context_position_embedding``): with learned
positions, the decoder's cross-attention finds the visible tokens near a target only through positions the
encoder writes into its states, unless the decoder adds each visible token's position to what it reads. The
table sits at the encoder's width, trains, is counted by the planner, stays out of the HF export, and only a
CrossBERT with learned positions accepts it."""

from __future__ import annotations

import pytest
import torch

from megatron_crossbert.convert.keymap import RECONSTRUCTION_PREFIXES
from megatron_crossbert.planning.parameters import total_params
from tests.support.models import SEQ, build, make_batch, tiny_config

CONTEXT = "model.decoder_context_position_embedding=true"


def test_the_decoder_reads_each_visible_tokens_position_added_to_its_state_and_the_table_trains():
    cfg = tiny_config(CONTEXT, "model.decoder_hidden_size=16", "model.decoder_num_attention_heads=2")
    model = build(cfg)
    table = model.context_position_embedding.weight
    assert table.shape == (cfg.model.max_position_embeddings, cfg.model.hidden_size)  # the encoder's width
    batch = make_batch(cfg, batch=2)
    visible = batch["visible"].reshape(4, -1)
    memory = torch.randn(visible.shape[1], 4, cfg.model.hidden_size)
    assert torch.allclose(model._context(memory, visible) - memory, table[visible].transpose(0, 1), atol=1e-6)
    loss = model(**batch)
    assert loss.shape == (2 * 2, SEQ - cfg.masking.visible_length(SEQ)) and torch.isfinite(loss).all()
    loss.mean().backward()
    assert table.grad is not None and bool(table.grad[visible.unique()].abs().sum() > 0)
    assert not bool(table.grad[SEQ:].abs().sum())  # positions past the sequence are never read


def test_off_by_default_and_counted_by_the_planner_when_on():
    plain, with_context = build(tiny_config()), build(tiny_config(CONTEXT))
    assert plain.context_position_embedding is None
    added = sum(p.numel() for p in with_context.parameters()) - sum(p.numel() for p in plain.parameters())
    assert added == 32 * 32  # max_position_embeddings x hidden_size
    assert total_params(tiny_config(CONTEXT)) - total_params(tiny_config()) == added
    names = [name for name, _ in with_context.named_parameters() if name.startswith("context_position")]
    assert names and all(name.startswith(RECONSTRUCTION_PREFIXES) for name in names)  # not exported


@pytest.mark.parametrize("overrides, found", [
    (("model.encoder=modern",), "has rotary positions"),
    (("model.arch=bert", "model.decoder_num_layers=0"), "has no reconstruction decoder"),
])
def test_only_a_crossbert_with_learned_positions_accepts_it(overrides, found):
    with pytest.raises(ValueError, match=f"model.decoder_context_position_embedding=true needs a reconstruction "
                                         f"decoder reading an encoder with learned positions .*{found}"):
        tiny_config(CONTEXT, *overrides)
