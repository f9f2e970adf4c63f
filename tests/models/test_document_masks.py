"""Document masks and windows through the real models (megatron-core, one CPU process).

- CrossBERT (classic; modern with windows and a local RoPE base), MLM-modern with windows and megatron's
  BertModel: SDPA equals the megatron reference in loss and every gradient (fp32, <= 1e-5);
- isolation: changing document B never changes document A's encoder output or loss (CrossBERT encoder
  and per-target loss; both MLM baselines' per-token loss); without the mask it does;
- 1-token fragments whose only token is a target in a view: no NaN in loss or gradients, on every backend;
- token coordinates and stacked RoPE survive full activation recompute;
- the TE spec's old checkpoints (``core_attention._extra_state``) load into the new module.
"""

from __future__ import annotations

import pytest
import torch

from tests.support.models import DOCUMENTS_SEQ as SEQ
from tests.support.models import build, documents_config

TOL = 1e-5
WINDOWS = ("model.local_attention=6", "model.global_attn_every_n_layers=2", "model.local_rotary_base=10000")


def sample_batch(cfg, seed: int = 0) -> dict[str, torch.Tensor]:
    """Tokens, complementary views, fragments [CLS]+7 | 1 | 9 | 1 | 5 (two 1-token fragments; fragment 1's
    only token is a target of view A, so its decoder cross-attention row has no visible key)."""
    gen = torch.Generator().manual_seed(seed)
    tokens = torch.randint(5, cfg.model.vocab_size, (2, SEQ), generator=gen)
    segments = torch.repeat_interleave(torch.arange(5), torch.tensor([8, 1, 9, 1, 5])).expand(2, SEQ).contiguous()
    perm = torch.stack([torch.randperm(SEQ, generator=gen) for _ in range(2)])
    perm[0] = torch.cat([perm[0][perm[0] != 8], torch.tensor([8])])
    half = SEQ // 2
    vis_a, vis_b = perm[:, :half].sort(-1).values, perm[:, half:].sort(-1).values
    return {"tokens": tokens, "segments": segments, "visible": torch.stack([vis_a, vis_b], 1),
            "targets": torch.stack([vis_b, vis_a], 1)}


def mlm_forward(model, batch: dict, tokens: torch.Tensor | None = None) -> torch.Tensor:
    """What ``MlmSpec.forward_step`` does: no padding mask, the samples' documents."""
    tokens = batch["tokens"] if tokens is None else tokens
    return model(tokens, None, lm_labels=batch["tokens"], segments=batch["segments"])


def loss_and_grads(model, batch: dict):
    model.zero_grad()
    loss = model(**batch) if "visible" in batch else mlm_forward(model, batch)
    (loss * torch.linspace(0.5, 1.5, loss.numel()).view_as(loss)).sum().backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


CASES = {
    "crossbert-classic": ("crossbert", ()),
    "crossbert-modern-windows": ("crossbert", ("model.encoder=modern", *WINDOWS)),
    "mlm-modern-windows": ("mlm", ("model.encoder=modern", "model.decoder_num_layers=0", *WINDOWS)),
    "bert": ("bert", ("model.decoder_num_layers=0",)),
}


def _cfg(case: str, *extra: str):
    arch, overrides = CASES[case]
    return documents_config(*overrides, *extra, arch=arch)


def _batch(case: str) -> dict:
    batch = sample_batch(_cfg(case))
    return batch if CASES[case][0] == "crossbert" else {"tokens": batch["tokens"], "segments": batch["segments"]}


@pytest.mark.parametrize("case", sorted(CASES))
def test_sdpa_equals_the_megatron_reference(case):
    batch = _batch(case)
    ref_loss, ref_grads = loss_and_grads(build(_cfg(case, "model.attention_backend=megatron"), training=True), batch)
    loss, grads = loss_and_grads(build(_cfg(case, "model.attention_backend=sdpa"), training=True), batch)
    assert torch.isfinite(loss).all() and (loss - ref_loss).abs().max() <= TOL
    assert grads.keys() == ref_grads.keys() and all(torch.isfinite(g).all() for g in grads.values())
    worst = max((grads[n] - ref_grads[n]).abs().max().item() for n in grads)
    assert worst <= TOL, worst


def _encoder_output_and_loss(model, batch):
    seen = {}
    hook = model.encoder.register_forward_hook(lambda mod, args, out: seen.update(out=out))
    try:
        with torch.no_grad():
            loss = model(**batch) if "visible" in batch else mlm_forward(model, batch, batch["tokens"])
    finally:
        hook.remove()
    return seen["out"].transpose(0, 1), loss


