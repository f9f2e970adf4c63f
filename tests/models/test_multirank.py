"""TP=2 (with and without sequence parallel) and PP=2 give the TP=1/PP=1 loss, gradients and encode().

One spawn of 2 gloo ranks runs every layout of every model variant in turn (each spawn costs ~10 s of
imports): the TP=1/PP=1 model is built on both ranks from one seed, its weights and gradients are kept,
and each parallel layout is loaded from those same weights by slicing along megatron's
``partition_dim`` (or by pipeline stage) and compared. Variants: classic CrossBERT, modern CrossBERT
(RoPE incl. cross-attention keys, GeGLU, no biases), both with a decoder at half the encoder's width
(cross-attention K/V read the encoder width, the LM head maps back to it), and both MLM baselines
(megatron's BertModel and the modern MLM). MLM batches carry a ragged prediction mask, and every layout
runs them twice, with the dense head and with sparse prediction: sparse must equal dense of the same
layout within 1e-6 (loss and every gradient, vocab-parallel cross-entropy at TP=2) and the TP=1 reference
within 1e-5. And modern CrossBERT and MLM with document masks, local/global windows and a
local RoPE base, whose TP=1 reference runs megatron's DotProductAttention while every parallel layout
runs SDPA: the attention backends agree at TP=1 (models/test_document_masks.py), TP=2 (+SP) and PP=2.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import pytest
import torch

from tests.support.models import EXACT, MLM_ARCHS, make_batch, mlm_batch, tiny_config

pytestmark = pytest.mark.multirank
TOL = dict(atol=1e-5, rtol=1e-5)


@dataclass(frozen=True)
class Variant:
    """A model to check: config overrides, and how its batch is made and read."""

    overrides: tuple[str, ...]
    ids_key: str = "tokens"
    """The batch entry holding token ids (what encode() is checked on); 'input_ids' = an MLM baseline."""
    sequence_parallel: bool = True
    """Check TP=2 with sequence parallelism too (megatron's BertModel needs apex for it)."""
    reference_overrides: tuple[str, ...] = ()
    """Applied to the TP=1/PP=1 reference only (e.g. another attention backend)."""
    documents: bool = False
    """The batch carries ``segments``: fragments of 5, 1, 6, 1 and 3 tokens (two 1-token fragments)."""

    @property
    def is_mlm(self) -> bool:
        return self.ids_key == "input_ids"


VARIANTS = {
    "classic": Variant(()),
    "modern": Variant(("model.encoder=modern",)),
    "narrow-classic": Variant(("model.decoder_hidden_size=16",)),      # decoder at h/2 (2 heads of 8)
    "narrow-modern": Variant(("model.encoder=modern", "model.decoder_hidden_size=16")),
    "mlm": Variant(MLM_ARCHS["mlm"], ids_key="input_ids"),
    "bert": Variant(MLM_ARCHS["bert"], ids_key="input_ids", sequence_parallel=False),
}
_WINDOWS = ("model.local_attention=4", "model.global_attn_every_n_layers=2", "model.local_rotary_base=10000",
            "model.attention_backend=sdpa")
VARIANTS.update({
    "modern-documents": Variant(("model.encoder=modern", *_WINDOWS),
                                reference_overrides=("model.attention_backend=megatron",), documents=True),
    "mlm-documents": Variant(("model.arch=mlm", "model.encoder=modern", "model.decoder_num_layers=0", *_WINDOWS),
                             ids_key="input_ids", reference_overrides=("model.attention_backend=megatron",),
                             documents=True),
})
_ACTIVE: list[Variant] = [VARIANTS["classic"]]


def _make_batch(cfg, variant: Variant) -> dict[str, torch.Tensor]:
    """CrossBERT views, or an MLM batch with a ragged prediction mask (``test_model.mlm_batch``); with
    ``documents``, the ``segments`` of five fragments."""
    batch = mlm_batch(cfg, batch=2, seed=3) if variant.is_mlm else make_batch(cfg, batch=2, seed=3)
    if variant.documents:
        sizes = torch.tensor([5, 1, 6, 1, 3])
        batch["segments"] = torch.repeat_interleave(torch.arange(5), sizes).expand(2, int(sizes.sum())).contiguous()
    return batch


def _objective(model, batch) -> torch.Tensor:
    """Per-token loss, times the prediction mask for the MLM baselines (the dense head's other positions
    carry a loss the training loop masks out; sparse prediction computes zeros there)."""
    loss = model(**batch)
    return loss * batch["prediction_mask"] if "prediction_mask" in batch else loss


def _head_modes(model):
    """(mode, set-up) pairs a layout runs: CrossBERT once; MLM baselines dense, then sparse."""
    if not _ACTIVE[0].is_mlm:
        return [("", None)]
    return [("dense", False), ("sparse", True)]


def _layout(cfg_overrides):
    from megatron_crossbert.platform import distributed as platform
    from megatron_crossbert.architectures.build import build_model

    cfg = tiny_config(*_ACTIVE[0].overrides, *cfg_overrides)
    platform.initialize(cfg.parallel, 7)
    from megatron.core import parallel_state as ps

    model = build_model(cfg, pre_process=ps.is_pipeline_first_stage(), post_process=ps.is_pipeline_last_stage())
    return cfg, model


def _reference(batch, ckpt_dir: str):
    """TP=1/PP=1 weights, per-token loss and gradients of loss.sum() (identical on both ranks).

    The weights are also saved with dist_checkpointing, so each layout can check that resharding
    on load reproduces exactly the slices used for the equivalence checks.
    """
    from megatron.core import dist_checkpointing

    _, model = _layout(list(_ACTIVE[0].reference_overrides))
    dist_checkpointing.save(model.sharded_state_dict(), ckpt_dir)
    model.sparse_prediction = False   # the reference is the dense head (MLM baselines)
    loss = _objective(model, batch)
    loss.sum().backward()
    weights = {k: v.detach().clone() for k, v in model.state_dict().items() if torch.is_tensor(v)}
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    ids = batch[_ACTIVE[0].ids_key]
    with torch.no_grad():
        encoded = model.encode(ids, _padding_mask(ids))
        encoded_11 = model.encode(ids[:, :11])
    return {"weights": weights, "loss": loss.detach(), "grads": grads, "encoded": encoded,
            "encoded_11": encoded_11}


def _padding_mask(tokens: torch.Tensor) -> torch.Tensor:
    mask = torch.ones_like(tokens)
    mask[1, 10:] = 0
    return mask


def _tp_shard(full: torch.Tensor, param: torch.Tensor, tp_rank: int, gated: bool = False) -> torch.Tensor:
    """This rank's slice; a GeGLU fc1 ``[gate; up]`` is sharded per half (rank r: ``[gate_r; up_r]``)."""
    if not getattr(param, "tensor_model_parallel", False):
        return full
    if gated:
        return torch.cat([half.chunk(2, dim=0)[tp_rank] for half in full.chunk(2, dim=0)])
    return full.chunk(2, dim=param.partition_dim)[tp_rank]


def _is_gated_fc1(model, name: str) -> bool:
    return name.endswith("mlp.linear_fc1.weight") and model.config.gated_linear_unit


def _assert_checkpoint_loads_same_weights(model, ckpt_dir: str) -> None:
    from megatron.core import dist_checkpointing

    expected = {n: p.detach().clone() for n, p in model.named_parameters()}
    with torch.no_grad():
        for param in model.parameters():
            param.zero_()
    model.load_state_dict(dist_checkpointing.load(model.sharded_state_dict(), ckpt_dir))
    for name, param in model.named_parameters():
        assert torch.equal(param, expected[name]), f"resharded checkpoint differs at {name}"


def _check_tensor_parallel(batch, ref: dict, sequence_parallel: bool, ckpt_dir: str | None = None) -> dict:
    from megatron.core import parallel_state as ps

    extra = ["parallel.tensor_model_parallel_size=2", f"parallel.sequence_parallel={sequence_parallel}"]
    _, model = _layout(extra)
    tp_rank = ps.get_tensor_model_parallel_rank()
    with torch.no_grad():
        for name, param in model.named_parameters():
            param.copy_(_tp_shard(ref["weights"][name], param, tp_rank, _is_gated_fc1(model, name)))
    if ckpt_dir:
        _assert_checkpoint_loads_same_weights(model, ckpt_dir)
    runs = {mode: _tp_step(model, batch, ref, tp_rank, sparse) for mode, sparse in _head_modes(model)}
    ids = batch[_ACTIVE[0].ids_key]
    with torch.no_grad():
        encoded = model.encode(ids, _padding_mask(ids))
        odd_length = model.encode(ids[:, :11])               # SP pads 11 -> 12 internally
    torch.testing.assert_close(encoded, ref["encoded"], **TOL)
    torch.testing.assert_close(odd_length, ref["encoded_11"], **TOL)
    return _mode_results("tp2_sp" if sequence_parallel else "tp2", runs)


def _tp_step(model, batch, ref: dict, tp_rank: int, sparse: bool | None) -> tuple:
    """(loss, grads, worst difference to the TP=1 reference) of one forward/backward at TP=2."""
    from megatron.core import parallel_state as ps

    if sparse is not None:
        model.sparse_prediction = sparse
    model.zero_grad(set_to_none=True)
    loss = _objective(model, batch)
    loss.sum().backward()
    torch.testing.assert_close(loss, ref["loss"], **TOL)
    worst, grads = (loss - ref["loss"]).abs().max().item(), {}
    for name, param in model.named_parameters():
        grad = grads[name] = param.grad.clone()
        if getattr(param, "sequence_parallel", False):          # what finalize_model_grads does under SP
            torch.distributed.all_reduce(grad, group=ps.get_tensor_model_parallel_group())
        expected = _tp_shard(ref["grads"][name], param, tp_rank, _is_gated_fc1(model, name))
        torch.testing.assert_close(grad, expected, **TOL, msg=lambda m: f"{name}: {m}")
        worst = max(worst, (grad - expected).abs().max().item())
    return loss.detach(), grads, worst


def _mode_results(layout: str, runs: dict) -> dict[str, float]:
    """{layout[ mode]: worst vs reference} plus, for the MLM baselines, 'layout sparse-dense': the worst
    difference between sparse and dense prediction on the same layout (asserted <= 1e-6 here)."""
    results = {f"{layout} {mode}".rstrip(): run[-1] for mode, run in runs.items()}
    if "sparse" in runs:
        (sparse_loss, sparse_grads, _), (dense_loss, dense_grads, _) = runs["sparse"], runs["dense"]
        worst = 0.0
        for name, a, b in [("loss", sparse_loss, dense_loss)] + [(k, sparse_grads[k], dense_grads[k])
                                                                  for k in sparse_grads]:
            if a is None:   # a pipeline stage without the loss
                continue
            torch.testing.assert_close(a, b, **EXACT, msg=lambda m: f"sparse vs dense, {name}: {m}")
            worst = max(worst, (a - b).abs().max().item())
        results[f"{layout} sparse-dense"] = worst
    return results


def _loss_func(mask, per_token_loss):
    """The contract's calculate_per_token_loss convention: (sum, count, {'lm loss': [sum, count]})."""
    mask = torch.ones_like(per_token_loss) if mask is None else mask
    loss_sum = (per_token_loss * mask).sum()
    count = mask.sum().to(torch.int)
    return loss_sum, count, {"lm loss": torch.stack([loss_sum.detach(), count.float()])}


def _forward_step(data_iterator, model):
    micro = next(data_iterator)
    return model(**micro), partial(_loss_func, micro.get("prediction_mask"))


def _global_name(name: str, pp_rank: int, layers_per_stage: int) -> str:
    """Stage-local module name -> the PP=1 name (encoder layers are renumbered per stage)."""
    if name == "output_layer.weight":
        return "embedding.word_embeddings.weight"
    if name.startswith("encoder.layers."):
        index, rest = name[len("encoder.layers."):].split(".", 1)
        return f"encoder.layers.{int(index) + pp_rank * layers_per_stage}.{rest}"
    return name


def _check_pipeline_parallel(batch, ref: dict, ckpt_dir: str) -> dict[str, float]:
    from megatron.core import parallel_state as ps

    cfg, model = _layout(["parallel.pipeline_model_parallel_size=2"])
    names = {n: _global_name(n, ps.get_pipeline_model_parallel_rank(), 1) for n, _ in model.named_parameters()}
    with torch.no_grad():
        for name, param in model.named_parameters():
            param.copy_(ref["weights"][names[name]])
    _assert_checkpoint_loads_same_weights(model, ckpt_dir)
    runs = {mode: _pp_step(cfg, model, batch, ref, names, sparse) for mode, sparse in _head_modes(model)}
    return _mode_results("pp2", runs)


def _pp_step(cfg, model, batch, ref: dict, names: dict, sparse: bool | None) -> tuple:
    """(reported [loss sum, count] on the last stage else None, grads, worst vs reference) of one 1F1B pass."""
    from megatron.core import parallel_state as ps
    from megatron.core.pipeline_parallel import get_forward_backward_func

    if sparse is not None:
        model.sparse_prediction = sparse
    model.zero_grad(set_to_none=True)
    seq, rows = cfg.pipeline_shape()
    micro = [{k: v[i:i + 1] for k, v in batch.items()} for i in range(2)]
    reports = get_forward_backward_func()(
        forward_step_func=_forward_step, data_iterator=iter(micro), model=[model], num_microbatches=2,
        seq_length=seq, micro_batch_size=rows // cfg.training.micro_batch_size, forward_only=False)
    total = None
    if ps.is_pipeline_last_stage():
        total = torch.stack([r["lm loss"] for r in reports]).sum(0)
        torch.testing.assert_close(total[0], ref["loss"].sum(), **TOL)
        assert int(total[1]) == int(batch.get("prediction_mask", ref["loss"]).bool().sum())
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    return total, grads, _compare_pipeline_grads(model, names, ref["grads"])


def _compare_pipeline_grads(model, names, ref_grads) -> float:
    """Stage grads equal the PP=1 grads; the tied embedding's two halves sum to the PP=1 grad."""
    worst, tied = 0.0, None
    for name, param in model.named_parameters():
        if names[name] == "embedding.word_embeddings.weight":
            tied = param.grad.clone()
            continue
        torch.testing.assert_close(param.grad, ref_grads[names[name]], **TOL, msg=lambda m: f"{name}: {m}")
        worst = max(worst, (param.grad - ref_grads[names[name]]).abs().max().item())
    torch.distributed.all_reduce(tied)                           # stage 0 embedding + stage 1 output layer
    torch.testing.assert_close(tied, ref_grads["embedding.word_embeddings.weight"], **TOL)
    return worst


def _check_variant(name: str, ckpt_dir: str) -> dict[str, float]:
    _ACTIVE[0] = VARIANTS[name]
    batch = _make_batch(tiny_config(*VARIANTS[name].overrides), VARIANTS[name])
    ref = _reference(batch, ckpt_dir)
    results = _check_tensor_parallel(batch, ref, sequence_parallel=False, ckpt_dir=ckpt_dir)
    if VARIANTS[name].sequence_parallel:
        results.update(_check_tensor_parallel(batch, ref, sequence_parallel=True))
    results.update(_check_pipeline_parallel(batch, ref, ckpt_dir))
    return {f"{name}/{key}": value for key, value in results.items()}


def _worker(rank: int, world_size: int, ckpt_root: str) -> dict:
    from pathlib import Path

    results = {}
    for name in VARIANTS:
        ckpt_dir = Path(ckpt_root) / name
        ckpt_dir.mkdir(exist_ok=True)
        results.update(_check_variant(name, str(ckpt_dir)))
    return results


def test_tensor_and_pipeline_parallel_match_single_rank(tmp_path):
    from tests.support.multirank import run_ranks

    results = run_ranks(_worker, 2, str(tmp_path))
    layouts = {name: 3 if variant.sequence_parallel else 2 for name, variant in VARIANTS.items()}
    expected = sum(count * (3 if VARIANTS[name].is_mlm else 1) for name, count in layouts.items())
    for result in results:
        assert len(result) == expected and max(result.values()) < 1e-5, results
        assert max(v for k, v in result.items() if k.endswith("sparse-dense")) <= 1e-6, results
    print(results)
