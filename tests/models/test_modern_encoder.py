"""The modern encoder is ModernBERT's layout: stock HF ModernBert reproduces it exactly, and RoPE is per row.

- ``encode`` of modern CrossBERT equals ``ModernBertModel`` (fp32, <= 1e-5) with right- and left-padded
  batches, under sdpa and eager; the MLM baseline's logits equal ``ModernBertForMaskedLM``'s.
- native -> HF -> native is bit-identical.
- per-row rotary frequencies equal megatron's own ``RotaryEmbedding`` at positions 0..s-1, and the
  CrossBERT encoder depends on the visible tokens' original positions only through their differences.
"""

from __future__ import annotations

import pytest
import torch

from megatron_crossbert.convert.formats.modernbert import from_modernbert, modernbert_config, to_modernbert
from tests.support.models import build, make_batch, tiny_config

MODERN = ("model.encoder=modern", "model.rotary_base=160000", "model.layernorm_epsilon=1e-6")
IDS = {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}


def _hf_model(cfg, model, masked_lm: bool, attn: str):
    from transformers import ModernBertConfig, ModernBertForMaskedLM, ModernBertModel

    native = {k: v for k, v in model.state_dict().items() if torch.is_tensor(v) and "_extra_state" not in k}
    rows = native["embedding.word_embeddings.weight"].shape[0]
    hf_cfg = ModernBertConfig(**modernbert_config(cfg.model, rows, IDS, masked_lm), attn_implementation=attn)
    hf = (ModernBertForMaskedLM if masked_lm else ModernBertModel)(hf_cfg).eval()
    missing, unexpected = hf.load_state_dict(to_modernbert(native, cfg.model, masked_lm), strict=False)
    assert not unexpected and set(missing) <= {"decoder.weight"}, (missing, unexpected)
    return hf, native


def _padded_batches(vocab: int) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(5)
    ids = torch.randint(5, vocab, (3, 12), generator=gen)
    right = torch.ones_like(ids)
    right[1, 7:] = 0
    right[2, 10:] = 0
    return {"unpadded": (ids, torch.ones_like(ids)), "right": (ids, right), "left": (ids, right.flip(1))}


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_crossbert_modern_encoder_equals_hf_modernbert(attn):
    cfg = tiny_config(*MODERN)
    model = build(cfg).eval()
    hf, _ = _hf_model(cfg, model, masked_lm=False, attn=attn)
    for name, (ids, mask) in _padded_batches(cfg.model.vocab_size).items():
        with torch.no_grad():
            ours = model.encode(ids, mask)
            theirs = hf(input_ids=ids, attention_mask=mask).last_hidden_state
        keep = mask.bool()
        diff = (ours - theirs)[keep].abs().max().item()
        assert diff <= 1e-5, f"{name} ({attn}): max abs diff {diff:.2e}"


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_mlm_modern_logits_equal_hf_modernbert_for_masked_lm(attn):
    cfg = tiny_config(*MODERN, arch="mlm")
    model = build(cfg).eval()
    hf, _ = _hf_model(cfg, model, masked_lm=True, attn=attn)
    ids, mask = _padded_batches(cfg.model.vocab_size)["unpadded"]
    with torch.no_grad():
        ours = model(ids)
        theirs = hf(input_ids=ids, attention_mask=mask).logits
    assert (ours - theirs).abs().max().item() <= 1e-5


@pytest.mark.parametrize("arch,masked_lm", [("crossbert", False), ("mlm", True)])
def test_modernbert_round_trip_is_bit_identical(arch, masked_lm):
    cfg = tiny_config(*MODERN, arch=arch)
    model = build(cfg)
    native = {k: v for k, v in model.state_dict().items() if torch.is_tensor(v) and "_extra_state" not in k}
    back = from_modernbert(to_modernbert(native, cfg.model, masked_lm), cfg.model, masked_lm)
    assert back, "nothing exported"
    for key, tensor in back.items():
        assert torch.equal(tensor, native[key]), key
    exported_prefixes = ("embedding.", "encoder.") + (("lm_head.", "output_layer.") if masked_lm else ())
    assert {k for k in native if k.startswith(exported_prefixes)} == set(back)


def test_row_rotary_matches_megatron_rotary_embedding():
    from megatron.core.models.common.embeddings.rotary_pos_embedding import RotaryEmbedding

    from megatron_crossbert.models.rotary import RowRotary

    cfg = tiny_config(*MODERN)
    model = build(cfg)
    rope = RotaryEmbedding(kv_channels=model.config.kv_channels, rotary_percent=1.0, rotary_base=160000,
                           use_cpu_initialization=True)
    positions = torch.arange(10).expand(3, 10)
    expected = torch.cat([torch.outer(torch.arange(10.0), rope.inv_freq)] * 2, dim=-1)[:, None, None, :]
    rotary = RowRotary(model.config, 160000)
    rows = rotary(positions)
    assert rows.shape == (10, 3, 1, model.config.kv_channels)
    torch.testing.assert_close(rows, expected.expand(10, 3, 1, -1), atol=0, rtol=0)
    rotary.bfloat16()  # what bf16 runs do to the whole model: the frequencies must stay float32
    torch.testing.assert_close(rotary(positions), rows, atol=0, rtol=0)


def test_modern_crossbert_sees_relative_positions_of_visible_tokens():
    """Shifting every visible position by a constant leaves the encoder output unchanged (RoPE is
    relative); moving one visible token changes it (positions do reach the attention). A large init
    std makes attention far from uniform, so positions matter visibly."""
    cfg = tiny_config(*MODERN, "model.init_method_std=0.3")
    model = build(cfg).eval()
    batch = make_batch(cfg, batch=2)
    tokens = torch.gather(batch["tokens"].repeat_interleave(2, 0), 1, batch["visible"].reshape(4, -1))
    visible = batch["visible"].reshape(4, -1)
    with torch.no_grad():
        base = model.run_encoder(tokens, visible)
        shifted = model.run_encoder(tokens, visible + 5)
        moved = visible.clone()
        moved[:, -1] += 3
        changed = model.run_encoder(tokens, moved)
    torch.testing.assert_close(shifted, base, atol=1e-4, rtol=1e-4)
    assert (changed - base).abs().max() > 1e-2
