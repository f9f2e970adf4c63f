"""Single-process model tests: shapes, what the encoder sees, coverage, encode, checkpoints, training.

Every test builds a tiny model (h=32..64) with dropout 0 on a world of size 1; multi-rank TP/PP
equivalence lives in models/test_multirank.py.
"""

from __future__ import annotations

import pytest
import torch

from megatron_crossbert.config import RunConfig
from megatron_crossbert.models import CrossBertModel, bert_encode, model_encode
from megatron_crossbert.models.bert_baseline import bert_mask_tokens
from tests.support.models import EXACT, MLM_ARCHS, SEQ, build, make_batch, mlm_batch, tiny_config


def capture_encoder_output(model: CrossBertModel, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """(encoder input, encoder output) of one forward, via hooks on megatron's TransformerBlock."""
    seen = {}
    hook = model.encoder.register_forward_hook(
        lambda mod, args, kwargs, out: seen.update(inp=kwargs["hidden_states"], out=out), with_kwargs=True)
    try:
        with torch.no_grad():
            model(**batch)
    finally:
        hook.remove()
    return seen["inp"], seen["out"]


def test_layer_implementation_is_resolved_in_one_place():
    from megatron_crossbert.models import use_transformer_engine

    if torch.cuda.is_available():
        pytest.skip("CPU-only expectations")
    assert not use_transformer_engine(tiny_config().model)
    assert not use_transformer_engine(tiny_config("model.transformer_impl=auto").model)
    with pytest.raises(ValueError, match="needs CUDA"):
        use_transformer_engine(tiny_config("model.transformer_impl=transformer_engine").model)


def test_forward_shapes_and_encoder_length():
    cfg = tiny_config("masking.mask_ratio=0.75")
    model = build(cfg)
    batch = make_batch(cfg, batch=3)
    lv, targets = cfg.masking.visible_length(SEQ), SEQ - cfg.masking.visible_length(SEQ)
    encoder_in, encoder_out = capture_encoder_output(model, batch)
    assert encoder_in.shape == (lv, 3 * 2, 32) and encoder_out.shape == (lv, 6, 32)
    loss = model(**batch)
    assert loss.shape == (3 * 2, targets) and loss.dtype == torch.float32 and torch.isfinite(loss).all()
    assert abs(loss.mean().item() - torch.log(torch.tensor(256.0)).item()) < 1.0   # ~uniform at init

    single = tiny_config("masking.complementary=false")
    one_view = make_batch(single, batch=2)
    assert one_view["visible"].shape == (2, 1, SEQ // 2)
    assert build(single)(**one_view).shape == (2, SEQ // 2)


def test_encoder_sees_only_visible_tokens():
    cfg = tiny_config()
    model = build(cfg).eval()
    batch = make_batch(cfg, batch=2)
    _, reference = capture_encoder_output(model, batch)
    masked_pos, visible_pos = batch["targets"][0, 0, 0], batch["visible"][0, 0, 0]
    changed = {**batch, "tokens": batch["tokens"].clone()}
    changed["tokens"][0, masked_pos] = (changed["tokens"][0, masked_pos] + 1) % 200
    _, out = capture_encoder_output(model, changed)
    assert torch.equal(out[:, 0], reference[:, 0]), "a masked token leaked into view A's encoder"
    assert not torch.equal(out[:, 1], reference[:, 1]), "view B sees that position, so its output must change"
    changed["tokens"][0, visible_pos] = (changed["tokens"][0, visible_pos] + 1) % 200
    _, out = capture_encoder_output(model, changed)
    assert not torch.equal(out[:, 0], reference[:, 0])
    assert torch.equal(out[:, 2:], reference[:, 2:]), "other sequences must not be affected"


def test_complementary_views_reach_every_position():
    """Each position is a target in exactly one view, and its loss term has a nonzero logits gradient."""
    cfg = tiny_config()
    model = build(cfg)
    batch = make_batch(cfg, batch=2)
    logits = {}
    hook = model.output_layer.register_forward_hook(lambda mod, args, out: logits.update(t=out[0]))
    loss = model(**batch)
    hook.remove()
    logits["t"].retain_grad()
    loss.sum().backward()
    grad_per_target = logits["t"].grad.abs().sum(-1).transpose(0, 1)          # [b*V, T]
    assert (grad_per_target > 0).all()
    targets = batch["targets"]
    for seq in range(2):
        covered = torch.cat([targets[seq, v] for v in range(2)]).sort().values
        assert torch.equal(covered, torch.arange(SEQ)), "every position must be a target exactly once"
        assert not set(batch["visible"][seq, 0].tolist()) & set(batch["visible"][seq, 1].tolist())


def test_encode_matches_forward_encoder_and_respects_padding():
    cfg = tiny_config()
    model = build(cfg).eval()
    batch = make_batch(cfg, batch=2)
    lv = SEQ // 2
    batch["visible"][:, 0] = torch.arange(lv)                                  # view A = prefix 0..Lv-1
    _, encoder_out = capture_encoder_output(model, batch)
    with torch.no_grad():
        encoded = model.encode(batch["tokens"][:, :lv])
        assert encoded.shape == (2, lv, 32)
        torch.testing.assert_close(encoded, encoder_out[:, 0::2].transpose(0, 1), atol=1e-6, rtol=0)
        mask = torch.ones(2, SEQ, dtype=torch.long)
        mask[1, 5:] = 0
        padded = model.encode(batch["tokens"], mask)
        alone = model.encode(batch["tokens"][1:, :5])
        torch.testing.assert_close(padded[1, :5], alone[0], atol=1e-5, rtol=0)
        assert torch.equal(model_encode(model, batch["tokens"]), model.encode(batch["tokens"], torch.ones_like(mask)))


ENCODER_KEYS = ["embedding.word_embeddings.weight", "embedding.position_embeddings.weight",
                "encoder.layers.0.self_attention.linear_qkv.weight", "encoder.layers.1.mlp.linear_fc2.bias",
                "encoder.final_layernorm.weight", "encoder.final_layernorm.bias", "lm_head.dense.weight",
                "lm_head.layer_norm.bias", "output_layer.bias"]


def test_state_dict_keys_follow_the_contract():
    cross = set(build(tiny_config()).state_dict())
    bert = set(build(tiny_config(arch="bert")).state_dict())
    assert set(ENCODER_KEYS) <= cross and set(ENCODER_KEYS) <= bert
    assert {"mask_embedding", "decoder_position_embedding.weight", "decoder.final_layernorm.weight",
            "decoder.layers.0.cross_attention.linear_kv.weight"} <= cross
    assert not any(k.startswith(("decoder", "mask_embedding")) for k in bert)
    assert "output_layer.weight" not in cross, "output layer must be tied to the word embeddings"


@pytest.mark.parametrize("encoder", ["classic", "modern"])
def test_narrow_decoder_trains_with_the_same_keys(encoder):
    """A decoder at half the encoder's width: K/V read the encoder width, the head maps back to it."""
    cfg = tiny_config(f"model.encoder={encoder}", "model.decoder_hidden_size=16")
    assert cfg.model.dec_heads == 2                     # the encoder's head dim (8) kept at width 16
    model = build(cfg)
    loss = model(**make_batch(cfg, batch=2))
    loss.mean().backward()
    state = model.state_dict()
    assert loss.shape == (4, SEQ // 2) and torch.isfinite(loss).all()
    assert state["lm_head.dense.weight"].shape == (32, 16) and state["mask_embedding"].shape == (16,)
    assert state["decoder.layers.0.cross_attention.linear_kv.weight"].shape == (32, 32)   # h=32 -> 2d=32
    assert state["decoder.layers.0.cross_attention.linear_q.weight"].shape == (16, 16)
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
    assert set(build(tiny_config(f"model.encoder={encoder}")).state_dict()) == set(state)


def test_dist_checkpoint_round_trip(tmp_path):
    from megatron.core import dist_checkpointing

    cfg = tiny_config()
    model = build(cfg, seed=1)
    batch = make_batch(cfg, batch=2)
    with torch.no_grad():
        reference = model(**batch)
    dist_checkpointing.save(model.sharded_state_dict(), str(tmp_path))
    fresh = build(cfg, seed=2)
    with torch.no_grad():
        assert not torch.equal(fresh(**batch), reference)
        fresh.load_state_dict(dist_checkpointing.load(fresh.sharded_state_dict(), str(tmp_path)))
        assert torch.equal(fresh(**batch), reference)


def test_bert_baseline_loss_and_encode():
    cfg = tiny_config(arch="bert")
    model = build(cfg).eval()
    tokens = make_batch(cfg, batch=2)["tokens"]
    masked, labels, loss_mask = bert_mask_tokens(tokens, mask_id=3, vocab_size=200,
                                                 generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        loss = model(masked, torch.ones_like(tokens), lm_labels=labels)
        assert loss.shape == (2, SEQ) and loss.dtype == torch.float32
        assert bert_encode(model, tokens).shape == (2, SEQ, 32)
    assert 0 < loss_mask.sum() < loss_mask.numel()


def _masked_loss_and_grads(model, batch: dict) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    per_token = model(**batch)
    (per_token * batch["prediction_mask"]).sum().backward()
    return per_token.detach(), {n: p.grad.detach().clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("name", sorted(MLM_ARCHS))
def test_sparse_prediction_equals_dense(name):
    """Both MLM baselines: head on the masked positions only == dense head then loss mask (loss, every grad)."""
    sparse = build(tiny_config(*MLM_ARCHS[name]))
    dense = build(tiny_config(*MLM_ARCHS[name], "model.sparse_prediction=false"))
    dense.load_state_dict(sparse.state_dict())
    assert sparse.sparse_prediction and not dense.sparse_prediction
    batch = mlm_batch(tiny_config(*MLM_ARCHS[name]))
    mask = batch["prediction_mask"]
    dense_loss, dense_grads = _masked_loss_and_grads(dense, batch)
    sparse_loss, sparse_grads = _masked_loss_and_grads(sparse, batch)
    assert sparse_loss.dtype == torch.float32 and sparse_loss.shape == dense_loss.shape
    assert torch.all(sparse_loss[mask == 0] == 0) and torch.all(dense_loss[mask == 0] != 0)
    torch.testing.assert_close(sparse_loss * mask, dense_loss * mask, **EXACT)
    assert dense_grads.keys() == sparse_grads.keys()
    for key in dense_grads:
        torch.testing.assert_close(sparse_grads[key], dense_grads[key], **EXACT, msg=lambda m: f"{key}: {m}")
    with torch.no_grad():  # requests without a prediction mask (logits, evaluation) stay megatron's dense path
        ids, attention = batch["input_ids"], batch["attention_mask"]
        assert torch.equal(sparse(ids, attention, lm_labels=batch["lm_labels"]),
                           dense(ids, attention, lm_labels=batch["lm_labels"]))
        logits = sparse(ids, attention)
        logits = logits[0] if isinstance(logits, tuple) else logits
        assert logits.shape[:2] == ids.shape
    nothing, grads = _masked_loss_and_grads(sparse, {**batch, "prediction_mask": torch.zeros_like(mask)})
    assert torch.all(nothing == 0) and all(torch.all(g == 0) for g in grads.values())


@pytest.mark.parametrize("name", sorted(MLM_ARCHS))
def test_dense_and_sparse_checkpoints_load_into_each_other(name, tmp_path):
    """sparse_prediction changes compute only: the same dist-checkpoint keys, loadable both ways."""
    from megatron.core import dist_checkpointing

    configs = {flag: tiny_config(*MLM_ARCHS[name], f"model.sparse_prediction={flag}") for flag in ("true", "false")}
    for source, target in (("false", "true"), ("true", "false")):
        saved, fresh = build(configs[source], seed=1), build(configs[target], seed=2)
        assert set(saved.sharded_state_dict()) == set(fresh.sharded_state_dict())
        (tmp_path / source).mkdir()
        dist_checkpointing.save(saved.sharded_state_dict(), str(tmp_path / source))
        fresh.load_state_dict(dist_checkpointing.load(fresh.sharded_state_dict(), str(tmp_path / source)))
        for key, value in saved.state_dict().items():
            if torch.is_tensor(value):
                assert torch.equal(fresh.state_dict()[key], value), key


def _train_steps(cfg: RunConfig, batch: dict, step_loss, steps: int) -> list[float]:
    """megatron DDP + get_megatron_optimizer (AdamW) on one fixed batch; returns the loss per step."""
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer

    module = build(cfg)
    ddp = DistributedDataParallel(module.config, DistributedDataParallelConfig(), module)
    optimizer = get_megatron_optimizer(
        OptimizerConfig(optimizer="adam", lr=1e-2, weight_decay=0.01, clip_grad=1.0), [ddp],
        use_gloo_process_groups=False)  # platform.initialize makes no gloo groups
    losses = []
    for _ in range(steps):
        ddp.zero_grad_buffer()
        optimizer.zero_grad()
        loss = step_loss(ddp, batch)
        loss.backward()
        ddp.finish_grad_sync()
        optimizer.step()
        losses.append(loss.item())
    return losses


def test_optimizer_steps_reduce_loss_for_both_architectures():
    cfg = tiny_config()
    cross = _train_steps(cfg, make_batch(cfg, batch=4), lambda m, b: m(**b).mean(), steps=20)
    bert_cfg = tiny_config(arch="bert")
    tokens = make_batch(bert_cfg, batch=4)["tokens"]
    masked, labels, loss_mask = bert_mask_tokens(tokens, mask_id=3, vocab_size=200, mask_prob=0.3,
                                                 generator=torch.Generator().manual_seed(0))
    bert_batch = {"input_ids": masked, "attention_mask": torch.ones_like(tokens), "lm_labels": labels}
    bert = _train_steps(bert_cfg, bert_batch,
                        lambda m, b: (m(**b) * loss_mask).sum() / loss_mask.sum(), steps=20)
    assert cross[-1] < 0.7 * cross[0], cross
    assert bert[-1] < 0.7 * bert[0], bert


def test_bf16_and_activation_recompute():
    """bf16 builds all-bf16 parameters with a float32 loss; full recompute changes nothing numerically."""
    cfg = tiny_config("training.precision=bf16")
    batch = make_batch(cfg, batch=2)
    model = build(cfg)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    loss = model(**batch)
    assert loss.dtype == torch.float32 and torch.isfinite(loss).all()
    loss.mean().backward()
    bert = build(tiny_config("training.precision=bf16", arch="bert"))
    tokens = batch["tokens"]
    assert bert(tokens, torch.ones_like(tokens), lm_labels=tokens).dtype == torch.float32

    runs = []
    for recompute in ("false", "true"):
        model = build(tiny_config(f"parallel.recompute_activations={recompute}"), seed=5)
        loss = model(**batch)
        loss.sum().backward()
        runs.append((loss.detach(), [p.grad for p in model.parameters()]))
    assert torch.equal(runs[0][0], runs[1][0])
    assert all(torch.equal(a, b) for a, b in zip(runs[0][1], runs[1][1]))


def test_transformer_config_mapping():
    from megatron_crossbert.models import transformer_config

    cfg = tiny_config("training.precision=fp8", "training.fp8_recipe=tensorwise", "model.decoder_num_layers=3",
                      "model.decoder_ffn_hidden_size=48", "parallel.pipeline_model_parallel_size=2",
                      "model.bias_gelu_fusion=true", "model.layernorm_epsilon=0.000001")
    enc, dec = transformer_config(cfg), transformer_config(cfg, decoder=True)
    assert (enc.fp8, enc.fp8_recipe, enc.bf16, enc.params_dtype) == ("hybrid", "tensorwise", True, torch.bfloat16)
    assert enc.pipeline_model_parallel_size == 2 and dec.pipeline_model_parallel_size == 1
    assert (enc.num_layers, dec.num_layers, dec.ffn_hidden_size, enc.ffn_hidden_size) == (2, 3, 48, 128)
    assert enc.bias_activation_fusion and enc.layernorm_epsilon == 1e-6 and enc.calculate_per_token_loss
    assert enc.add_bias_linear and not enc.apply_residual_connection_post_layernorm
    plain = transformer_config(tiny_config())
    assert plain.fp8 is None and not plain.bf16 and plain.recompute_granularity is None
