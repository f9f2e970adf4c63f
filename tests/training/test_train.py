"""Training loop: exact resume, non-finite handling, logging, sampler, CLI.

Runs in-process at world size 1 with the real model and data builders on a tiny corpus written by
megatron's IndexedDatasetBuilder. Tiny models (h=32, 2 layers, L=32): ~30-100 ms per step.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from tests.support.training import tiny_config


def _flatten(tree, prefix: str = "") -> dict[str, torch.Tensor]:
    if isinstance(tree, torch.Tensor):
        return {prefix: tree}
    if isinstance(tree, dict):
        return {k: v for key, sub in tree.items() for k, v in _flatten(sub, f"{prefix}/{key}").items()}
    return {}


def _checkpoint_tensors(ckpt_dir: str) -> dict[str, torch.Tensor]:
    """Every tensor of a checkpoint (model weights and optimizer moments), by flattened key."""
    from megatron.core import dist_checkpointing

    return _flatten(dist_checkpointing.load_plain_tensors(ckpt_dir))


SCHEDULES = dict(training__global_batch_size=6, training__rampup_batch_size=[2, 2, 40],
                 training__lr_decay_style="wsd", training__lr_wsd_decay_fraction=0.3,
                 training__lr_wsd_decay_style="minus_sqrt", masking__bert_mask_prob_schedule="0:0.3 960:0.15 1600:0.05")
"""Every schedule at once: a batch-size warmup 2 -> 4 -> 6 (Megatron-LM's rampup semantics: 10 steps of 2,
5 of 4, then 6), warmup-stable-decay with a 1-sqrt decay over the last 30% (steps 14-20), and for the MLM
baselines a masking rate 30% -> 15% -> 5% (at samples 30 and 50 with L=32)."""


@pytest.mark.slow
@pytest.mark.parametrize("arch,encoder", [("crossbert", "classic"), ("bert", "classic"), ("mlm", "modern")])
def test_resume_is_bit_identical(arch, encoder, indexed_corpus, tmp_path):
    """20 steps straight == 12 steps, stop (with checkpoint), resume, 8 steps; dropout is on. The stop
    falls mid-ramp, before the LR decay and before the masking rate changes, so the resumed run crosses
    every schedule."""
    from megatron_crossbert.training import train

    def config(run: str):
        return tiny_config(arch, indexed_corpus, tmp_path / run, model__encoder=encoder, **SCHEDULES)

    straight = train(config("a"))
    first = train(config("b"), exit_at_iteration=12)
    second = train(config("b"))
    assert first["iteration"] == 12 and second["start_iteration"] == 12
    assert second["resumed_from"].endswith("iter_0000012")
    assert straight["batch_sizes"] == [2] * 10 + [4] * 5 + [6] * 5 == first["batch_sizes"] + second["batch_sizes"]
    lrs = straight["lrs"]
    assert lrs[2:15] == [lrs[2]] * 13 and lrs[-1] < lrs[15] < lrs[2]              # warmup, stable, then decay
    assert straight["lrs"] == first["lrs"] + second["lrs"]
    assert straight["losses"] == first["losses"] + second["losses"]
    assert straight["consumed_samples"] == second["consumed_samples"] == 70
    final_a, final_b = _checkpoint_tensors(straight["checkpoint"]), _checkpoint_tensors(second["checkpoint"])
    assert final_a.keys() == final_b.keys()
    assert any("word_embeddings" in key for key in final_a) and any("exp_avg" in key for key in final_a)
    for key in final_a:
        assert torch.equal(final_a[key], final_b[key]), key


def test_nonfinite_steps_are_skipped_then_stop(indexed_corpus, tmp_path, monkeypatch):
    """A NaN loss (and hence NaN grads) skips the step without touching weights; a run of them stops."""
    from megatron_crossbert.architectures import crossbert
    from megatron_crossbert.training import NonFiniteLossError, steps, train

    real_loss = crossbert.loss_func
    calls = {"n": 0}

    def poisoned(loss_mask, per_token_loss):
        calls["n"] += 1  # global_batch 4 / micro 2 = 2 micro-batches per step: poison step 3 only
        if calls["n"] in (5, 6):
            per_token_loss = per_token_loss * float("nan")
        return real_loss(loss_mask, per_token_loss)

    monkeypatch.setattr(crossbert, "loss_func", poisoned)
    summary = train(tiny_config("crossbert", indexed_corpus, training__train_iters=5))
    assert summary["skipped_steps"] == 1 and summary["iteration"] == 5
    assert summary["grad_norms"][2] is None and summary["grad_norms"][3] is not None

    monkeypatch.setattr(steps, "grads_nonfinite", lambda model: True)
    with pytest.raises(NonFiniteLossError, match="3 consecutive steps had a non-finite"):
        train(tiny_config("crossbert", indexed_corpus, training__train_iters=6, training__max_nonfinite_steps=3))


def test_tensorboard_and_console_metrics(indexed_corpus, tmp_path, capsys):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from megatron_crossbert.training import train

    cfg = tiny_config("bert", indexed_corpus, training__train_iters=4, training__log_interval=2,
                      training__eval_interval=2, training__peak_tflops=1.0,
                      training__tensorboard_dir=str(tmp_path / "tb"))
    summary = train(cfg)
    out = capsys.readouterr().out
    assert "step 4/4" in out and "validation loss" in out
    for figure in ("samples/s", "tokens/s", "supervised tokens/s", "grad norm", "MFU", "mem rss"):
        assert figure in out, figure
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    for tag in ("train/loss", "train/lr", "train/grad_norm", "train/samples_per_s", "train/tokens_per_s",
                "train/supervised_tokens_per_s", "train/mfu", "valid/loss"):
        assert tag in tags, tag
    assert [e.step for e in events.Scalars("train/loss")] == [2, 4]
    assert set(summary["valid_losses"]) == {2, 4}


def test_sampler_slices_and_resumes(indexed_corpus):
    from megatron_crossbert.training.batch_schedule import BatchSchedule
    from megatron_crossbert.training.sampler import PretrainingSampler

    ranks = [list(PretrainingSampler(16, 4, 2, r, 2)) for r in range(2)]
    assert ranks[0][:2] == [[4, 5], [8, 9]] and ranks[1][:2] == [[6, 7], [10, 11]]
    everything = sorted(i for batches in ranks for batch in batches for i in batch)
    assert everything == list(range(4, 16))
    assert [list(b) for b in PretrainingSampler(16, 8, 4, 0, 1)] == [[8, 9, 10, 11], [12, 13, 14, 15]]
    assert BatchSchedule(tiny_config("bert", indexed_corpus, training__global_batch_size=32), 4).at(0) == (32, 4)
    with pytest.raises(ValueError, match="not divisible"):
        BatchSchedule(tiny_config("bert", indexed_corpus, training__global_batch_size=30), 4)
    ramp = BatchSchedule(tiny_config("bert", indexed_corpus, **SCHEDULES), 1)
    assert [ramp.at(c) for c in (0, 19, 20, 39, 40)] == [(2, 1), (2, 1), (4, 2), (4, 2), (6, 3)]
    assert ramp.total_samples(20) == 70 and ramp.total_samples(11) == 24
    with pytest.raises(ValueError, match="not divisible"):      # 2 is not a multiple of 2 x 2 DP ranks
        ramp.__class__(tiny_config("bert", indexed_corpus, **SCHEDULES), 2).at(0)


def test_cli_help_and_config_resolution(tmp_path):
    from megatron_crossbert.cli.pretrain import build_parser, resolve_config

    args = build_parser().parse_args(["--model", "bert", "--train-iters", "50", "--set", "training.lr=3e-4",
                                      "--set", "training.lr_warmup_iters=5", "--save", str(tmp_path),
                                      "--data-path", "0.3", "a", "0.7", "b"])
    cfg = resolve_config(args)
    assert cfg.model.arch == "bert" and cfg.training.train_iters == 50 and cfg.training.lr == 3e-4
    assert cfg.checkpoint.save_dir == str(tmp_path) and cfg.data.data_path == ["0.3", "a", "0.7", "b"]
    done = subprocess.run([sys.executable, "-m", "megatron_crossbert.cli.pretrain", "--help"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "--config" in done.stdout and "--set" in done.stdout
    bad = subprocess.run([sys.executable, "-m", "megatron_crossbert.cli.pretrain", "--set", "model.hidden_size=30",
                          "--print-config"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "num_attention_heads" in bad.stderr
