"""Compiled flex attention: every shape a run or a benchmark plan makes fits Dynamo's recompile limit, a limit hit
in a compiled flex call raises instead of falling back to the slow eager path (and nowhere else in the process),
and evaluation (eval mode) compiles nothing."""

from __future__ import annotations

import pytest
import torch

from megatron_crossbert.benchmarking.gpu_check import GPU_CHECK_ROWS
from megatron_crossbert.benchmarking.throughput import ThroughputOptions, select_cases
from megatron_crossbert.models import core_attention, flex_compile
from megatron_crossbert.models.core_attention import AttentionOptions, CoreAttention
from tests.models.test_core_attention import _config, _masks, _qkv


def _plan_cases(sizes):
    return [case for size in sizes
            for case in select_cases(ThroughputOptions(size=size, precision="bf16", only=list(GPU_CHECK_ROWS)))]


@pytest.fixture
def fresh_dynamo(monkeypatch):
    """A process with no shapes registered yet and torch's default limit; restored afterwards."""
    monkeypatch.setattr(flex_compile, "_REGISTERED", set())
    flex_compile._watch_recompiles.cache_clear()
    with torch._dynamo.config.patch(recompile_limit=flex_compile.DYNAMO_DEFAULT_RECOMPILE_LIMIT,
                                    fail_on_recompile_limit_hit=False):
        yield
    flex_compile._watch_recompiles.cache_clear()
    torch._logging.set_logs()


def test_the_gpu_check_plan_shapes_are_counted_per_size_and_their_union_exceeds_the_default():
    base = flex_compile.union_flex_shapes(case.run_cfg for case in _plan_cases(["base"]))
    both = flex_compile.union_flex_shapes(case.run_cfg for case in _plan_cases(["base", "large"]))
    # bert/mlm (L), crossbert r=0.5 (Lv = T), r=0.75 (Lv, T, cross), the h/2 decoder (heads differ): 7 per size
    assert len(base) == 7 and len(both) == 14 > flex_compile.DYNAMO_DEFAULT_RECOMPILE_LIMIT
    assert flex_compile.recompile_limit(len(both)) == 14 and flex_compile.recompile_limit(3) == 8


def test_registering_a_plan_raises_the_limit_to_its_union_and_leaves_other_compiles_alone(fresh_dynamo):
    for case in _plan_cases(["base", "large"]):  # one process builds every case's model, as gpu-check does
        flex_compile.register_flex_shapes(flex_compile.flex_shapes(case.run_cfg))
    assert torch._dynamo.config.recompile_limit == 14
    assert not torch._dynamo.config.fail_on_recompile_limit_hit  # process-global: torch's own default
    with flex_compile.strict_recompiles():
        assert torch._dynamo.config.fail_on_recompile_limit_hit


def test_a_registered_limit_lets_every_shape_compile_and_a_hit_raises(fresh_dynamo):
    calls = []

    def fn(x):
        calls.append(x.shape)
        return x * 2

    shapes = {(n, 1, 1, 1, 1) for n in range(1, 11)}
    flex_compile.register_flex_shapes(shapes)
    compiled = torch.compile(fn, backend="eager", dynamic=False)
    for n in range(1, 11):  # 10 shapes: over torch's default of 8, inside the registered limit
        assert torch.equal(compiled(torch.ones(n)), torch.full((n,), 2.0))
    assert len(calls) == 10  # each shape traced once
    torch._dynamo.config.recompile_limit = 2
    other = torch.compile(lambda x: x + 1, backend="eager", dynamic=False)
    for n in (1, 2, 3):  # another compile in the process past the limit: torch's own fallback, no error
        assert torch.equal(other(torch.ones(n)), torch.full((n,), 2.0))
    flex_like = torch.compile(lambda x: x + 1, backend="eager", dynamic=False)
    with flex_compile.strict_recompiles():
        flex_like(torch.ones(1)), flex_like(torch.ones(2))
        with pytest.raises(Exception, match="(?i)recompile"):
            flex_like(torch.ones(3))


def test_compiled_flex_in_eval_mode_runs_sdpa_over_the_same_masks(monkeypatch):
    from megatron.core.transformer.enums import AttnMaskType

    def no_compile():
        raise AssertionError("evaluation must not compile a flex kernel")

    monkeypatch.setattr(core_attention, "_compiled_flex", no_compile)
    monkeypatch.setattr(core_attention, "_compiled_block_mask_builder", no_compile)
    mask, sq, sk, cross = _masks()["self"]
    q, k, v = _qkv(sq, sk, 3, seed=1)
    outs = {}
    for backend in ("flex", "sdpa"):
        options = AttentionOptions(backend=backend, half_windows=(0, 3), compile_flex=True)
        module = CoreAttention(_config(), 2, AttnMaskType.padding, "self", options=options).eval()
        with torch.no_grad():
            outs[backend] = module(q, k, v, mask)
    assert torch.equal(outs["flex"], outs["sdpa"])


def test_one_compiled_block_mask_builder_per_process():
    assert core_attention._compiled_block_mask_builder() is core_attention._compiled_block_mask_builder()


def test_a_run_that_resolves_to_flex_registers_its_shapes_when_its_attention_is_planned(fresh_dynamo, monkeypatch):
    import importlib

    from tests.support.models import tiny_config

    plan_module = importlib.import_module("megatron_crossbert.models.attention_setup")  # the package shadows it
    monkeypatch.setattr(plan_module.torch.cuda, "is_available", lambda: True)  # flex is chosen on a GPU only
    run = tiny_config("data.document_mask=true")
    plan = plan_module.attention_setup(run, training=True)
    assert plan.encoder.backend == "flex" and flex_compile._REGISTERED == flex_compile.flex_shapes(run)
    assert torch._dynamo.config.recompile_limit >= len(flex_compile._REGISTERED)


def test_every_compiled_flex_call_runs_under_the_strict_limit(monkeypatch):
    """The kernel and the block mask: each compiled call sees fail_on_recompile_limit_hit, the caller does not."""
    seen = []

    def compiled(*args, **kwargs):
        seen.append(torch._dynamo.config.fail_on_recompile_limit_hit)

    monkeypatch.setattr(core_attention, "_compiled_flex", lambda: compiled)
    monkeypatch.setattr(core_attention, "_compiled_block_mask_builder", lambda: compiled)
    core_attention._block_mask(lambda b, h, q, kv: q >= kv, 1, 8, 8, torch.device("cpu"), compile_=True)
    core_attention._flex_call(True, torch.zeros(1), block_mask=None)
    assert seen == [True, True] and not torch._dynamo.config.fail_on_recompile_limit_hit
