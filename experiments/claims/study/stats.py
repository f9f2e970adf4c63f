"""Noise bars for a seeded study: means with Student-t intervals, paired differences, verdicts.

A study repeats every arm with the same seeds; seed ``s`` of two arms shares the data order, so arms
are compared **paired by seed** (the difference per seed, then its interval), which removes the data
order's share of the noise. With n seeds the 95% interval is ``mean +/- t(0.975, n-1) * sd / sqrt(n)``
(scipy's ``stats.t.interval`` gives the same numbers; the tests check it). A claim gets a verdict only
where the interval of the difference excludes zero; otherwise it is "not resolved at this scale".

The sample-efficiency factor is a ratio, so its interval is taken on the log of the per-seed factors
and mapped back (a geometric mean with its interval).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

from scipy import stats as _scipy_stats

LEVEL = 0.95
"""The confidence level of every interval the study reports."""

NOT_RESOLVED = "not resolved at this scale"


@dataclass(frozen=True)
class Interval:
    """A mean over ``n`` values and its two-sided interval (``low``/``high`` None with fewer than 2 values)."""

    mean: float
    low: float | None
    high: float | None
    n: int

    @property
    def half_width(self) -> float | None:
        return None if self.low is None else (self.high - self.low) / 2

    def excludes_zero(self) -> bool:
        return self.low is not None and (self.low > 0 or self.high < 0)

    def text(self, digits: int = 1) -> str:
        """``'45.3 ± 2.1'`` (``'45.3 (n=1)'`` without an interval)."""
        if self.half_width is None:
            return f"{self.mean:.{digits}f} (n={self.n})"
        return f"{self.mean:.{digits}f} ± {self.half_width:.{digits}f}"


def mean_interval(values: Sequence[float], level: float = LEVEL) -> Interval | None:
    """Mean and Student-t interval of ``values`` (None for no values)."""
    values = [float(v) for v in values if v is not None and math.isfinite(v)]
    if not values:
        return None
    n, mean = len(values), sum(values) / len(values)
    if n < 2:
        return Interval(mean, None, None, n)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = _scipy_stats.t.ppf(0.5 + level / 2, n - 1) * sd / math.sqrt(n)
    return Interval(mean, mean - half, mean + half, n)


def paired_difference(a: Mapping[int, float], b: Mapping[int, float], level: float = LEVEL) -> Interval | None:
    """Interval of ``a - b`` over the seeds both have (None when they share none)."""
    common = sorted(set(a) & set(b))
    return mean_interval([a[s] - b[s] for s in common if a[s] is not None and b[s] is not None], level)


def ratio_interval(ratios: Sequence[float], level: float = LEVEL) -> Interval | None:
    """Geometric mean of positive ``ratios`` with the interval of their logs, mapped back."""
    logs = mean_interval([math.log(r) for r in ratios if r is not None and r > 0], level)
    if logs is None:
        return None
    back = (lambda x: None if x is None else math.exp(x))
    return Interval(math.exp(logs.mean), back(logs.low), back(logs.high), logs.n)


def verdict(difference: Interval | None, better: str = "supported", worse: str = "contradicted") -> str:
    """``better`` when the interval lies above zero, ``worse`` below it, else not resolved."""
    if difference is None or not difference.excludes_zero():
        return NOT_RESOLVED
    return better if difference.low > 0 else worse
