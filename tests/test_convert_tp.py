"""Layout independence: the same weights saved at TP=2 (2 spawned gloo ranks) and at TP=1 export to
identical safetensors in every classic format, raw TP=2 shards gathered along partition_dim equal the
TP=1 tensors, and TP=2 checkpoint -> HF -> native is bit-identical for each format.

Vocab 300 pads to 384 rows (multiple 128) at both TP sizes: the table height is TP-independent, so
resharding never changes the embedding shape.
"""

from __future__ import annotations

import pytest
import torch
from multirank import run_ranks
from test_convert_support import load_native, make_checkpoint, make_tokenizer, read_safetensors, tiny_run_config

from megatron_crossbert import platform
from megatron_crossbert.config import ParallelConfig
from megatron_crossbert.convert import export_to_hf, import_from_hf
from megatron_crossbert.convert.layout import gather_tensor_parallel


def reshard_to_tp2(rank: int, world_size: int, src: str, dst: str, tokenizer: str) -> dict:
    """Rank body: load the TP=1 checkpoint at TP=2, save it at TP=2, return this rank's raw shards.

    As numpy arrays: torch tensors cross the queue as shared-memory file descriptors, which vanish
    when the rank exits before the parent has read them (FileNotFoundError on a busy machine)."""
    from megatron_crossbert import platform
    from megatron_crossbert.checkpoint_format import load_model_weights, save_model_only
    from megatron_crossbert.models import build_model

    run_cfg = tiny_run_config("crossbert", tokenizer=tokenizer, tp=2)
    platform.initialize(run_cfg.parallel, run_cfg.training.seed)
    model = build_model(run_cfg)
    load_model_weights(model, src)
    save_model_only(model, run_cfg, dst)
    return {k: v.detach().cpu().numpy().copy() for k, v in model.state_dict().items()
            if isinstance(v, torch.Tensor)}


@pytest.mark.multirank
def test_tp2_and_tp1_checkpoints_export_identically(tmp_path):
    tok = make_tokenizer(tmp_path / "tok")
    source = tiny_run_config("crossbert", tokenizer=str(tok))
    state = make_checkpoint(tmp_path / "tp1", source)
    shards = [{k: torch.from_numpy(v) for k, v in shard.items()}
              for shard in run_ranks(reshard_to_tp2, 2, str(tmp_path / "tp1"), str(tmp_path / "tp2"), str(tok))]
    gathered = gather_tensor_parallel(shards)
    encoder = [k for k in state if k.startswith(("embedding.", "encoder.")) and not k.endswith("_extra_state")]
    assert gathered["embedding.word_embeddings.weight"].shape == (384, 32)
    assert all(torch.equal(gathered[k], state[k]) for k in encoder)
    for name in ("xlmr-xl", "megatron-bert"):
        hf1, hf2 = tmp_path / f"hf1_{name}", tmp_path / f"hf2_{name}"
        tp1 = read_safetensors(export_to_hf(tmp_path / "tp1", hf1, format_name=name))
        tp2 = read_safetensors(export_to_hf(tmp_path / "tp2", hf2, format_name=name))
        assert tp1.keys() == tp2.keys() and all(torch.equal(tp1[k], tp2[k]) for k in tp1)
        assert (hf1 / "config.json").read_text() == (hf2 / "config.json").read_text()
        back_dir = import_from_hf(hf2, tmp_path / f"back_{name}")
        platform.initialize(ParallelConfig(), 0)
        try:
            back = load_native(back_dir).state_dict()
        finally:
            platform.destroy()
        assert all(torch.equal(back[k], state[k]) for k in encoder), f"{name}: TP=2 -> HF -> native differs"
