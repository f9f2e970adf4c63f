"""The global batch and micro-batch count of every step, from megatron-core's own calculators.

A constant batch uses megatron's ``ConstantNumMicroBatchesCalculator``, a batch-size warmup its
``StepBatchsizeNumMicroBatchesCalculator`` over the run's step schedule (``TrainingConfig.batch_step_schedule``:
Megatron-LM's ``--step-batch-size-schedule``, or ``--rampup-batch-size`` translated). They are
instantiated per run rather than through megatron's process-global ``init_num_microbatches_calculator``:
the throughput benchmark and the tests build several runs in one process, and megatron's pipeline
schedules never read the global (``get_forward_backward_func`` is handed ``num_microbatches``).

The batch of a step is a function of the samples consumed before it (saved in every checkpoint), so a
run resumed mid-warmup takes exactly the batches of an uninterrupted one.
"""

from __future__ import annotations

from megatron.core.num_microbatches_calculator import (
    ConstantNumMicroBatchesCalculator,
    StepBatchsizeNumMicroBatchesCalculator,
)

from megatron_crossbert import schedules
from megatron_crossbert.config import RunConfig


class BatchSchedule:
    """``at(consumed_samples) -> (global batch, micro-batches per DP rank)`` of the step starting there."""

    def __init__(self, run_cfg: RunConfig, dp_size: int, rank: int = 0) -> None:
        train, seq = run_cfg.training, run_cfg.data.seq_length
        self.step_schedule = train.batch_step_schedule(seq)
        self.global_batch, self.seq_length = train.global_batch_size, seq
        try:
            if self.step_schedule is None:
                self._calc = ConstantNumMicroBatchesCalculator(train.global_batch_size, train.micro_batch_size,
                                                               dp_size, False, rank=rank)
            else:
                self._calc = StepBatchsizeNumMicroBatchesCalculator(
                    train.micro_batch_size, dp_size, False, rank=rank, schedule=self.step_schedule, seq_length=seq)
        except AssertionError as err:  # megatron asserts; a user gets one line
            raise ValueError(f"global batch: {err} (micro_batch_size={train.micro_batch_size}, "
                             f"data-parallel size {dp_size})") from None

    def at(self, consumed_samples: int) -> tuple[int, int]:
        """The global batch and the micro-batches per DP rank of the step that starts at ``consumed_samples``."""
        try:
            self._calc.update(consumed_samples, consistency_check=True)
        except AssertionError as err:
            raise ValueError(f"batch-size schedule at {consumed_samples} consumed samples: {err}") from None
        return self._calc.get_current_global_batch_size(), self._calc.get()

    def total_samples(self, train_iters: int) -> int:
        """Samples ``train_iters`` steps consume (the training dataset's size)."""
        if self.step_schedule is None:
            return train_iters * self.global_batch
        return schedules.consumed_after(schedules.sample_points(self.step_schedule, self.seq_length), train_iters)
