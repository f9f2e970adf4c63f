"""Layout independence: the same weights saved at TP=2 (2 spawned gloo ranks) and at TP=1 export to
identical safetensors in every format (classic CrossBERT: ``xlmr-xl``, ``megatron-bert``; modern
CrossBERT: ``modernbert``), raw TP=2 shards gathered along partition_dim (GeGLU fc1 half by half) equal
the TP=1 tensors, and TP=2 checkpoint -> HF -> native is bit-identical for each format.

Vocab 300 pads to 384 rows (multiple 128) at both TP sizes: the table height is TP-independent, so
resharding never changes the embedding shape.
"""

from __future__ import annotations

import pytest
import torch

from megatron_crossbert.platform import distributed as platform
from megatron_crossbert.arch import get_encoder
from megatron_crossbert.config import ParallelConfig
from megatron_crossbert.convert import export_to_hf, import_from_hf
from megatron_crossbert.convert.megatron_tensors import gather_tensor_parallel
from tests.support.conversion import (
    encoder_keys,
    load_native,
    make_checkpoint,
    read_safetensors,
    tiny_run_config,
)
from tests.support.multirank import run_ranks

ENCODERS = ("classic", "modern")
"""Encoder families tested; each is exported to every format of its ``arch.EncoderFamily.hf_formats``."""


def reshard_to_tp2(rank: int, world_size: int, jobs: list[tuple[str, str, str]], tokenizer: str) -> list[dict]:
    """Rank body: for each (encoder, src, dst) load the TP=1 checkpoint at TP=2, save it at TP=2, and
    return this rank's raw shards (one spawn for every encoder: a spawn costs ~10 s).

    As numpy arrays: torch tensors cross the queue as shared-memory file descriptors, which vanish
    when the rank exits before the parent has read them (FileNotFoundError on a busy machine)."""
    from megatron_crossbert.platform import distributed as platform
    from megatron_crossbert.checkpoint.load import load_model_weights
    from megatron_crossbert.checkpoint.save import save_model_only
    from megatron_crossbert.architectures.build import build_model

    configs = [(tiny_run_config("crossbert", tokenizer=tokenizer, tp=2, encoder=encoder), src, dst)
               for encoder, src, dst in jobs]
    platform.initialize(configs[0][0].parallel, configs[0][0].training.seed)  # one TP=2 state for all jobs
    shards = []
    for run_cfg, src, dst in configs:
        model = build_model(run_cfg)
        load_model_weights(model, src)
        save_model_only(model, run_cfg, dst)
        shards.append({k: v.detach().cpu().numpy().copy() for k, v in model.state_dict().items()
                       if isinstance(v, torch.Tensor)})
    return shards


def _check_exports(tmp_path, encoder: str, state: dict) -> None:
    """Each format: TP=1 and TP=2 exports are identical files; TP=2 -> HF -> native is bit-identical."""
    encoder_state = encoder_keys(state)
    for name in get_encoder(encoder).hf_formats:
        hf1, hf2 = tmp_path / f"hf1_{name}", tmp_path / f"hf2_{name}"
        tp1 = read_safetensors(export_to_hf(tmp_path / f"tp1_{encoder}", hf1, format_name=name))
        tp2 = read_safetensors(export_to_hf(tmp_path / f"tp2_{encoder}", hf2, format_name=name))
        assert tp1.keys() == tp2.keys() and all(torch.equal(tp1[k], tp2[k]) for k in tp1), name
        assert (hf1 / "config.json").read_text() == (hf2 / "config.json").read_text()
        back_dir = import_from_hf(hf2, tmp_path / f"back_{name}")
        platform.initialize(ParallelConfig(), 0)
        try:
            back = load_native(back_dir).state_dict()
        finally:
            platform.destroy()
        assert all(torch.equal(back[k], state[k]) for k in encoder_state), f"{name}: TP=2 -> HF -> native differs"


@pytest.mark.multirank
def test_tp2_and_tp1_checkpoints_export_identically(tmp_path, word_tokenizer):
    tok = word_tokenizer
    states = {encoder: make_checkpoint(tmp_path / f"tp1_{encoder}",
                                       tiny_run_config("crossbert", tokenizer=str(tok), encoder=encoder))
              for encoder in ENCODERS}
    jobs = [(encoder, str(tmp_path / f"tp1_{encoder}"), str(tmp_path / f"tp2_{encoder}")) for encoder in states]
    per_rank = run_ranks(reshard_to_tp2, 2, jobs, str(tok))
    for index, (encoder, state) in enumerate(states.items()):
        shards = [{k: torch.from_numpy(v) for k, v in rank[index].items()} for rank in per_rank]
        gathered = gather_tensor_parallel(shards, gated_mlp=get_encoder(encoder).gated_mlp)
        assert gathered["embedding.word_embeddings.weight"].shape == (384, 32)
        assert all(torch.equal(gathered[k], state[k]) for k in encoder_keys(state)), encoder
        _check_exports(tmp_path, encoder, state)
