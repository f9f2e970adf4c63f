"""In-training frozen probes (TrainingConfig.probe_interval / probe_tasks).

The probing itself belongs to ``megatron_crossbert.evaluation``; this module only decides when to
call it and with what. Contract expected from the evaluation package::

    megatron_crossbert.evaluation.probe_in_training(model, run_cfg, tasks: list[str], iteration: int)
        -> dict[str, float]    # metric name -> value; called on EVERY rank (it may run collectives),
                               # with the unwrapped model chunk in eval mode and under no_grad

If that function is not available the hook logs once and does nothing, so training never fails
because evaluation extras are missing.
"""

from __future__ import annotations

import importlib

import torch

PROBE_MODULE = "megatron_crossbert.evaluation"
PROBE_FUNCTION = "probe_in_training"


def find_probe_function():
    """The evaluation package's in-training probe entry point, or None."""
    try:
        module = importlib.import_module(PROBE_MODULE)
    except ImportError:
        return None
    return getattr(module, PROBE_FUNCTION, None)


class ProbeHook:
    """Runs probes every ``probe_interval`` steps; results go to the metrics logger."""

    def __init__(self, run_cfg, logger) -> None:
        train = run_cfg.training
        self.run_cfg = run_cfg
        self.logger = logger
        self.interval = train.probe_interval if train.probe_tasks else 0
        self.fn = find_probe_function() if self.interval else None
        if self.interval and self.fn is None:
            logger.print(f"probe_interval is set but {PROBE_MODULE}.{PROBE_FUNCTION} is unavailable; "
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
