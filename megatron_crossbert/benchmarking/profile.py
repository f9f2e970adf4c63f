"""Where a training step's time goes: embedding, encoder, decoder, LM head, optimizer, the rest.

Method: clock reads in hooks on the model's top-level components (wall clock with a CUDA sync in
every hook on GPU, which slows the step a little but attributes time correctly; process CPU time
on a shared CPU, like the throughput timing).

* Forward: forward pre/post hooks on each component.
* Backward: a tensor hook on each component's input records when the gradient w.r.t. that input
  is ready. Backward runs the components in reverse order, so a component's backward time is the
  gap between the gradient reaching the input of the component after it and the gradient reaching
  its own input. The last component (``output_layer``) has no later one: its gap is measured from
  the end of its forward, so it includes the loss (vocabulary cross-entropy) forward and backward.
  Module backward hooks are not used: megatron's cross-entropy edits the logits in place, which
  autograd forbids on a hooked module output.
* The optimizer step is timed by wrapping the optimizer's ``step``.
* "other" is what is left of the step: embedding backward (its inputs are token ids, so no hook),
  gradient finalisation, the non-finite checks and schedule overhead.
"""

from __future__ import annotations

import time
from collections import defaultdict
from contextlib import contextmanager

import torch

from megatron_crossbert.benchmarking.step import StepRunner
from megatron_crossbert.results_page.blocks import Column, Table
from megatron_crossbert.results_page.render import render_blocks

COMPONENTS = ("embedding", "encoder", "decoder", "lm_head", "output_layer")


class _Clock:
    """Forward spans, input-gradient timestamps and optimizer spans of one profiled step."""

    def __init__(self, device: torch.device, clock: str = "wall") -> None:
        self.device = device
        self._time = time.process_time if clock == "cpu" else time.perf_counter
        self.totals: dict[str, float] = defaultdict(float)
        self.order: list[str] = []
        self.forward_end: dict[str, float] = {}
        self.grad_ready: dict[str, float] = {}
        self._starts: dict[str, float] = {}

    def now(self) -> float:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return self._time()

    def start(self, key: str) -> None:
        self._starts[key] = self.now()

    def stop(self, key: str) -> float:
        end = self.now()
        self.totals[key] += end - self._starts.pop(key, end)
        return end

    def close_step(self) -> None:
        """Turn this step's input-gradient timestamps into per-component backward times."""
        hooked = [name for name in self.order if name in self.grad_ready]
        for name, later in zip(hooked, hooked[1:] + [None]):
            begin = self.grad_ready[later] if later else self.forward_end[name]
            key = f"{name}.backward" if later else f"{name}.backward+loss"
            self.totals[key] += max(0.0, self.grad_ready[name] - begin)
        self.order, self.forward_end, self.grad_ready = [], {}, {}


def _first_grad_tensor(args: tuple, kwargs: dict) -> torch.Tensor | None:
    for value in list(args) + list(kwargs.values()):
        if isinstance(value, torch.Tensor) and value.requires_grad:
            return value
    return None


def _hook_module(module: torch.nn.Module, name: str, clock: _Clock) -> list:
    def before(_module, args, kwargs):
        clock.order.append(name)
        tensor = _first_grad_tensor(args, kwargs)
        if tensor is not None:
            tensor.register_hook(lambda grad: clock.grad_ready.__setitem__(name, clock.now()))
        clock.start(f"{name}.forward")

    def after(*_):
        clock.forward_end[name] = clock.stop(f"{name}.forward")

    return [module.register_forward_pre_hook(before, with_kwargs=True), module.register_forward_hook(after)]


@contextmanager
def _timed_optimizer(runner: StepRunner, clock: _Clock):
    original = runner.optimizer.step

    def step(*args, **kwargs):
        clock.start("optimizer.step")
        try:
            return original(*args, **kwargs)
        finally:
            clock.stop("optimizer.step")

    runner.optimizer.step = step
    try:
        yield
    finally:
        runner.optimizer.step = original


def profile_step(runner: StepRunner, batch: dict, repeats: int = 2, clock: str = "wall") -> dict:
    """Seconds per component and phase, averaged over ``repeats`` steps, plus shares of the step.

    ``clock='cpu'`` reads process CPU time (for shared CPUs, like the throughput timing).
    """
    clock = _Clock(runner.device, clock)
    model = runner.unwrapped
    handles = []
    for name in COMPONENTS:
        if isinstance(getattr(model, name, None), torch.nn.Module):
            handles += _hook_module(getattr(model, name), name, clock)
    try:
        with _timed_optimizer(runner, clock):
            start = clock.now()
            for _ in range(repeats):
                runner.step(batch)
                clock.close_step()
            total = (clock.now() - start) / repeats
    finally:
        for handle in handles:
            handle.remove()
    parts = {key: value / repeats for key, value in sorted(clock.totals.items())}
    parts["other"] = max(0.0, total - sum(parts.values()))
    return {"step_s": total, "seconds": parts, "share": {k: v / total for k, v in parts.items()}}


def profile_table(profiles: dict[str, dict]) -> Table:
    """One row per model, one column per component/phase (ms, with the share of the step)."""
    order = list(COMPONENTS) + ["optimizer", "other"]
    keys = sorted({key for prof in profiles.values() for key in prof["seconds"]},
                  key=lambda k: (order.index(k.split(".")[0]) if k.split(".")[0] in order else 99, k))
    rows = [[name, prof["step_s"], *[f"{prof['seconds'].get(k, 0) * 1e3:.0f} ({prof['share'].get(k, 0) * 100:.0f}%)"
                                     for k in keys]] for name, prof in profiles.items()]
    return Table([Column("model"), Column("step ms", format=".0f", scale=1e3), *map(Column, keys)], rows)


def profile_markdown(profiles: dict[str, dict]) -> str:
    return render_blocks([profile_table(profiles)])