@pytest.mark.parametrize("case", sorted(CASES))
def test_document_b_never_changes_document_a(case):
    batch = _batch(case)
    changed = dict(batch, tokens=torch.where(batch["segments"] == 2, (batch["tokens"] * 7) % 190 + 5, batch["tokens"]))
    for document_mask in (True, False):
        model = build(_cfg(case, f"data.document_mask={document_mask}"), training=True).eval()
        (enc, loss), (enc2, loss2) = _encoder_output_and_loss(model, batch), _encoder_output_and_loss(model, changed)
        if "visible" in batch:
            rows = batch["segments"].repeat_interleave(2, 0)
            a_in = rows.gather(1, batch["visible"].reshape(4, -1)) == 0
            a_out = rows.gather(1, batch["targets"].reshape(4, -1)) == 0
        else:
            a_in = a_out = batch["segments"] == 0
        assert torch.equal(enc[a_in], enc2[a_in]) == document_mask, (case, document_mask)
        assert torch.equal(loss[a_out], loss2[a_out]) == document_mask, (case, document_mask)


@pytest.mark.parametrize("backend", ["sdpa", "megatron"])
def test_one_token_fragments_never_give_nan(backend):
    cfg = _cfg("crossbert-modern-windows", f"model.attention_backend={backend}")
    batch = sample_batch(cfg)
    loss, grads = loss_and_grads(build(cfg, training=True), batch)
    assert torch.isfinite(loss).all() and all(torch.isfinite(g).all() for g in grads.values())
    single = (batch["segments"][0] == 1).nonzero().item()                     # fragment 1: one token, a target
    column = (batch["targets"][0, 0] == single).nonzero().item()
    assert torch.isfinite(loss[0, column]) and loss[0, column] > 0


def test_flex_forward_equals_sdpa_on_the_cpu():
    """FlexAttention runs forward-only here (a flex-trained checkpoint evaluated on a CPU takes SDPA;
    this forces flex through the module to check its block masks in the whole model)."""
    from megatron_crossbert.models.core_attention import CoreAttention

    cfg = _cfg("crossbert-modern-windows")
    batch = sample_batch(cfg)
    model = build(cfg).eval()
    with torch.no_grad():
        reference = model(**batch)
        for module in model.modules():
            if isinstance(module, CoreAttention):
                module.options = type(module.options)("flex", module.options.half_windows)
        flex = model(**batch)
    assert (flex - reference).abs().max() <= TOL


def test_layouts_and_stacked_rope_survive_activation_recompute():
    """Full recompute saves attention_mask (the token coordinates) and rotary_pos_emb through save_for_backward."""
    batch = sample_batch(_cfg("crossbert-modern-windows"))
    plain = loss_and_grads(build(_cfg("crossbert-modern-windows"), training=True), batch)
    recomputed = loss_and_grads(build(_cfg("crossbert-modern-windows", "parallel.recompute_activations=true"),
                                        training=True), batch)
    assert torch.equal(plain[0], recomputed[0])
    assert max((plain[1][n] - recomputed[1][n]).abs().max().item() for n in plain[1]) <= TOL


def test_explicit_flex_is_refused_at_start_in_one_line(tmp_path, capsys):
    from megatron_crossbert.cli.pretrain import main

    if torch.cuda.is_available():
        pytest.skip("CPU-only expectation")
    args = ["--set", "model.attention_backend=flex", "--set", "model.attention_dropout=0", "--save", str(tmp_path)]
    assert main(args) == 2 and not any(tmp_path.iterdir())
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "FlexAttention has no backward pass on the CPU" in err
    with pytest.raises(ValueError, match="no attention dropout"):
        documents_config("model.attention_backend=flex", "model.attention_dropout=0.1")
    model = build(documents_config("model.attention_backend=flex"))        # evaluation/export of a flex run
    assert model.attention.encoder.backend == "sdpa" and "evaluation" in model.attention.why


def test_old_te_checkpoints_with_core_attention_extra_state_still_load(tmp_path):
    """TE's DotProductAttention saved ``core_attention._extra_state``; CoreAttention has none: such a key
    in a checkpoint is simply not requested (written here without TE, as a ShardedObject)."""
    from megatron.core.dist_checkpointing.mapping import ShardedObject

    from megatron_crossbert.checkpoint.load import load_model_weights
    from megatron_crossbert.checkpoint.save import save_model_only

    cfg = _cfg("crossbert-classic")
    model = build(cfg, training=True)
    original = model.sharded_state_dict

    def with_te_extra_state(*args, **kwargs):
        state = original(*args, **kwargs)
        key = "encoder.layers.0.self_attention.core_attention._extra_state"
        state[key] = ShardedObject(key, b"te fp8 meta", (1,), (0,), replica_id=0)
        return state

    model.sharded_state_dict = with_te_extra_state
    save_model_only(model, cfg, tmp_path)
    fresh = build(cfg, seed=5, training=True)
    load_model_weights(fresh, tmp_path)
    for (name, param), (_, loaded) in zip(model.named_parameters(), fresh.named_parameters()):
        assert torch.equal(param, loaded), name
