"""The planner's activation and parameter counts against the model: saved_tensors_hooks bytes on one CPU
process and on two gloo ranks (TP=2, sequence parallel), and the distributed optimizer's real buffers."""

from __future__ import annotations

import pytest

from megatron_crossbert.planning.activations import micro_batch_activations
from megatron_crossbert.planning.check import CASES, DISTRIBUTED_OPTIMIZER, TP2_CASES, config, predicted_bytes
from megatron_crossbert.planning.device import runtime
from megatron_crossbert.planning.parameters import stage_params, state_bytes
from tests.support.multirank import run_ranks

TOLERANCE = 0.10
"""The planner must be within 10% of the saved bytes (it is within 2% on every case here)."""


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_activations_and_parameters_match_one_process(name):
    from megatron_crossbert import platform
    from megatron_crossbert.planning.check import measure_case

    run_cfg = config(*CASES[name])
    platform.initialize(run_cfg.parallel, 1)
    measured = measure_case(run_cfg)
    assert measured.parameters == stage_params(run_cfg, 0)
    assert abs(predicted_bytes(run_cfg) / measured.saved_bytes - 1) <= TOLERANCE, (predicted_bytes(run_cfg), measured)


def test_recompute_keeps_a_layer_input_and_views_double_the_encoder():
    base = config()
    single = config("masking.complementary=false")
    recompute = config("parallel.recompute_activations=true")
    rt = runtime(base, cuda=True)
    full, one = micro_batch_activations(base, rt), micro_batch_activations(single, rt)
    assert full.encoder_layer_bytes == 2 * one.encoder_layer_bytes
    assert full.logits_bytes == 2 * one.logits_bytes
    kept = micro_batch_activations(recompute, runtime(recompute, cuda=True))
    assert kept.encoder_layer_bytes == 2 * 128 // 2 * 2 * 64 * 4  # input [Lv, b*views, h] in fp32
    assert kept.recompute_peak_bytes >= full.encoder_layer_bytes


def _tp_worker(rank: int, world_size: int) -> dict:
    from megatron_crossbert import platform
    from megatron_crossbert.planning.check import measure_case

    results = {}
    for name, overrides in TP2_CASES.items():
        run_cfg = config(*overrides)
        platform.initialize(run_cfg.parallel, 1)
        measured = measure_case(run_cfg)
        results[name] = (measured.saved_bytes, measured.parameters)
    run_cfg = config(*DISTRIBUTED_OPTIMIZER)
    platform.initialize(run_cfg.parallel, 1)
    results["distributed optimizer"] = _optimizer_buffers(run_cfg)
    return results


def _optimizer_buffers(run_cfg) -> dict:
    """Grad-buffer elements and Adam-state elements this rank really holds after one step."""
    import torch

    from megatron_crossbert.benchmarking.batches import make_batches
    from megatron_crossbert.benchmarking.cases import BenchCase
    from megatron_crossbert.benchmarking.step import build_runner

    case = BenchCase("plan", run_cfg)
    runner = build_runner(case, torch.device("cpu"))
    runner.step(make_batches(case, 1, torch.device("cpu"))[0])
    inner = [opt.optimizer for opt in getattr(runner.optimizer, "chained_optimizers", [runner.optimizer])]
    states = sum(t.numel() for opt in inner for state in opt.state.values() for key, t in state.items()
                 if key in ("exp_avg", "exp_avg_sq"))
    return {"grad_buffer": sum(buffer.grad_data.numel() for buffer in runner.model.buffers),
            "adam_elements": states}


@pytest.mark.slow
@pytest.mark.multirank
def test_tensor_parallel_and_distributed_optimizer_on_two_gloo_ranks():
    ranks = run_ranks(_tp_worker, 2)
    for name, overrides in TP2_CASES.items():
        run_cfg = config(*overrides)
        for saved, parameters in (rank[name] for rank in ranks):
            assert parameters == stage_params(run_cfg, 0), name
            assert abs(predicted_bytes(run_cfg) / saved - 1) <= TOLERANCE, (name, predicted_bytes(run_cfg), saved)
    run_cfg = config(*DISTRIBUTED_OPTIMIZER)
    for index, rank in enumerate(ranks):  # fp32: a 4-byte gradient per buffer element; Adam's m and v (4 + 4)
        states = state_bytes(run_cfg, 0, dp=2, rank=index)  # for the parameters in this rank's 1/DP of it
        assert 4 * rank["distributed optimizer"]["grad_buffer"] == states.gradients
        assert 4 * rank["distributed optimizer"]["adam_elements"] == states.optimizer
