"""The training schedules (megatron_crossbert/schedules.py) against megatron's own semantics.

Pure functions and megatron-core's calculator/scheduler objects only (no process group): Megatron-LM's
batch ramp translated to a step schedule equals the removed calculator's formula; the dataset size equals
stepping megatron's calculator; WSD through megatron's OptimizerParamScheduler; the masking-rate schedule;
and the config's one-line refusals. The bit-exact resume through all three schedules is
tests/training/test_train.py::test_resume_is_bit_identical.
"""

from __future__ import annotations

import pytest

from megatron_crossbert import schedules
from megatron_crossbert.config import MaskingConfig, TrainingConfig, load_run_config


def _run_config(**training):
    return load_run_config(None, ["data.seq_length=512"] + [f"training.{k}={v}" for k, v in training.items()])


def old_megatron_rampup(consumed: int, start: int, incr: int, samples: int, global_batch: int) -> int:
    """Oracle: the batch megatron-core's removed RampupBatchsizeNumMicroBatchesCalculator.update gave."""
    if consumed > samples:
        return global_batch
    per = samples / ((global_batch - start) // incr)
    return start + int(consumed / per) * incr


@pytest.mark.parametrize("start,incr,samples,global_batch", [(16, 8, 300000, 1024), (2, 2, 40, 6),
                                                             (32, 32, 1000, 256), (96, 96, 48_828_125, 4608)])
def test_rampup_translation_matches_megatron_lm(start, incr, samples, global_batch):
    from megatron_crossbert.training.batch_schedule import BatchSchedule

    cfg = _run_config(micro_batch_size=1, global_batch_size=global_batch,
                      rampup_batch_size=f"[{start},{incr},{samples}]")
    calc = BatchSchedule(cfg, dp_size=1)
    stride = max(1, samples // 3000)
    for consumed in list(range(0, samples + 3 * global_batch, stride)) + [samples, samples + 1]:
        assert calc.at(consumed)[0] == old_megatron_rampup(consumed, start, incr, samples, global_batch), consumed


def test_step_schedule_parses_as_megatron_parses_it_and_sizes_the_dataset():
    from megatron.core.num_microbatches_calculator import StepBatchsizeNumMicroBatchesCalculator

    from megatron_crossbert.training.batch_schedule import BatchSchedule

    text = "0:64 1.5M:128 , 600K:96 20M:256"        # unsorted, comma, suffixes: megatron's syntax
    assert schedules.sample_points(text, 512) == StepBatchsizeNumMicroBatchesCalculator._parse_schedule(text, 512)
    cfg = _run_config(micro_batch_size=16, global_batch_size=256, step_batch_size_schedule=f"'{text}'")
    calc, consumed = BatchSchedule(cfg, dp_size=2), 0
    for steps in range(1, 300):
        batch, micro = calc.at(consumed)
        assert micro == batch // 32
        consumed += batch
        assert calc.total_samples(steps) == consumed


def test_mask_rate_schedule_is_a_pure_function_of_the_sample_index():
    mmbert = MaskingConfig(bert_mask_prob_schedule="0:0.3 2.3T:0.15 2.9T:0.05")
    first_15 = 2_300_000_000_000 // 1024
    assert mmbert.bert_mask_prob_at(0, 1024) == 0.3 and mmbert.bert_mask_prob_at(first_15 - 1, 1024) == 0.3
    assert mmbert.bert_mask_prob_at(first_15 + 1, 1024) == 0.15 and mmbert.bert_mask_prob_at(10**10, 1024) == 0.05
    assert mmbert.at_fixed_rate().bert_mask_prob_at(10**10, 1024) == 0.15   # validation: bert_mask_prob
    linear = MaskingConfig(bert_mask_prob_schedule="0:0.3 1M:0.15", bert_mask_prob_schedule_style="linear")
    assert linear.bert_mask_prob_at(5000, 100) == pytest.approx(0.225) and linear.bert_mask_prob_at(10**6, 100) == 0.15
    for bad in ("1:0.3", "0:0.3 0:0.2", "0:1.5", "0:0.3 x:0.1", "0.3"):
        with pytest.raises(ValueError):
            MaskingConfig(bert_mask_prob_schedule=bad)


@pytest.mark.parametrize("style", ["exponential", "linear", "cosine", "minus_sqrt"])
def test_wsd_through_megatrons_scheduler(style):
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler

    class Opt:
        param_groups = [{"lr": 0.0}]

    train = TrainingConfig(train_iters=100, lr_warmup_iters=10, lr=1.0, min_lr=0.01, lr_decay_style="wsd",
                           lr_wsd_decay_fraction=0.2, lr_wsd_decay_style=style)
    sched = OptimizerParamScheduler(Opt(), init_lr=0.0, max_lr=1.0, min_lr=0.01, lr_warmup_steps=10, start_wd=0.0,
                                    end_wd=0.0, wd_incr_steps=100, wd_incr_style="constant",
                                    **train.scheduler_decay_kwargs())
    lrs = []
    for _ in range(101):
        lrs.append(Opt.param_groups[0]["lr"])
        sched.step(1)
    assert lrs[5] == pytest.approx(0.5) and lrs[10] == 1.0 and lrs[80] == 1.0      # warmup, stable
    assert lrs[81] < 1.0 and lrs[100] == pytest.approx(0.01)                        # decay over the last 20%
    assert all(b <= a for a, b in zip(lrs[80:], lrs[81:]))
    assert "wsd_decay_steps" not in sched.state_dict()   # why checkpoint.verify guards the WSD fields


@pytest.mark.parametrize("fields, message", [
    (dict(lr_decay_style="WSD"), "exactly one of lr_wsd_decay_iters, lr_wsd_decay_fraction"),
    (dict(lr_decay_style="WSD", lr_wsd_decay_iters=5, lr_wsd_decay_fraction=0.1), "exactly one"),
    (dict(lr_decay_style="WSD", lr_wsd_decay_iters=95), "must fit between the warmup"),
    (dict(lr_decay_style="WSD", lr_wsd_decay_fraction=0.0), "lr_wsd_decay_fraction must be in"),
    (dict(lr_decay_style="WSD", lr_wsd_decay_fraction=0.1, lr_wsd_decay_style="sqrt"), "lr_wsd_decay_style='sqrt' must be one of"),
    (dict(lr_wsd_decay_iters=10), "lr_wsd_decay_iters=10 applies only with training.lr_decay_style='WSD'"),
    (dict(lr_decay_style="step"), "lr_decay_style='step' must be one of"),
])
def test_bad_lr_schedules_are_refused(fields, message):
    with pytest.raises(ValueError, match=message):
        TrainingConfig(train_iters=100, lr_warmup_iters=10, **fields)


@pytest.mark.parametrize("fields, message", [
    (dict(step_batch_size_schedule="'0:64 1M:128'"), "must end at global_batch_size=256"),
    (dict(step_batch_size_schedule="'0:100 1M:256'"), r"multiple of micro_batch_size=8, got \[100\]"),
    (dict(step_batch_size_schedule="'1M:256'"), "entry at threshold 0"),
    (dict(step_batch_size_schedule="'0:64 100:256'"), "fall on the same sample"),
    (dict(step_batch_size_schedule="'0:64 1M'"), "must look like THRESHOLD:VALUE"),
    (dict(step_batch_size_schedule="'0:256'", rampup_batch_size="[64,64,1000]"), "not both"),
    (dict(rampup_batch_size="[64,40,1000]"), "must be a multiple of the increment"),
    (dict(rampup_batch_size="[64,64]"), r"\[start, increment, ramp samples\]"),
])
def test_bad_batch_schedules_are_refused(fields, message):
    with pytest.raises(ValueError, match=message):
        _run_config(micro_batch_size=8, global_batch_size=256, **fields)
