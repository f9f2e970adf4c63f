"""``models.core_attention.CoreAttention``: every backend equals megatron's DotProductAttention (fp32, <= 1e-5),
forward and gradients.

SDPA and the megatron reference train here; FlexAttention runs forward-only on the CPU (torch 2.13), so
its forward is compared here and its gradients by the H200 device check.
"""

from __future__ import annotations

import pytest
import torch

from megatron_crossbert.models.attention_masks import cross_coords, padding_coords, token_coords
from megatron_crossbert.models.core_attention import _CACHE, AttentionOptions, CoreAttention, resolve_backend, uses_flex
from tests.support.models import random_view

TOL = 1e-5
HEADS, DIM = 4, 8


def _config(dropout: float = 0.0):
    from megatron.core.transformer.transformer_config import TransformerConfig

    from megatron_crossbert.platform import distributed as platform
    from megatron_crossbert.config import ParallelConfig

    platform.initialize(ParallelConfig(), 0)
    return TransformerConfig(num_layers=4, hidden_size=HEADS * DIM, num_attention_heads=HEADS,
                             attention_dropout=dropout, use_cpu_initialization=True)


def _attention(backend: str, cross: bool, layer: int = 2, half_windows=(0, 3, 0, 3)):
    from megatron.core.transformer.enums import AttnMaskType

    options = AttentionOptions(backend=backend, half_windows=half_windows)
    return CoreAttention(_config(), layer, AttnMaskType.padding, "cross" if cross else "self", options=options)


