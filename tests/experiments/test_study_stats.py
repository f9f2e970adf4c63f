"""The study's intervals against scipy on known data."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from experiments.claims.study.stats import (NOT_RESOLVED, mean_interval, paired_difference,
                                                         ratio_interval, verdict)


@pytest.mark.parametrize("values", [[1.0, 2.0, 4.0], [50.1, 49.3, 51.7, 50.0, 48.2], [3.0, 3.5]])
def test_the_mean_interval_is_scipys_t_interval(values):
    ours = mean_interval(values)
    low, high = stats.t.interval(0.95, len(values) - 1, loc=np.mean(values), scale=stats.sem(values))
    assert ours.mean == pytest.approx(np.mean(values))
    assert (ours.low, ours.high) == (pytest.approx(low), pytest.approx(high))


def test_one_value_has_no_interval_and_none_no_mean():
    one = mean_interval([7.0])
    assert (one.mean, one.low, one.high, one.text()) == (7.0, None, None, "7.0 (n=1)")
    assert mean_interval([]) is None and mean_interval([float("nan")]) is None


def test_paired_difference_uses_the_shared_seeds_and_matches_scipys_paired_test():
    a, b = {1: 50.0, 2: 52.0, 3: 49.0, 4: 60.0}, {1: 47.0, 2: 50.5, 3: 47.5}
    diff = paired_difference(a, b)
    assert diff.n == 3 and diff.mean == pytest.approx(2.0)
    # the interval excludes zero exactly when scipy's paired t-test rejects at the 5% level
    p = stats.ttest_rel([a[s] for s in (1, 2, 3)], [b[s] for s in (1, 2, 3)]).pvalue
    assert diff.excludes_zero() == (p < 0.05)


def test_verdicts_only_where_the_interval_excludes_zero():
    assert verdict(mean_interval([1.0, 1.2, 0.9])) == "supported"
    assert verdict(mean_interval([-1.0, -1.2, -0.9])) == "contradicted"
    assert verdict(mean_interval([1.0, -1.0, 0.5])) == NOT_RESOLVED
    assert verdict(mean_interval([3.0])) == NOT_RESOLVED and verdict(None) == NOT_RESOLVED


def test_the_ratio_interval_is_the_log_scale_interval_mapped_back():
    ratios = [1.5, 2.0, 2.5]
    logs = stats.t.interval(0.95, 2, loc=np.mean(np.log(ratios)), scale=stats.sem(np.log(ratios)))
    ours = ratio_interval(ratios)
    assert ours.mean == pytest.approx(stats.gmean(ratios))
    assert (ours.low, ours.high) == (pytest.approx(math.exp(logs[0])), pytest.approx(math.exp(logs[1])))
