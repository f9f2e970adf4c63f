"""Training loop: exact resume, non-finite handling, logging, sampler, CLI.

Runs in-process at world size 1 with the real model and data builders on a tiny corpus written by
megatron's IndexedDatasetBuilder. Tiny models (h=32, 2 layers, L=32): ~30-100 ms per step.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from test_train_support import tiny_config


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


@pytest.mark.parametrize("arch,encoder", [("crossbert", "classic"), ("bert", "classic"), ("mlm", "modern")])
def test_resume_is_bit_identical(arch, encoder, indexed_corpus, tmp_path):
    """20 steps straight == 10 steps, stop (with checkpoint), resume, 10 steps; dropout is on."""
    from megatron_crossbert.training import train

    straight = train(tiny_config(arch, indexed_corpus, tmp_path / "a", model__encoder=encoder))
    first = train(tiny_config(arch, indexed_corpus, tmp_path / "b", model__encoder=encoder), exit_at_iteration=10)
    second = train(tiny_config(arch, indexed_corpus, tmp_path / "b", model__encoder=encoder))
    assert first["iteration"] == 10 and second["start_iteration"] == 10
    assert second["resumed_from"].endswith("iter_0000010")
    assert straight["losses"] == first["losses"] + second["losses"]
    assert straight["consumed_samples"] == second["consumed_samples"] == 20 * 4
    final_a, final_b = _checkpoint_tensors(straight["checkpoint"]), _checkpoint_tensors(second["checkpoint"])
    assert final_a.keys() == final_b.keys()
    assert any("word_embeddings" in key for key in final_a) and any("exp_avg" in key for key in final_a)
    for key in final_a:
        assert torch.equal(final_a[key], final_b[key]), key


def test_nonfinite_steps_are_skipped_then_stop(indexed_corpus, tmp_path, monkeypatch):
    """A NaN loss (and hence NaN grads) skips the step without touching weights; a run of them stops."""
    from megatron_crossbert.training import NonFiniteLossError, steps, train

    real_loss = steps.loss_func
    calls = {"n": 0}

    def poisoned(loss_mask, per_token_loss):
        calls["n"] += 1  # global_batch 4 / micro 2 = 2 micro-batches per step: poison step 3 only
        if calls["n"] in (5, 6):
            per_token_loss = per_token_loss * float("nan")
        return real_loss(loss_mask, per_token_loss)

    monkeypatch.setattr(steps, "loss_func", poisoned)
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


def test_sampler_slices_and_resumes():
    from megatron_crossbert.training.sampler import PretrainingSampler, num_microbatches

    ranks = [list(PretrainingSampler(16, 4, 2, r, 2)) for r in range(2)]
    assert ranks[0][:2] == [[4, 5], [8, 9]] and ranks[1][:2] == [[6, 7], [10, 11]]
    everything = sorted(i for batches in ranks for batch in batches for i in batch)
    assert everything == list(range(4, 16))
    assert [list(b) for b in PretrainingSampler(16, 8, 4, 0, 1)] == [[8, 9, 10, 11], [12, 13, 14, 15]]
    assert num_microbatches(32, 2, 4) == 4
    with pytest.raises(ValueError, match="not divisible"):
        num_microbatches(30, 2, 4)


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
