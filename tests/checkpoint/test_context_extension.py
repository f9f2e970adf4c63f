"""Long context: the modern encoder trains at L=8192 with local/global attention and document masks,
after ``init_from`` a short-context checkpoint with a new global RoPE base (ModernBERT's 1024 -> 8192
recipe at toy width); what cannot work is refused in one line.
"""

from __future__ import annotations

import logging
import math

import pytest
import torch
from megatron.core.dist_checkpointing.mapping import ShardedTensor

from megatron_crossbert.checkpoint.errors import CheckpointError
from tests.support.training import tiny_config

PHASE_1 = dict(model__encoder="modern", model__local_attention=8, model__global_attn_every_n_layers=2,
               model__rotary_base=10000.0, model__local_rotary_base=10000.0, model__attention_dropout=0.0,
               model__hidden_dropout=0.0)
LONG = 8192


def _save_phase_1(cfg, root) -> None:
    """A model-only checkpoint of the short-context run (weights are what init_from reads)."""
    from megatron_crossbert.platform import distributed as platform
    from megatron_crossbert.checkpoint.save import save_model_only
    from megatron_crossbert.architectures.build import build_model

    platform.initialize(cfg.parallel, 3)
    try:
        save_model_only(build_model(cfg), cfg, root)
    finally:
        platform.destroy()


def _weights(root) -> dict[str, torch.Tensor]:
    from megatron.core import dist_checkpointing

    from megatron_crossbert.checkpoint.directories import resolve_checkpoint_dir

    return dist_checkpointing.load_plain_tensors(str(resolve_checkpoint_dir(root)))


@pytest.mark.slow
def test_init_from_1k_then_train_at_8k_with_a_new_global_rope_base(indexed_corpus, tmp_path, caplog):
    from megatron_crossbert.training.loop import run_loop
    from megatron_crossbert.training.setup import build_session

    short = tiny_config("crossbert", indexed_corpus, **PHASE_1)
    _save_phase_1(short, tmp_path / "short")
    long = tiny_config("crossbert", indexed_corpus, tmp_path / "long", **{**PHASE_1, "model__rotary_base": 160000.0},
                       model__max_position_embeddings=LONG, data__seq_length=LONG,
                       checkpoint__init_from=str(tmp_path / "short"), training__micro_batch_size=1,
                       training__global_batch_size=1, training__train_iters=2, training__lr_warmup_iters=0)
    with caplog.at_level(logging.WARNING):
        session = build_session(long)
    logged = caplog.text
    assert "global RoPE base 10000.0 -> 160000.0" in logged and "max_position_embeddings 32 -> 8192" in logged
    saved = _weights(tmp_path / "short")
    state = {entry.key: entry.data for entry in session.model.sharded_state_dict().values()
             if isinstance(entry, ShardedTensor)}
    compared = [key for key in saved if key.startswith(("embedding.", "encoder.")) and key in state]
    assert len(compared) > 10 and all(torch.equal(state[key], saved[key]) for key in compared)
    table = state["decoder_position_embedding.weight"]
    assert table.shape[0] == LONG and torch.equal(table[:32], saved["decoder_position_embedding.weight"])
    assert table[32:].std() > 0                                          # new rows: initialised, not zero
    assert session.model.rotary.global_rotary.inv_freq[1] < session.model.rotary.local_rotary.inv_freq[1]
    state = run_loop(session)
    assert len(state.losses) == 2 and all(math.isfinite(loss) for loss in state.losses)


def test_classic_encoder_past_its_position_table_is_refused_in_one_line(indexed_corpus, tmp_path):
    from megatron_crossbert.checkpoint.directories import resolve_checkpoint_dir
    from megatron_crossbert.checkpoint.verify import verify_checkpoint

    short = tiny_config("crossbert", indexed_corpus)
    _save_phase_1(short, tmp_path / "classic")
    longer = tiny_config("crossbert", indexed_corpus, model__max_position_embeddings=64, data__seq_length=64)
    ckpt = resolve_checkpoint_dir(tmp_path / "classic")
    with pytest.raises(CheckpointError, match="learned position table has 32 rows, seq_length 64 needs 64") as err:
        verify_checkpoint(ckpt, longer, weights_only=True)
    assert "model.encoder=modern" in str(err.value)
    inside = tiny_config("crossbert", indexed_corpus, model__max_position_embeddings=32, data__seq_length=16)
    verify_checkpoint(ckpt, inside, weights_only=True)        # BERT's 128 -> 512 recipe, inside the table
    smaller = tiny_config("crossbert", indexed_corpus, model__max_position_embeddings=16, data__seq_length=16)
    with pytest.raises(CheckpointError, match="checkpoint 32 vs run 16 \\(a position table cannot shrink\\)"):
        verify_checkpoint(ckpt, smaller, weights_only=True)
    rope = tiny_config("crossbert", indexed_corpus, **{**PHASE_1, "model__rotary_base": 20000.0})
    _save_phase_1(tiny_config("crossbert", indexed_corpus, **PHASE_1), tmp_path / "modern")
    with pytest.raises(CheckpointError, match="rotary_base: checkpoint 10000.0 vs run 20000.0"):
        verify_checkpoint(resolve_checkpoint_dir(tmp_path / "modern"), rope)      # a resume keeps positions' meaning