def _qkv(sq: int, sk: int, batch: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    make = lambda s: torch.randn(s, batch, HEADS, DIM, generator=gen).requires_grad_()
    return make(sq), make(sk), make(sk)


def _masks(batch: int = 3):
    """name -> (attention_mask, sq, sk, cross): none, documents+window (self), targets->visible, bool padding."""
    segments, visible, targets = random_view(batch, 40, 20, seed=7)
    enc = token_coords(torch.gather(segments, 1, visible), visible)
    dec = token_coords(torch.gather(segments, 1, targets), targets)
    pad = torch.ones(batch, 20, dtype=torch.int64)
    pad[0, 15:] = 0
    return {"none": (None, 20, 20, False), "self": (enc, 20, 20, False),
            "cross": (cross_coords(dec, enc), 20, 20, True),
            "padding": (padding_coords(pad), 20, 20, False), "bool": (~(pad.bool()[:, None, None, :]), 20, 20, False)}


def _run(backend: str, mask, sq: int, sk: int, cross: bool, grads: bool = True):
    has_coords = mask is not None and mask.dtype != torch.bool
    module = _attention(backend, cross, layer=2 if has_coords else 1)   # layer 2 is local: it needs positions
    q, k, v = _qkv(sq, sk, 3, seed=1)
    if not grads:
        with torch.no_grad():
            return module(q, k, v, mask), None
    out = module(q, k, v, mask)
    (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
    return out.detach(), [t.grad for t in (q, k, v)]


@pytest.mark.parametrize("name", ["none", "self", "cross", "padding", "bool"])
def test_sdpa_equals_megatron_forward_and_grads(name):
    mask, sq, sk, cross = _masks()[name]
    ref, ref_grads = _run("megatron", mask, sq, sk, cross)
    out, grads = _run("sdpa", mask, sq, sk, cross)
    assert (out - ref).abs().max() <= TOL
    for g, r in zip(grads, ref_grads):
        assert torch.isfinite(g).all() and (g - r).abs().max() <= TOL


@pytest.mark.parametrize("name", ["none", "self", "cross", "padding", "bool"])
def test_flex_forward_equals_megatron_on_cpu(name):
    mask, sq, sk, cross = _masks()[name]
    ref, _ = _run("megatron", mask, sq, sk, cross, grads=False)
    out, _ = _run("flex", mask, sq, sk, cross, grads=False)
    assert (out - ref).abs().max() <= TOL


def test_empty_cross_rows_are_zero_and_finite_on_every_backend():
    mask, sq, sk, _ = _masks(batch=3)["cross"]
    for backend in ("megatron", "sdpa"):
        out, grads = _run(backend, mask, sq, sk, cross=True)
        assert torch.isfinite(out).all() and all(torch.isfinite(g).all() for g in grads)
    module = _attention("sdpa", cross=True)
    q, k, v = _qkv(sq, sk, 3, seed=1)
    empty = module.masks(mask, sq, sk, 3).empty
    assert empty.any(), "the fixture must contain fragments with no visible token"
    assert module(q, k, v, mask).detach().transpose(0, 1)[empty].abs().max() == 0


def test_flex_refuses_training_on_cpu_in_one_line():
    mask, sq, sk, _ = _masks()["self"]
    q, k, v = _qkv(sq, sk, 3, seed=1)
    with pytest.raises(RuntimeError, match="forward-only on the CPU"):
        _attention("flex", cross=False)(q, k, v, mask)


def test_local_layer_without_layout_is_refused():
    q, k, v = _qkv(8, 8, 1, seed=0)
    with pytest.raises(ValueError, match="layer 2 is local"):
        _attention("sdpa", cross=False, layer=2)(q, k, v, None)


def test_layers_share_the_masks_of_one_coordinates_tensor():
    mask, sq, sk, _ = _masks()["self"]
    first = _CACHE.get(mask, ("dense", 3, sq, sk), lambda: object())
    assert _CACHE.get(mask, ("dense", 3, sq, sk), lambda: object()) is first


@pytest.mark.parametrize("requested,cuda,masked,dropout,expected", [
    ("auto", False, True, 0.0, "sdpa"), ("auto", True, True, 0.0, "flex"), ("auto", True, False, 0.0, "sdpa"),
    ("auto", True, True, 0.1, "sdpa"), ("megatron", False, True, 0.1, "megatron"), ("flex", True, True, 0.0, "flex")])
def test_backend_resolution(requested, cuda, masked, dropout, expected):
    backend, why = resolve_backend(requested, cuda=cuda, masked=masked, attention_dropout=dropout, training=True)
    assert backend == expected and why


@pytest.mark.parametrize("cuda,dropout,match", [(False, 0.0, "no backward pass on the CPU"),
                                                 (True, 0.1, "no attention dropout")])
def test_explicit_flex_is_refused_where_it_cannot_train(cuda, dropout, match):
    with pytest.raises(ValueError, match=match):
        resolve_backend("flex", cuda=cuda, masked=True, attention_dropout=dropout, training=True)


def test_flex_trained_checkpoint_evaluates_on_the_cpu_with_sdpa():
    backend, why = resolve_backend("flex", cuda=False, masked=True, attention_dropout=0.0, training=False)
    assert backend == "sdpa" and "evaluation" in why


@pytest.mark.parametrize("backend,training,in_eval,compiled,flex", [
    ("flex", True, False, True, True), ("flex", False, False, True, False), ("flex", False, True, True, True),
    ("flex", False, False, False, True), ("sdpa", True, False, True, False), ("megatron", True, True, False, False)])
def test_the_kernel_follows_the_modules_mode_never_grad_mode(backend, training, in_eval, compiled, flex):
    options = AttentionOptions(backend=backend, flex_in_eval=in_eval)
    for grad in (True, False):
        with torch.set_grad_enabled(grad):
            assert uses_flex(options, training, compiled) is flex


def _count_kernels(monkeypatch) -> list[tuple[str, bool]]:
    """(kernel, grad enabled) of every core-attention call; both run SDPA's arithmetic (flex has no CPU backward),
    and no block mask is compiled."""
    from megatron_crossbert.models import core_attention

    calls, real = [], CoreAttention._sdpa

    def counted(kernel: str):
        def run(self, query, key, value, mask):
            calls.append((kernel, torch.is_grad_enabled()))
            return real(self, query, key, value, None if kernel == "flex" else mask)
        return run

    monkeypatch.setattr(CoreAttention, "_flex", counted("flex"))
    monkeypatch.setattr(CoreAttention, "_sdpa", counted("sdpa"))
    monkeypatch.setattr(core_attention, "_block_mask", lambda *args, **kwargs: "block mask")
    return calls


@pytest.mark.parametrize("backend", ["flex", "sdpa"])
def test_activation_recompute_runs_the_configured_kernel_in_the_forward_and_the_recompute(monkeypatch, backend):
    """megatron's CheckpointFunction runs the forward under no_grad and recomputes under grad: both take the
    kernel the run configured (compiled flex, as on a GPU), so the step is as fast and its FLOPs as counted."""
    from dataclasses import replace

    from tests.models.test_document_masks import _cfg, loss_and_grads, sample_batch
    from tests.support.models import build

    calls = _count_kernels(monkeypatch)
    cfg = _cfg("crossbert-classic", "parallel.recompute_activations=true")
    model = build(cfg, training=True)
    layers = [module for module in model.modules() if isinstance(module, CoreAttention)]
    for module in layers:
        module.options = replace(module.options, backend=backend, compile_flex=True)
    loss_and_grads(model, sample_batch(cfg))
    assert {kernel for kernel, _ in calls} == {backend}
    assert calls.count((backend, False)) == calls.count((backend, True)) >= len(layers)  # forward, recompute
    calls.clear()
    with torch.no_grad():
        model.eval()(**sample_batch(cfg))
    assert calls == [("sdpa", False)] * len(calls) and calls  # evaluation compiles no flex kernel
