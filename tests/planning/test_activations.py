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
    from megatron_crossbert.platform import distributed as platform
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
    from megatron_crossbert.platform import distributed as platform
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


TINY = "examples/tiny_cpu.yaml"
WIDE = ("model.hidden_size=256", "model.num_attention_heads=4", "model.num_layers=4", "data.seq_length=128",
        "model.max_position_embeddings=128")
NO_DROPOUT = ("model.hidden_dropout=0.0", "model.attention_dropout=0.0")


@pytest.mark.slow
@pytest.mark.parametrize("overrides", [(), NO_DROPOUT, WIDE, WIDE + NO_DROPOUT],
                         ids=["h64 dropout", "h64 no dropout", "h256 dropout", "h256 no dropout"])
def test_cpu_plan_of_the_tiny_config_is_what_autograd_saves_here(capsys, overrides):
    """``crossbert-plan --config examples/tiny_cpu.yaml --gpu cpu --json``: one micro-batch's bytes against the
    same run measured on this CPU, with the example's dropout (0.1 on residuals and attention) and without."""
    import json

    from megatron_crossbert.platform import distributed as platform
    from megatron_crossbert.cli.plan import main
    from megatron_crossbert.config import load_run_config
    from megatron_crossbert.planning.check import measure_case

    sets = [arg for value in overrides for arg in ("--set", value)]
    assert main(["--config", TINY, "--gpu", "cpu", "--json", *sets]) == 0
    planned = json.loads(capsys.readouterr().out)["activations"]["micro_batch"]["per_stage_bytes"][0]
    run_cfg = load_run_config(TINY, list(overrides))
    platform.initialize(run_cfg.parallel, 1)
    measured = measure_case(run_cfg).saved_bytes
    assert abs(planned / measured - 1) <= TOLERANCE, (planned, measured)


def test_attention_dropout_costs_the_cpu_its_probabilities_and_a_gpu_nothing():
    """SDPA's math kernel on the CPU keeps three fp32 [b, heads, q, k] tensors per attention; CUDA's fused
    kernels replay dropout from a seed. Residual dropout masks are floats on the CPU, bools on CUDA."""
    off, on = config("model.attention_dropout=0.0"), config("model.attention_dropout=0.1")
    gpu = [micro_batch_activations(c, runtime(c, cuda=True)).encoder_layer_bytes for c in (off, on)]
    cpu = [micro_batch_activations(c, runtime(c, cuda=False)).encoder_layer_bytes for c in (off, on)]
    assert gpu[0] == gpu[1]
    seq, rows = 64, 2 * 2  # each view's visible half of L=128, micro-batch 2 x 2 views
    assert cpu[1] - cpu[0] >= 3 * rows * 4 * seq * seq * 4  # probabilities, mask, dropped: heads 4, fp32
    hidden = config("model.hidden_dropout=0.1")
    masks = [micro_batch_activations(hidden, runtime(hidden, cuda=cuda)).encoder_layer_bytes
             - micro_batch_activations(off, runtime(off, cuda=cuda)).encoder_layer_bytes for cuda in (True, False)]
    assert masks[1] == 4 * masks[0]  # fp32 here: a float mask is 4 bytes per element, a bool 1
