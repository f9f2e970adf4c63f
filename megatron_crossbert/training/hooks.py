"""In-training frozen probes (TrainingConfig.probe_interval / probe_tasks).

The probing itself belongs to ``megatron_crossbert.evaluation``; this module only decides when to
call it. The caller hands the probe function in (``train(..., probe_fn=...)``; the pretrain CLI
passes ``megatron_crossbert.evaluation.in_training.probe_in_training``), so training never imports evaluation::

    probe_fn(model, run_cfg, tasks: list[str], iteration: int) -> dict[str, float]
        # metric name -> value; called on EVERY rank (it may run collectives),
        # with the unwrapped model chunk in eval mode and under no_grad

Without a probe function the hook logs once and does nothing, so training never fails because
evaluation extras are missing.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

ProbeFn = Callable[..., dict]
"""``(model, run_cfg, tasks, iteration) -> {metric: value}``."""


class InTrainingProbes:
    """Runs probes every ``probe_interval`` steps; results go to the metrics logger."""

    def __init__(self, run_cfg, logger, probe_fn: ProbeFn | None = None) -> None:
        train = run_cfg.training
        self.run_cfg = run_cfg
        self.logger = logger
        self.interval = train.probe_interval if train.probe_tasks else 0
        self.fn = probe_fn
        if train.probe_tasks and not train.probe_interval:
            logger.print("training.probe_tasks is set but training.probe_interval is 0: the probes never run")
        if self.interval and self.fn is None:
            logger.print("probe_interval is set but no probe function was given to train(); "
                         "in-training probes are disabled")
            self.interval = 0

    def due(self, iteration: int) -> bool:
        return bool(self.interval) and iteration % self.interval == 0

    def __call__(self, model, iteration: int) -> dict[str, float]:
        model.eval()
        try:
            with torch.no_grad():
                results = self.fn(model, self.run_cfg, list(self.run_cfg.training.probe_tasks), iteration)
        finally:
            model.train()
        self.logger.write_scalars(iteration, results, prefix="probe")
        return results
