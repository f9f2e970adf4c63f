"""crossbert-plan end to end (no model is built): JSON keys, refusals, one-line errors, Megatron-LM beside ours."""

from __future__ import annotations

import json

import pytest

from megatron_crossbert.cli.plan import main
from megatron_crossbert.config import load_run_config
from megatron_crossbert.planning.megatron_formula import megatron_lm_estimate
from megatron_crossbert.planning.parameters import total_params

BASE = "examples/crossbert_base.yaml"


def plan_json(capsys, *argv: str) -> dict:
    assert main(["--config", BASE, "--json", *argv]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_names_the_parameters_and_the_activations_of_one_micro_batch(capsys):
    plan = plan_json(capsys, "--gpu", "h200", "--nodes", "8")
    assert plan["parameters"]["total"] == total_params(load_run_config(BASE, []))
    micro = plan["activations"]["micro_batch"]
    for key in ("embedding_bytes", "encoder_layer_bytes", "decoder_bytes", "lm_head_bytes", "logits_bytes"):
        assert micro[key] > 0, key
    stage = plan["memory"]["stages"][0]
    assert stage["peak_bytes"] == (stage["weights_bytes"] + stage["gradients_bytes"] + stage["optimizer_bytes"]
                                   + stage["activation_bytes"])
    assert stage["optimizer_bytes_with_distributed_optimizer"] < stage["optimizer_bytes_without_distributed_optimizer"]
    speeds = [row["tokens_per_second"] for row in plan["layouts"]]
    assert speeds == sorted(speeds, reverse=True) and all(row["fits"] for row in plan["layouts"])
    assert plan["time"]["days_to_token_budget"] == pytest.approx(1e12 / plan["time"]["tokens_per_second"] / 86400)
    assert plan["largest_micro_batch"]["recompute"] > plan["largest_micro_batch"]["no_recompute"] > 0


def test_every_refusal_says_why(capsys):
    plan = plan_json(capsys, "--nodes", "8", "--gpu-memory", "4", "--set", "model.num_layers=6")
    reasons = {row["reason"].split(":")[0] for row in plan["refused"]}
    assert "TP 8 does not divide the encoder's 12 attention heads" in reasons
    assert "PP 4 does not divide the 6 encoder layers" in reasons
    assert "does not fit" in reasons


def test_bad_cluster_is_one_line_exit_2(capsys):
    assert main(["--config", BASE, "--nodes", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "error: --nodes: must be > 0, got 0"


def test_megatron_lm_prices_full_length_full_vocabulary_logits():
    """At BERT's shape Megatron-LM's activations count every position's logits; ours only the predicted rows."""
    from megatron_crossbert.planning.activations import micro_batch_activations
    from megatron_crossbert.planning.device import runtime

    cfg = load_run_config(BASE, ["model.arch=bert", "model.decoder_num_layers=0"])
    ours = micro_batch_activations(cfg, runtime(cfg))
    theirs = megatron_lm_estimate(cfg, dp=1, num_microbatches=1)
    s, b, vocab = cfg.data.seq_length, cfg.training.micro_batch_size, cfg.model.padded_vocab_size()
    assert theirs.activation_bytes > s * b * 4 * vocab > ours.logits_bytes


def rows(tflops: float) -> list[dict]:
    """gpu-check result rows: a CrossBERT at ``tflops`` and a BERT (another architecture) at 900."""
    return [{"name": "crossbert r=0.5 compl", "arch": "crossbert", "encoder": "classic", "achieved_tflops": tflops},
            {"name": "bert", "arch": "bert", "encoder": "classic", "achieved_tflops": 900.0}]


def test_measured_mfu_comes_from_the_nearest_measured_shape(capsys, tmp_path):
    """A gpu-check JSON's bf16 rows of this architecture and family: achieved TFLOP/s over the GPU's peak."""
    payload = {"stages": {"gpu_check": {"result": {"runs": [
        {"size": "base", "precision": "bf16", "report": {"results": rows(400.0)}},
        {"size": "large", "precision": "bf16", "report": {"results": rows(500.0)}},
        {"size": "base", "precision": "fp8", "report": {"results": rows(700.0)}}]}}}}
    measured = tmp_path / "device_check.json"
    measured.write_text(json.dumps(payload))
    plan = plan_json(capsys, "--gpu", "h200", "--mfu-from", str(measured))
    assert plan["assumptions"]["mfu"] == pytest.approx(400.0 / 989.4)
    assert plan["assumptions"]["mfu_source"].startswith("measured: gpu-check base")
    assert main(["--config", BASE, "--mfu-from", str(measured), "--set", "model.encoder=modern"]) == 2
    assert "no bf16 gpu-check measurement of arch=crossbert encoder=modern" in capsys.readouterr().err


def test_shorthand_flags_set_the_run_as_in_pretraining(capsys):
    plan = plan_json(capsys, "--model", "bert", "--set", "model.decoder_num_layers=0", "--micro-batch-size", "8",
                     "--tensor-parallel", "2")
    assert plan["config"]["arch"] == "bert" and plan["layout"]["micro_batch_size"] == 8 and plan["layout"]["tp"] == 2
    assert plan["activations"]["micro_batch"]["decoder_bytes"] == 0


def test_a_configured_layout_that_cannot_run_is_one_line(capsys):
    assert main(["--config", BASE, "--set", "parallel.pipeline_model_parallel_size=3"]) == 2
    assert capsys.readouterr().err.strip() == ("error: the configured layout TP1 PP3 DP2 mbs 32 cannot run: "
                                               "TP x PP = 3 does not divide the 8 GPUs")


def gpu_check(tflops) -> dict:
    """A device check's JSON whose one bf16 base-size CrossBERT row achieved ``tflops``."""
    return {"stages": {"gpu_check": {"result": {"runs": [
        {"size": "base", "precision": "bf16", "report": {"results": rows(tflops)}}]}}}}


@pytest.mark.parametrize("text, says", [
    ("[1, 2]", "expected a JSON object (a device check's or gpu-check's report), got a list"),
    (json.dumps({"runs": "base"}), "runs='base' must be a JSON list"),
    (json.dumps({"stages": {"gpu_check": "done"}}), "stages.gpu_check='done' must be a JSON object"),
    (json.dumps({"runs": [{"size": "base", "precision": "bf16", "report": "fast"}]}),
     "runs[0].report='fast' must be a JSON object"),
    (json.dumps(gpu_check("400")), "runs[0].report.results[0].achieved_tflops='400' must be a number"),
    ("{'runs': []}", "not a JSON report"),
    ("", "not a JSON report"),
    (json.dumps(gpu_check(float("nan"))), "achieved_tflops=nan must be a finite number > 0"),
    (json.dumps(gpu_check(float("inf"))), "achieved_tflops=inf must be a finite number > 0"),
    (json.dumps(gpu_check(-100.0)), "achieved_tflops=-100.0 must be a finite number > 0"),
    (json.dumps(gpu_check(0)), "achieved_tflops=0 must be a finite number > 0"),
    (json.dumps(gpu_check(5000.0)), "achieved_tflops=5000.0 is above the h100's dense peak (--peak-tflops=989.4): "
                                    "MFU 5.05 > 1"),
], ids=["list", "string runs", "string stage", "string report", "string tflops", "python literal", "empty",
        "nan", "inf", "negative", "zero", "above the peak"])
def test_mfu_from_refuses_what_cannot_be_a_measurement_in_one_line(capsys, tmp_path, text, says):
    """As --mfu refuses 0 and 1.5: an MFU is in (0, 1], so each achieved TFLOP/s is finite, > 0 and at most the
    planned GPU's dense peak; a file that is not a JSON report is named with what is wrong."""
    measured = tmp_path / "device_check.json"
    measured.write_text(text)
    assert main(["--config", BASE, "--mfu-from", str(measured)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: --mfu-from {measured}: "), err
    assert says in err, err


def test_mfu_from_bounds_by_the_planned_peak(capsys, tmp_path):
    """400 TFLOP/s is an MFU of 0.40 of an H100, more than an A100's peak, and fine for a faster chip's."""
    measured = tmp_path / "device_check.json"
    measured.write_text(json.dumps(gpu_check(400.0)))
    assert main(["--config", BASE, "--mfu-from", str(measured), "--gpu", "a100"]) == 2
    assert "above the a100's dense peak (--peak-tflops=312)" in capsys.readouterr().err
    plan = plan_json(capsys, "--mfu-from", str(measured), "--gpu", "a100", "--peak-tflops", "2250")
    assert plan["assumptions"]["mfu"] == pytest.approx(400.0 / 2250)


def test_cpu_target_plans_with_the_cpus_byte_sizes(capsys):
    """``--gpu cpu``: this machine, one rank by default; the tiny config's dropout adds the CPU's math-kernel
    scores, so its activations exceed the same run planned for an H100."""
    def micro_batch(*argv):
        assert main(["--config", "examples/tiny_cpu.yaml", "--json", *argv]) == 0
        return json.loads(capsys.readouterr().out)

    cpu, gpu = micro_batch("--gpu", "cpu"), micro_batch("--gpu", "h100")
    assert cpu["cluster"]["gpu"] == "cpu" and cpu["cluster"]["gpus_per_node"] == 1 and not cpu["cluster"]["cuda"]
    assert cpu["activations"]["micro_batch"]["encoder_layer_bytes"] > gpu["activations"]["micro_batch"][
        "encoder_layer_bytes"]
    two = micro_batch("--gpu", "cpu", "--gpus-per-node", "2")
    assert two["cluster"]["gpu_memory_gib"] == pytest.approx(cpu["cluster"]["gpu_memory_gib"] / 2)
