"""Training schedules the strongest peers use, as pure functions of the run's position.

Nothing here imports torch or megatron, so ``config`` validates through it. Three schedules:

- **LR: warmup-stable-decay** (``training.lr_decay_style: WSD``; ModernBERT's trapezoid). megatron-core's
  ``OptimizerParamScheduler`` has it (``lr_decay_style="WSD"``, ``wsd_decay_steps``, ``lr_wsd_decay_style``
  exponential | linear | cosine | minus_sqrt): warmup, then ``max_lr`` until ``lr_decay_steps -
  wsd_decay_steps``, then the decay to ``min_lr``. ``scheduler_decay_kwargs`` maps our fields onto it;
  steps are optimizer steps, as for every style here. megatron's scheduler state does not hold the two
  WSD fields, so they come from the run config on resume (``checkpoint.resume_schedule.SCHEDULE_FIELDS`` guards them).
- **Batch-size warmup** (``training.step_batch_size_schedule`` / ``training.rampup_batch_size``).
  megatron-core 0.19 ignores ``rampup_batch_size`` (deprecated) and offers
  ``StepBatchsizeNumMicroBatchesCalculator`` over Megatron-LM's ``--step-batch-size-schedule``
  ``"THRESHOLD:BATCH ..."`` (thresholds in tokens, K/M/B/T suffixes); ``training.batch_schedule`` runs
  it. ``rampup_to_step_schedule`` translates Megatron-LM's ``--rampup-batch-size start incr samples``
  into that form exactly (the removed calculator's formula). The batch is a function of consumed samples
  only, so a resume mid-ramp needs no new checkpoint state.
- **MLM masking rate** (``masking.bert_mask_prob_schedule``): ``MaskRateSchedule.at(sample_index)``, piecewise
  constant (mmBERT's phases 30% -> 15% -> 5%) or linear between points (Ankner et al. 2023), thresholds
  in tokens in the same syntax. A pure function of the global sample index, which the sampler hands out
  in order, so a resumed run masks identically.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

_SUFFIXES = {"K": 10**3, "M": 10**6, "B": 10**9, "T": 10**12}


def parse_count(text: str) -> int:
    """'50B' -> 50_000_000_000; '1.5K' -> 1500 (the suffixes megatron's step schedule accepts)."""
    text = str(text).strip().upper()
    scale = _SUFFIXES.get(text[-1:], 1)
    try:
        return int(float(text[:-1] if scale != 1 else text) * scale)
    except ValueError:
        raise ValueError(f"not a count: {text!r} (a number with an optional K/M/B/T suffix)") from None


def parse_points(text: str, value=float) -> list[tuple[int, float]]:
    """'0:0.3 2.3T:0.15' -> [(0, 0.3), (2_300_000_000_000, 0.15)], sorted as megatron sorts; the first
    threshold must be 0 and thresholds distinct. ``value=int`` parses the values as counts (batch sizes)."""
    points = []
    for entry in str(text).replace(",", " ").split():
        threshold, sep, raw = entry.partition(":")
        if not sep:
            raise ValueError(f"schedule entry {entry!r} must look like THRESHOLD:VALUE")
        points.append((parse_count(threshold), parse_count(raw) if value is int else float(raw)))
    points.sort(key=lambda point: point[0])
    if not points or points[0][0] != 0:
        raise ValueError(f"schedule {text!r} must have an entry at threshold 0")
    if any(b[0] == a[0] for a, b in zip(points, points[1:])):
        raise ValueError(f"schedule {text!r}: two entries share a threshold")
    return points


def _format_points(points: list[tuple[int, int]]) -> str:
    return " ".join(f"{threshold}:{value}" for threshold, value in points)


# --- LR ---------------------------------------------------------------------------------------------

def wsd_decay_steps(train_iters: int, warmup_iters: int, decay_iters: int | None,
                    decay_fraction: float | None) -> int:
    """Optimizer steps of the WSD decay: ``decay_iters`` (Megatron-LM's ``--lr-wsd-decay-iters``) or
    ``round(decay_fraction * train_iters)``; exactly one is given, and the decay fits after the warmup."""
    if (decay_iters is None) == (decay_fraction is None):
        raise ValueError("lr_decay_style=WSD needs exactly one of lr_wsd_decay_iters, lr_wsd_decay_fraction")
    if decay_fraction is not None and not 0.0 < decay_fraction <= 1.0:
        raise ValueError(f"lr_wsd_decay_fraction must be in (0, 1], got {decay_fraction}")
    steps = decay_iters if decay_iters is not None else int(round(decay_fraction * train_iters))
    if not 1 <= steps <= train_iters - warmup_iters:
        raise ValueError(f"the WSD decay ({steps} steps) must fit between the warmup ({warmup_iters} steps) "
                         f"and train_iters={train_iters}")
    return steps


def scheduler_decay_kwargs(train_iters: int, warmup_iters: int, style: str, decay_iters: int | None,
                           decay_fraction: float | None, wsd_style: str) -> dict:
    """The decay arguments of megatron's ``OptimizerParamScheduler`` (optimizer steps; ``TrainingConfig``'s
    fields of the same names, ``TrainingConfig.scheduler_decay_kwargs``)."""
    out = {"lr_decay_style": style, "lr_decay_steps": max(1, train_iters)}
    if style == "WSD":
        out.update(wsd_decay_steps=wsd_decay_steps(train_iters, warmup_iters, decay_iters, decay_fraction),
                   lr_wsd_decay_style=wsd_style)
    return out


# --- batch size --------------------------------------------------------------------------------------

def rampup_to_step_schedule(start: int, increment: int, ramp_samples: int, global_batch: int,
                            seq_length: int) -> str:
    """Megatron-LM's ``--rampup-batch-size start incr samples`` as a step schedule (thresholds in tokens).

    The removed ``RampupBatchsizeNumMicroBatchesCalculator`` gave ``start + int(c / per) * incr`` at
    ``c <= samples`` consumed samples (``per = samples / n``, ``n = (global - start) / incr``) and
    ``global`` after; each threshold is the first consumed count at which that reaches the next size.
    """
    if start <= 0 or increment <= 0 or ramp_samples < 0 or global_batch < start:
        raise ValueError("rampup_batch_size needs start > 0, increment > 0, samples >= 0 and start <= "
                         f"global_batch_size, got [{start}, {increment}, {ramp_samples}] for {global_batch}")
    if (global_batch - start) % increment:
        raise ValueError(f"rampup_batch_size: global_batch_size - start ({global_batch - start}) must be a "
                         f"multiple of the increment ({increment})")
    count = (global_batch - start) // increment
    if count == 0 or ramp_samples == 0:
        return f"0:{global_batch}"
    per = ramp_samples / count
    points = {0: start}
    for k in range(1, count + 1):
        first = max(0, math.ceil(k * per) - 1)
        while int(first / per) < k:
            first += 1
        points[min(first, ramp_samples + 1) * seq_length] = start + k * increment
    return _format_points(sorted(points.items()))


def sample_points(text: str, seq_length: int) -> list[tuple[int, int]]:
    """A batch step schedule (thresholds in tokens) as ``[(consumed-sample threshold, batch)]``,
    converted as megatron converts it (``threshold // seq_length``); thresholds must stay distinct."""
    points = [(threshold // seq_length, int(size)) for threshold, size in parse_points(text, int)]
    if any(b[0] == a[0] for a, b in zip(points, points[1:])):
        raise ValueError(f"batch-size schedule {text!r}: two thresholds fall on the same sample at "
                         f"seq_length={seq_length} (thresholds are tokens)")
    return points


def batch_step_schedule(step_schedule: str | None, rampup: list[int] | None, global_batch: int,
                        micro_batch: int, seq_length: int) -> str | None:
    """The run's batch step schedule from either field (``training.step_batch_size_schedule``,
    ``training.rampup_batch_size``); None means a constant ``global_batch``.

    Its last batch must be ``global_batch`` (what the run trains at after the warmup) and every batch a
    multiple of ``micro_batch``; one line names the problem otherwise.
    """
    if step_schedule and rampup:
        raise ValueError("set training.step_batch_size_schedule or training.rampup_batch_size, not both")
    text = step_schedule
    if rampup:
        if len(rampup) != 3:
            raise ValueError(f"training.rampup_batch_size is [start, increment, ramp samples], got {rampup}")
        text = rampup_to_step_schedule(*rampup, global_batch, seq_length)
    if not text:
        return None
    sizes = [size for _, size in sample_points(text, seq_length)]
    if sizes[-1] != global_batch:
        raise ValueError(f"the batch-size schedule must end at global_batch_size={global_batch}, "
                         f"got {sizes[-1]} ({text!r})")
    odd = [size for size in sizes if size <= 0 or size % micro_batch]
    if odd:
        raise ValueError(f"every batch of the batch-size schedule must be a positive multiple of "
                         f"micro_batch_size={micro_batch}, got {odd}")
    return text


def consumed_after(points: list[tuple[int, int]], steps: int) -> int:
    """Samples ``steps`` optimizer steps consume under ``[(sample threshold, batch)]`` (a step whose start
    is at or past a threshold takes that batch), without stepping a calculator ``steps`` times."""
    consumed, left = 0, steps
    for index, (_, size) in enumerate(points):
        end = points[index + 1][0] if index + 1 < len(points) else None
        if end is not None and consumed >= end:
            continue
        phase = left if end is None else min(left, math.ceil((end - consumed) / size))
        consumed, left = consumed + phase * size, left - phase
        if left == 0:
            break
    return consumed


# --- masking rate ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class MaskRateSchedule:
    """The MLM selection rate as a function of the global sample index (thresholds in tokens)."""

    points: tuple[tuple[int, float], ...]
    style: str = "step"
    """'step': hold each rate until the next threshold (mmBERT); 'linear': interpolate between points."""

    @classmethod
    def parse(cls, text: str, style: str = "step") -> MaskRateSchedule:
        points = tuple(parse_points(text, float))
        if not all(0.0 < rate < 1.0 for _, rate in points):
            raise ValueError(f"masking rates must be in (0, 1): {text!r}")
        return cls(points, style)

    def at(self, sample_index: int, seq_length: int) -> float:
        """The rate of sample ``sample_index``, placed at its first token (``index * seq_length``)."""
        tokens = int(sample_index) * seq_length
        previous = self.points[0]
        for point in self.points[1:]:
            if tokens < point[0]:
                if self.style == "step":
                    return previous[1]
                share = (tokens - previous[0]) / (point[0] - previous[0])
                return previous[1] + share * (point[1] - previous[1])
            previous = point
        return previous[1]


@functools.lru_cache(maxsize=16)
def mask_rate_schedule(text: str, style: str) -> MaskRateSchedule:
    """Parsed once per (schedule, style): masking asks for the rate of every sample."""
    return MaskRateSchedule.parse(text, style)
